#!/usr/bin/env python3
"""Writes the release's SBOM: an SPDX 2.3 JSON document of the crates built into the binaries.

    sbom.py --out passmower-elector-0.1.0.spdx.json --target x86_64-unknown-linux-gnu \
        [--target aarch64-unknown-linux-gnu] [--source-url URL]

What is listed comes from `cargo metadata --locked --filter-platform TARGET` (the resolve graph
of Cargo.lock for that target, as cargo builds it): from this crate, every dependency reached
through normal or build dependencies, never through dev-dependencies, for every target given.
Each crate carries its version, its SHA-256 from Cargo.lock, its declared licence (the `license`
field; `MIT/Apache-2.0` read as `MIT OR Apache-2.0`), its download location and its purl, and the
relationships say who depends on whom (`DEPENDS_ON`, `BUILD_DEPENDENCY_OF` for build scripts'
dependencies, which are not linked in).

Why a script and not a tool: the data is all in cargo's own resolve graph, SPDX's JSON is a
flat format, and the well-kept generators (cargo-cyclonedx, cargo-sbom, syft) would each add a
build of their own dependency tree to every CI run for what is 150 lines of standard-library
Python. The document is reproducible: its time is SOURCE_DATE_EPOCH and its namespace a hash of
Cargo.lock and the targets.
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import tomllib

REGISTRY = "registry+https://github.com/rust-lang/crates.io-index"


def fail(msg):
    print(f"sbom: {msg}", file=sys.stderr)
    sys.exit(2)


def metadata(target):
    cmd = ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", target]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as e:
        fail(f"{' '.join(cmd)}: {e.stderr.strip()}")
    return json.loads(out)


def spdx_id(name, version):
    return "SPDXRef-Package-" + re.sub(r"[^A-Za-z0-9.-]", "-", f"{name}-{version}")


def license_expression(license):
    if not license:
        return "NOASSERTION"
    # Cargo's old `A/B` form means either licence.
    return " OR ".join(part.strip() for part in license.split("/")) if "/" in license else license


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--target", action="append", required=True, dest="targets")
    ap.add_argument("--source-url", default="https://github.com/passmower/passmower-elector")
    args = ap.parse_args()

    with open("Cargo.lock", "rb") as f:
        lock = tomllib.load(f)
    checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}

    packages = {}  # id -> cargo package
    edges = set()  # (from id, to id, "normal" | "build")
    root = None
    for target in sorted(set(args.targets)):
        meta = metadata(target)
        by_id = {p["id"]: p for p in meta["packages"]}
        nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
        root = meta["resolve"]["root"]
        seen, todo = set(), [root]
        while todo:
            node_id = todo.pop()
            if node_id in seen:
                continue
            seen.add(node_id)
            packages[node_id] = by_id[node_id]
            for dep in nodes[node_id]["deps"]:
                kinds = {k["kind"] for k in dep["dep_kinds"]}
                if kinds <= {"dev"}:
                    continue
                edges.add((node_id, dep["pkg"], "normal" if None in kinds else "build"))
                todo.append(dep["pkg"])
    if root is None:
        fail("no target")

    root_pkg = packages[root]
    version = root_pkg["version"]
    doc_packages, relationships = [], []
    ids = {}
    for pkg_id, pkg in sorted(packages.items(), key=lambda kv: (kv[1]["name"], kv[1]["version"])):
        sid = spdx_id(pkg["name"], pkg["version"])
        ids[pkg_id] = sid
        entry = {
            "SPDXID": sid,
            "name": pkg["name"],
            "versionInfo": pkg["version"],
            "supplier": "NOASSERTION",
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": license_expression(pkg.get("license")),
            "copyrightText": "NOASSERTION",
        }
        if pkg_id == root:
            entry["downloadLocation"] = f"git+{args.source_url}@v{version}"
            entry["primaryPackagePurpose"] = "APPLICATION"
            entry["externalRefs"] = [{
                "referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                "referenceLocator": f"pkg:github/{'/'.join(args.source_url.rstrip('/').split('/')[-2:])}@v{version}",
            }]
        else:
            source = pkg.get("source") or ""
            if source == REGISTRY:
                entry["downloadLocation"] = (
                    f"https://crates.io/api/v1/crates/{pkg['name']}/{pkg['version']}/download")
            elif source.startswith("git+"):
                entry["downloadLocation"] = source
            else:
                entry["downloadLocation"] = "NOASSERTION"
            checksum = checksums.get((pkg["name"], pkg["version"]))
            if checksum:
                entry["checksums"] = [{"algorithm": "SHA256", "checksumValue": checksum}]
            entry["primaryPackagePurpose"] = "LIBRARY"
            entry["externalRefs"] = [{
                "referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                "referenceLocator": f"pkg:cargo/{pkg['name']}@{pkg['version']}",
            }]
        doc_packages.append(entry)
    relationships.append({"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                          "relatedSpdxElement": ids[root]})
    for src, dst, kind in sorted(edges):
        if kind == "normal":
            relationships.append({"spdxElementId": ids[src], "relationshipType": "DEPENDS_ON",
                                  "relatedSpdxElement": ids[dst]})
        else:
            relationships.append({"spdxElementId": ids[dst], "relationshipType": "BUILD_DEPENDENCY_OF",
                                  "relatedSpdxElement": ids[src]})

    with open("Cargo.lock", "rb") as f:
        lock_hash = hashlib.sha256(f.read() + " ".join(sorted(set(args.targets))).encode()).hexdigest()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    document = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{root_pkg['name']}-{version}",
        "documentNamespace": f"{args.source_url.rstrip('/')}/releases/v{version}/sbom/{lock_hash}",
        "creationInfo": {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
            "creators": ["Tool: passmower-elector-scripts/release/sbom.py"],
            "comment": "Crates built into the binaries for " + ", ".join(sorted(set(args.targets))),
        },
        "packages": doc_packages,
        "relationships": relationships,
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(document, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"sbom: wrote {args.out}: {len(doc_packages)} packages for {', '.join(sorted(set(args.targets)))}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
