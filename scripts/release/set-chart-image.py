#!/usr/bin/env python3
"""Writes the release's image into a chart's values.yaml (a copy, before `helm package`).

    set-chart-image.py CHART_DIR REPOSITORY TAG DIGEST

Sets `image.repository`, `image.tag` and `image.digest` in the top-level `image:` block and
nothing else: the lines keep their comments and order, so the packaged values read as the
source's. Each key must be in that block exactly once, else nothing is written and it exits 2.
"""

import json
import os
import re
import sys


def fail(msg):
    print(f"set-chart-image: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    if len(sys.argv) != 5:
        fail("usage: set-chart-image.py CHART_DIR REPOSITORY TAG DIGEST")
    chart, repository, tag, digest = sys.argv[1:]
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        fail(f"digest {digest!r}: expected sha256: and 64 lower-case hex digits")
    path = os.path.join(chart, "values.yaml")
    with open(path) as f:
        lines = f.read().split("\n")
    wanted = {"repository": repository, "tag": tag, "digest": digest}
    found = {key: 0 for key in wanted}
    in_image = False
    for i, line in enumerate(lines):
        if re.match(r"^\S", line) and not line.startswith("#"):
            in_image = line.rstrip() == "image:"
            continue
        m = re.match(r"^  (repository|tag|digest):(\s.*)?$", line) if in_image else None
        if m:
            key = m.group(1)
            found[key] += 1
            # JSON strings are YAML double-quoted scalars.
            lines[i] = f"  {key}: {json.dumps(wanted[key])}"
    missing = [f"image.{key} ({n} times)" for key, n in found.items() if n != 1]
    if missing:
        fail(f"{path}: each key once in the top-level image: block, found " + ", ".join(missing))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
