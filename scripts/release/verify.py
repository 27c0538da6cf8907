#!/usr/bin/env python3
"""Checks a release built by scripts/release.sh before anything is pushed, and lists it.

    verify.py --dir DIR --repo REPOSITORY --version VERSION --platforms amd64[,arm64] \
        [--helm HELM] [--prebuilt]

DIR/dist is what the release publishes; DIR/work/image-digest the digest `index` recorded.
Exits 1 naming the first thing that disagrees, else prints the listing:

- the image index archive: an OCI layout whose index.json names one image index, tagged
  VERSION, whose digest and size are those of its blob and of DIR/work/image-digest; one
  manifest per expected platform and no other, each blob's digest and size as named, each
  config's architecture and os those of its platform, each layer's diff_id the digest of its
  uncompressed tar, the binary in it an ELF for that machine without a program interpreter,
  and no blob nobody names;
- the standalone binaries, one per platform: ELF for their machine, no interpreter; the
  digest compiled into them (`option_env!`) and not into the image's binary. --prebuilt (a
  test handing in a development build) checks the machine only;
- the charts, one .tgz per chart: name, version and appVersion VERSION, and values naming
  REPOSITORY, VERSION and the digest; with --helm both render with no values set, and the
  webhook's Deployment runs and passes `REPOSITORY:VERSION@DIGEST`;
- the SBOM: SPDX 2.3, describing this crate at VERSION, every other package a crate of
  Cargo.lock with its version and checksum, every dependency of Cargo.toml among them;
- SHA256SUMS: one line per published file, every digest right, no file left out.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
import tomllib

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
ELF_MACHINE = {"amd64": 62, "arm64": 183}
ELF_NAME = {"amd64": "x86_64", "arm64": "aarch64"}
IMAGE_BINARY = "usr/local/bin/passmower-elector"
CHARTS = ["passmower-elector", "passmower-elector-webhook"]
# Written next to SHA256SUMS by the signing step; not themselves summed.
SIGNATURE_SUFFIXES = (".sig", ".pem", ".sigstore.json", ".bundle")


class Disagreement(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Disagreement(msg)


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def elf_facts(data, what):
    """(e_machine, has PT_INTERP) of a 64-bit little-endian ELF."""
    check(data[:4] == b"\x7fELF", f"{what}: not an ELF file")
    check(data[4] == 2 and data[5] == 1, f"{what}: not a 64-bit little-endian ELF")
    machine = struct.unpack_from("<H", data, 18)[0]
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    interp = any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))
    return machine, interp


def check_binary(data, arch, what, static):
    machine, interp = elf_facts(data, what)
    check(machine == ELF_MACHINE[arch], f"{what}: ELF e_machine {machine}, not {ELF_NAME[arch]} for {arch}")
    check(not (static and interp), f"{what}: has a program interpreter (dynamically linked), not static")


def verify_image(path, repo, version, digest, platforms, static):
    check(os.path.isfile(path), f"{path}: missing")
    with tarfile.open(path) as tar:
        files = {os.path.normpath(m.name): m for m in tar.getmembers() if m.isreg()}

        def read(name):
            check(name in files, f"{path}: no {name}")
            return tar.extractfile(files[name]).read()

        used = set()

        def blob(desc, what):
            name = "blobs/sha256/" + desc["digest"].split(":", 1)[1]
            data = read(name)
            check(sha256(data) == desc["digest"], f"{path}: {what} {name}: its content has another digest")
            check(len(data) == desc["size"], f"{path}: {what} {name}: size {len(data)}, named {desc['size']}")
            used.add(name)
            return data

        check(json.loads(read("oci-layout")).get("imageLayoutVersion") == "1.0.0", f"{path}: oci-layout")
        top = json.loads(read("index.json"))["manifests"]
        check(len(top) == 1, f"{path}: index.json names {len(top)} descriptors, not one")
        top = top[0]
        check(top["mediaType"] == MEDIA_INDEX, f"{path}: index.json names a {top['mediaType']}, not an image index")
        ann = top.get("annotations", {})
        check(ann.get("org.opencontainers.image.ref.name") == version,
              f"{path}: tagged {ann.get('org.opencontainers.image.ref.name')!r}, not {version}")
        check(ann.get("io.containerd.image.name") == f"{repo}:{version}",
              f"{path}: named {ann.get('io.containerd.image.name')!r}, not {repo}:{version}")
        check(top["digest"] == digest, f"{path}: image index {top['digest']}, but the release recorded {digest}")
        index = json.loads(blob(top, "image index"))
        check(index.get("mediaType") == MEDIA_INDEX, f"{path}: the image index blob has mediaType {index.get('mediaType')}")
        found = []
        rows = []
        for desc in index["manifests"]:
            plat = desc.get("platform", {})
            arch = plat.get("architecture")
            check(desc["mediaType"] == MEDIA_MANIFEST, f"{path}: {arch}: not an image manifest")
            check(plat.get("os") == "linux", f"{path}: platform os {plat.get('os')!r}")
            check(arch in ELF_MACHINE, f"{path}: platform architecture {arch!r}")
            check(arch not in found, f"{path}: linux/{arch} twice")
            found.append(arch)
            manifest = json.loads(blob(desc, f"linux/{arch} manifest"))
            check(manifest.get("mediaType") == MEDIA_MANIFEST, f"{path}: linux/{arch}: manifest mediaType")
            config = json.loads(blob(manifest["config"], f"linux/{arch} config"))
            check(config.get("architecture") == arch and config.get("os") == "linux",
                  f"{path}: linux/{arch}: the config says {config.get('os')}/{config.get('architecture')}")
            diff_ids = config["rootfs"]["diff_ids"]
            check(len(diff_ids) == len(manifest["layers"]), f"{path}: linux/{arch}: diff_ids and layers differ in number")
            binary = None
            for layer, diff_id in zip(manifest["layers"], diff_ids):
                plain = gzip.decompress(blob(layer, f"linux/{arch} layer"))
                check(sha256(plain) == diff_id, f"{path}: linux/{arch}: a layer's diff_id is not its uncompressed digest")
                with tarfile.open(fileobj=io.BytesIO(plain)) as layer_tar:
                    for m in layer_tar.getmembers():
                        if os.path.normpath(m.name) == IMAGE_BINARY and m.isreg():
                            binary = layer_tar.extractfile(m).read()
            check(binary is not None, f"{path}: linux/{arch}: no /{IMAGE_BINARY}")
            check_binary(binary, arch, f"{path}: linux/{arch}: /{IMAGE_BINARY}", static)
            rows.append((arch, desc["digest"], len(binary), binary))
        check(sorted(found) == sorted(platforms),
              f"{path}: platforms {', '.join(sorted(found))}, expected {', '.join(sorted(platforms))}")
        stray = sorted(n for n in files if n.startswith("blobs/") and n not in used)
        check(not stray, f"{path}: blobs nobody names: {', '.join(stray)}")
    return rows


def chart_file(tgz, name, member):
    with tarfile.open(tgz, "r:gz") as tar:
        try:
            return tar.extractfile(f"{name}/{member}").read().decode()
        except KeyError:
            raise Disagreement(f"{tgz}: no {name}/{member}")


def yaml_scalar(text, key, indent=""):
    """The value of `KEY:` at that indent (top level by default), unquoted."""
    m = re.search(rf"^{indent}{key}:[ \t]*(.*?)[ \t]*$", text, re.M)
    if not m:
        return None
    value = m.group(1)
    if value.startswith('"'):
        return json.loads(value)
    return value.strip("'")


def verify_chart(tgz, name, repo, version, digest, helm):
    check(os.path.isfile(tgz), f"{tgz}: missing")
    meta = chart_file(tgz, name, "Chart.yaml")
    for key in ("version", "appVersion"):
        check(yaml_scalar(meta, key) == version, f"{tgz}: Chart.yaml {key} {yaml_scalar(meta, key)!r}, not {version}")
    check(yaml_scalar(meta, "name") == name, f"{tgz}: Chart.yaml name {yaml_scalar(meta, 'name')!r}")
    values = chart_file(tgz, name, "values.yaml")
    block = re.search(r"^image:\n((?:[ \t].*\n|#.*\n|\n)*)", values, re.M)
    check(block, f"{tgz}: values.yaml has no image: block")
    image = block.group(1)
    for key, want in (("repository", repo), ("tag", version), ("digest", digest)):
        got = yaml_scalar(image, key, "  ")
        check(got == want, f"{tgz}: values image.{key} {got!r}, not {want!r}")
    ref = f"{repo}:{version}@{digest}"
    if helm:
        out = subprocess.run([helm, "template", "release", tgz, "-n", "verify"], capture_output=True, text=True)
        check(out.returncode == 0, f"{tgz}: helm template with no values fails: {out.stderr.strip()}")
        if name == "passmower-elector-webhook":
            check(f"image: {ref}" in out.stdout, f"{tgz}: the webhook Deployment does not run {ref}")
            check(f'"--image={ref}"' in out.stdout, f"{tgz}: the webhook is not passed --image={ref}")
    return ref


def verify_sbom(path, version):
    check(os.path.isfile(path), f"{path}: missing")
    with open(path) as f:
        doc = json.load(f)
    check(doc.get("spdxVersion") == "SPDX-2.3", f"{path}: spdxVersion {doc.get('spdxVersion')!r}")
    with open("Cargo.lock", "rb") as f:
        lock = {(p["name"], p["version"]): p.get("checksum") for p in tomllib.load(f)["package"]}
    with open("Cargo.toml", "rb") as f:
        manifest = tomllib.load(f)
    ids = {p["SPDXID"]: p for p in doc["packages"]}
    described = [r["relatedSpdxElement"] for r in doc["relationships"] if r["relationshipType"] == "DESCRIBES"]
    check(len(described) == 1, f"{path}: describes {len(described)} packages, not one")
    root = ids.get(described[0])
    check(root and root["name"] == manifest["package"]["name"] and root["versionInfo"] == version,
          f"{path}: describes {root and root['name']} {root and root['versionInfo']}, not {manifest['package']['name']} {version}")
    names = set()
    for p in doc["packages"]:
        if p is root:
            continue
        key = (p["name"], p["versionInfo"])
        check(key in lock, f"{path}: {p['name']} {p['versionInfo']} is not in Cargo.lock")
        sums = [c["checksumValue"] for c in p.get("checksums", []) if c["algorithm"] == "SHA256"]
        check(sums == ([lock[key]] if lock[key] else []), f"{path}: {p['name']} {p['versionInfo']}: checksum is not Cargo.lock's")
        names.add(p["name"])
    direct = set(manifest.get("dependencies", {}))
    missing = sorted(direct - names)
    check(not missing, f"{path}: dependencies of Cargo.toml missing: {', '.join(missing)}")
    return len(doc["packages"])


def verify_checksums(dist):
    path = os.path.join(dist, "SHA256SUMS")
    check(os.path.isfile(path), f"{path}: missing")
    listed = {}
    with open(path) as f:
        for line in f:
            m = re.fullmatch(r"([0-9a-f]{64})  (\S+)\n?", line)
            check(m, f"{path}: malformed line {line!r}")
            listed[m.group(2)] = m.group(1)
    published = sorted(n for n in os.listdir(dist)
                       if n != "SHA256SUMS" and not n.endswith(SIGNATURE_SUFFIXES))
    check(sorted(listed) == published,
          f"{path}: lists {', '.join(sorted(listed))}; the release has {', '.join(published)}")
    for name, digest in listed.items():
        check(file_sha256(os.path.join(dist, name)) == digest, f"{path}: {name}: its sha256 is not the listed one")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--platforms", required=True, help="comma-separated: amd64,arm64")
    ap.add_argument("--helm")
    ap.add_argument("--prebuilt", action="store_true")
    args = ap.parse_args()
    platforms = [p for p in args.platforms.split(",") if p]
    dist = os.path.join(args.dir, "dist")
    v = args.version
    try:
        digest_file = os.path.join(args.dir, "work", "image-digest")
        check(os.path.isfile(digest_file), f"{digest_file}: missing (the index step records it)")
        with open(digest_file) as f:
            digest = f.read().strip()
        check(re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{digest_file}: {digest!r} is no digest")
        index_path = os.path.join(dist, f"passmower-elector-image-{v}.oci.tar")
        rows = verify_image(index_path, args.repo, v, digest, platforms, not args.prebuilt)
        binaries = []
        for arch in sorted(platforms):
            path = os.path.join(dist, f"passmower-elector-{v}-linux-{arch}")
            check(os.path.isfile(path), f"{path}: missing")
            with open(path, "rb") as f:
                data = f.read()
            check_binary(data, arch, path, not args.prebuilt)
            if not args.prebuilt:
                # The digest is only ever compiled in (the repository may be in any build as
                # the project's own); release.sh runs the binaries its machine can run.
                check(digest.encode() in data,
                      f"{path}: does not hold {digest} (built without PME_RELEASE_IMAGE_DIGEST?)")
                image_binary = next(r[3] for r in rows if r[0] == arch)
                check(digest.encode() not in image_binary,
                      f"{index_path}: linux/{arch}: its binary holds its own image's digest, which cannot be")
            binaries.append((os.path.basename(path), ELF_NAME[arch], len(data)))
        charts = []
        for name in CHARTS:
            tgz = os.path.join(dist, f"{name}-{v}.tgz")
            charts.append((os.path.basename(tgz), verify_chart(tgz, name, args.repo, v, digest, args.helm)))
        sbom = os.path.join(dist, f"passmower-elector-{v}.spdx.json")
        packages = verify_sbom(sbom, v)
        sums = verify_checksums(dist)
    except Disagreement as e:
        print(f"verify: FAIL: {e}", file=sys.stderr)
        sys.exit(1)

    print(f"image index  {args.repo}:{v}@{digest}")
    print(f"  archive    {os.path.basename(index_path)} ({os.path.getsize(index_path)} bytes)")
    for arch, manifest_digest, size, _ in rows:
        print(f"  linux/{arch:<7}manifest {manifest_digest} (binary {size} bytes, {ELF_NAME[arch]})")
    print("charts")
    for name, ref in charts:
        print(f"  {name:<42}image {ref}")
    print("binaries")
    for name, machine, size in binaries:
        print(f"  {name:<42}{machine}, {size} bytes")
    print(f"sbom         {os.path.basename(sbom)} (SPDX 2.3, {packages} packages)")
    print("SHA256SUMS")
    with open(sums) as f:
        for line in f:
            print(f"  {line.rstrip()}")
    print("verify: OK", file=sys.stderr)


if __name__ == "__main__":
    main()
