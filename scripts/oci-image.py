#!/usr/bin/env python3
"""Writes an OCI image archive (an OCI image layout packed in one tar) without a container engine.

    oci-image.py --out img.tar --ref ghcr.io/x/y:1.0 --arch arm64 \
        --file ./bin/tool:/usr/local/bin/tool:0755 \
        --dir ./rootfs \
        --user 65532:65532 --entrypoint '["/usr/local/bin/tool"]' --label k=v

    oci-image.py --out all.tar --ref ghcr.io/x/y:1.0 --from amd64.tar --from arm64.tar

Each --dir or --file option adds one layer, in order. The archive holds `oci-layout`,
`index.json` (annotated with the reference, so `ctr images import` names the image and
`skopeo copy oci-archive:img.tar docker://REGISTRY/NAME:TAG` can push it) and the blobs: one
gzipped tar per layer, the image config and the manifest, each named by its sha256.

--arch is amd64 or arm64 (default: this machine's); any other is refused, and so is a --file
that is an ELF executable for another machine. With --from, the single-platform archives given
are combined into one multi-platform image: `index.json` names an image index (one manifest
per platform, each platform once) that `skopeo copy --all` pushes whole and a runtime resolves
to its own platform. --digest-file writes the digest of what the reference names (the
manifest, or the image index) to a file.

The output is reproducible: entries are sorted, timestamps are SOURCE_DATE_EPOCH (default 0),
gzip headers carry no name or time, and --file entries belong to 0:0. So the same inputs give
the same digests, and a cache keyed by its inputs stays honest.

Python's standard library only (tarfile, gzip, hashlib, json): Python 3 is on every machine that
builds this project and on most that would build the image, and this is the whole of what an
image builder has to do once the files are compiled. No third-party code, no Docker.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import struct
import sys
import tarfile
import tempfile
import time

EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
# The OCI (Go) architecture names this builder writes, each with its ELF e_machine. Anything
# else is refused rather than guessed: an image labelled for the wrong machine only fails once
# a node pulls it ("exec format error").
ARCHES = {"amd64": 62, "arm64": 183}
ELF_MACHINES = {3: "i386", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm", 62: "x86_64",
                183: "aarch64", 243: "riscv64"}
HOST_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class HashingWriter(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `inner`."""

    def __init__(self, inner):
        self.inner = inner
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self):
        return True

    def write(self, data):
        self.sha.update(data)
        self.size += len(data)
        if self.inner is not None:
            self.inner.write(data)
        return len(data)


def fail(msg):
    print(f"oci-image: {msg}", file=sys.stderr)
    sys.exit(2)


def check_arch(arch):
    if arch not in ARCHES:
        fail(f"--arch {arch!r}: unknown architecture; this builder writes {' and '.join(sorted(ARCHES))} "
             "(the OCI names of x86_64 and aarch64 Linux) and maps nothing else")
    return arch


def host_arch():
    machine = platform.machine()
    if machine not in HOST_ARCHES:
        fail(f"this machine is {machine!r}, which is neither amd64 nor arm64: pass --arch")
    return HOST_ARCHES[machine]


def elf_machine(path):
    """The e_machine of an ELF file, or None for a file that is no ELF."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return struct.unpack("<H" if head[5] == 1 else ">H", head[18:20])[0]


def check_elf(src, arch):
    machine = elf_machine(src)
    if machine is not None and machine != ARCHES[arch]:
        name = ELF_MACHINES.get(machine, f"e_machine {machine}")
        fail(f"--file {src}: an ELF file for {name}, not for --arch {arch}")


def parents(path):
    """'usr/local/bin/x' -> ['usr', 'usr/local', 'usr/local/bin']."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def add_dir_tree(tar, root):
    """Every entry under `root`, sorted, with its own owner and mode and a fixed mtime."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        if rel != ".":
            entries.append(rel)
        # os.walk lists symlinks to directories among dirnames and does not follow them.
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            entries.append(os.path.normpath(os.path.join(rel, name)))
    for rel in sorted(set(entries)):
        info = tar.gettarinfo(os.path.join(root, rel), arcname=rel)
        info.mtime = min(info.mtime, EPOCH) if EPOCH else 0
        info.uname = info.gname = ""
        if info.isreg():
            with open(os.path.join(root, rel), "rb") as f:
                tar.addfile(info, f)
        else:
            tar.addfile(info)


def add_file(tar, spec, seen_dirs, arch):
    """SRC:DEST[:MODE] -> DEST in the image, owned by 0:0, parents created as 0755 dirs."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        fail(f"--file {spec!r}: expected SRC:DEST or SRC:DEST:MODE")
    src, dest = parts[0], parts[1].lstrip("/")
    mode = int(parts[2], 8) if len(parts) == 3 else 0o644
    if not os.path.isfile(src):
        fail(f"--file {spec!r}: {src} is not a file")
    check_elf(src, arch)
    for d in parents(dest):
        if d in seen_dirs:
            continue
        seen_dirs.add(d)
        info = tarfile.TarInfo(d)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
        tar.addfile(info)
    info = tarfile.TarInfo(dest)
    info.size, info.mode, info.mtime = os.path.getsize(src), mode, EPOCH
    with open(src, "rb") as f:
        tar.addfile(info, f)


def write_layer(blobs, fill, level):
    """Runs `fill(tar)` into a gzipped layer blob; returns (descriptor, diff_id)."""
    tmp = tempfile.NamedTemporaryFile(dir=blobs, delete=False)
    try:
        compressed = HashingWriter(tmp)
        with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=level) as gz:
            plain = HashingWriter(gz)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                fill(tar)
        tmp.close()
        digest = compressed.sha.hexdigest()
        os.replace(tmp.name, os.path.join(blobs, digest))
    except BaseException:
        os.unlink(tmp.name)
        raise
    desc = {"mediaType": MEDIA_LAYER, "digest": f"sha256:{digest}", "size": compressed.size}
    return desc, f"sha256:{plain.sha.hexdigest()}"


def write_blob(blobs, media, obj):
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return {"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)}


def ref_annotations(ref):
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else "latest"
    # containerd names an imported image by the first; OCI tools select by ref.name.
    return {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag}


def write_layout(work, top, out):
    """index.json naming `top`, oci-layout, and the blobs of `work`, packed into `out`."""
    blobs = os.path.join(work, "blobs", "sha256")
    index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [top]}
    with open(os.path.join(work, "index.json"), "w") as f:
        json.dump(index, f, sort_keys=True, separators=(",", ":"))
    with open(os.path.join(work, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    tmp_out = out + ".tmp"
    with tarfile.open(tmp_out, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in ["oci-layout", "index.json", "blobs", "blobs/sha256"] + sorted(
            f"blobs/sha256/{b}" for b in os.listdir(blobs)
        ):
            info = tar.gettarinfo(os.path.join(work, rel), arcname=rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
            if info.isreg():
                with open(os.path.join(work, rel), "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    os.replace(tmp_out, out)


def read_single_platform(path, blobs):
    """Copies the blobs of a one-image archive into `blobs`, each checked against its name, and
    returns its manifest's descriptor (media type, digest, size, platform from its config)."""
    if not os.path.isfile(path):
        fail(f"--from {path}: not a file")
    try:
        tar = tarfile.open(path)
    except tarfile.TarError as e:
        fail(f"--from {path}: not a tar archive ({e})")
    with tar:
        names = {}
        for m in tar.getmembers():
            names[os.path.normpath(m.name)] = m

        def read(name):
            member = names.get(name)
            if member is None or not member.isreg():
                fail(f"--from {path}: no {name} in it (not an OCI image archive of this builder)")
            return tar.extractfile(member).read()

        index = json.loads(read("index.json"))
        manifests = index.get("manifests", [])
        if len(manifests) != 1 or manifests[0].get("mediaType") != MEDIA_MANIFEST:
            fail(f"--from {path}: index.json must name exactly one image manifest, names {len(manifests)}")

        def copy(desc):
            digest = desc["digest"].split(":", 1)[1]
            data = read(f"blobs/sha256/{digest}")
            if hashlib.sha256(data).hexdigest() != digest or len(data) != desc["size"]:
                fail(f"--from {path}: blob {desc['digest']} does not match its digest or size")
            with open(os.path.join(blobs, digest), "wb") as f:
                f.write(data)
            return data

        desc = manifests[0]
        manifest = json.loads(copy(desc))
        config = json.loads(copy(manifest["config"]))
        for layer in manifest["layers"]:
            copy(layer)
        arch, os_name = config.get("architecture"), config.get("os")
        check_arch(arch)
        declared = desc.get("platform")
        if declared and declared != {"architecture": arch, "os": os_name}:
            fail(f"--from {path}: index.json says {declared}, its config {arch}/{os_name}")
        return {"mediaType": MEDIA_MANIFEST, "digest": desc["digest"], "size": desc["size"],
                "platform": {"architecture": arch, "os": os_name}}


def combine(args, work):
    """--from: one image index over single-platform archives, each platform once."""
    blobs = os.path.join(work, "blobs", "sha256")
    entries = []
    for path in args.sources:
        desc = read_single_platform(path, blobs)
        plat = desc["platform"]
        if any(e["platform"] == plat for e in entries):
            fail(f"--from {path}: a second image for {plat['os']}/{plat['architecture']}")
        entries.append(desc)
    entries.sort(key=lambda e: (e["platform"]["os"], e["platform"]["architecture"]))
    image_index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": entries}
    top = write_blob(blobs, MEDIA_INDEX, image_index)
    top["annotations"] = ref_annotations(args.ref)
    write_layout(work, top, args.out)
    platforms = ", ".join(f"{e['platform']['os']}/{e['platform']['architecture']}" for e in entries)
    print(f"oci-image: wrote {args.out} ({os.path.getsize(args.out)} bytes) ref {args.ref} "
          f"index {top['digest']} platforms {platforms}", file=sys.stderr)
    return top["digest"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the archive to write (replaced atomically)")
    ap.add_argument("--ref", required=True, help="full image reference, e.g. docker.io/local/x:1")
    ap.add_argument("--dir", action="append", default=[], dest="dirs", help="a directory tree: one layer")
    ap.add_argument("--file", action="append", default=[], dest="files", help="SRC:DEST[:MODE]; all --file options form one layer")
    ap.add_argument("--entrypoint", help="JSON array")
    ap.add_argument("--cmd", help="JSON array")
    ap.add_argument("--user")
    ap.add_argument("--workdir")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE")
    ap.add_argument("--label", action="append", default=[], help="KEY=VALUE")
    ap.add_argument("--arch", help="amd64 or arm64 (default: this machine's)")
    ap.add_argument("--gzip-level", type=int, default=6, help="1 is fastest (default 6)")
    ap.add_argument("--from", action="append", default=[], dest="sources",
                    help="a single-platform archive of this builder; several make one multi-platform image")
    ap.add_argument("--digest-file", help="write the digest the reference names here")
    args = ap.parse_args()

    if ":" not in args.ref.rsplit("/", 1)[-1] and "@" not in args.ref:
        fail(f"--ref {args.ref!r}: give a tag (name:tag)")
    if args.sources:
        if args.dirs or args.files or args.arch:
            fail("--from combines archives: it takes no --dir, --file or --arch")
        work = tempfile.mkdtemp(prefix="oci-index-", dir=os.path.dirname(os.path.abspath(args.out)))
        try:
            os.makedirs(os.path.join(work, "blobs", "sha256"))
            digest = combine(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if args.digest_file:
            with open(args.digest_file, "w") as f:
                f.write(digest + "\n")
        return
    args.arch = check_arch(args.arch) if args.arch else host_arch()
    config = {}
    for key, raw in (("Entrypoint", args.entrypoint), ("Cmd", args.cmd)):
        if raw is not None:
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as e:
                fail(f"--{key.lower()} {raw!r}: not JSON ({e})")
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                fail(f"--{key.lower()} {raw!r}: must be a JSON array of strings")
            config[key] = value
    if args.user:
        config["User"] = args.user
    if args.workdir:
        config["WorkingDir"] = args.workdir
    env = args.env or []
    if not any(e.startswith("PATH=") for e in env):
        env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + env
    config["Env"] = env
    labels = {}
    for kv in args.label:
        k, sep, v = kv.partition("=")
        if not sep:
            fail(f"--label {kv!r}: expected KEY=VALUE")
        labels[k] = v
    if labels:
        config["Labels"] = labels

    work = tempfile.mkdtemp(prefix="oci-image-", dir=os.path.dirname(os.path.abspath(args.out)))
    try:
        blobs = os.path.join(work, "blobs", "sha256")
        os.makedirs(blobs)
        layers, diff_ids, history = [], [], []
        for d in args.dirs:
            if not os.path.isdir(d):
                fail(f"--dir {d}: not a directory")
            desc, diff = write_layer(blobs, lambda tar, d=d: add_dir_tree(tar, d), args.gzip_level)
            layers.append(desc)
            diff_ids.append(diff)
            history.append({"created_by": f"oci-image.py --dir {os.path.basename(os.path.normpath(d))}"})
        if args.files:
            seen = set()

            def fill(tar):
                for spec in args.files:
                    add_file(tar, spec, seen, args.arch)

            desc, diff = write_layer(blobs, fill, args.gzip_level)
            layers.append(desc)
            diff_ids.append(diff)
            history.append({"created_by": "oci-image.py --file " + " --file ".join(s.split(":")[1] for s in args.files)})
        if not layers:
            fail("no layer: give --dir or --file")
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH))
        image_config = {
            "architecture": args.arch,
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": history,
        }
        image_config["created"] = created
        config_desc = write_blob(blobs, MEDIA_CONFIG, image_config)
        manifest = {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config_desc, "layers": layers}
        manifest_desc = write_blob(blobs, MEDIA_MANIFEST, manifest)
        manifest_desc["annotations"] = ref_annotations(args.ref)
        manifest_desc["platform"] = {"architecture": args.arch, "os": "linux"}
        write_layout(work, manifest_desc, args.out)
        size = os.path.getsize(args.out)
        print(f"oci-image: wrote {args.out} ({size} bytes, {len(layers)} layer(s)) "
              f"ref {args.ref} linux/{args.arch} manifest {manifest_desc['digest']}", file=sys.stderr)
        if args.digest_file:
            with open(args.digest_file, "w") as f:
                f.write(manifest_desc["digest"] + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
