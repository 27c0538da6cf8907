#!/usr/bin/env bash
# Prepares an upstream Passmower tree to run as a plain process in the integration tests
# (tests/api/idle_namespace.rs runs a real follower against the real apiserver): a copy of the
# tree's src/ with `npm install --omit=dev` beside it, cached by the package files, the source
# and the Node version, so a warm run only checks it is there. Any generation under
# ../shared/upstream/ works (1.3.0 in passmower/, the 2.2 era in passmower-before-election/,
# 2.4 in passmower-with-election/); a tree without a package-lock.json is installed from its
# package.json ranges.
#
# Prints the app directory (for PME_PASSMOWER_APP) on its last line of stdout.
# Environment: PME_UPSTREAM (default ../shared/upstream/passmower), PME_CACHE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

UPSTREAM="${PME_UPSTREAM:-$PWD/../shared/upstream/passmower}"
# shellcheck source=scripts/lib/build.sh
. scripts/lib/build.sh
build_start passmower-app
[[ -f "$UPSTREAM/package.json" && -d "$UPSTREAM/src" ]] || die "no Passmower tree at $UPSTREAM (PME_UPSTREAM)"
command -v npm >/dev/null || die "npm is required"
sha() { sha256sum | cut -c1-16; }

build_scratch "${TMPDIR:-/tmp}"
# @codemowers/oidc-key-manager ^1.2.0 is not in the npm registry and src/ never imports it
# (../shared/upstream/README.md).
python3 - "$UPSTREAM/package.json" "$work/package.json" <<'PY'
import json, sys
pkg = json.load(open(sys.argv[1]))
pkg.get("dependencies", {}).pop("@codemowers/oidc-key-manager", None)
json.dump(pkg, open(sys.argv[2], "w"), indent=2)
PY
lock=()
[[ -f "$UPSTREAM/package-lock.json" ]] && lock=("$UPSTREAM/package-lock.json")
key="$( (cat "$work/package.json" "${lock[@]}"; node --version;
  cd "$UPSTREAM" && find src -type f -print0 | sort -z | xargs -0 sha256sum) | sha)"
app="$CACHE/passmower-app-$key"
if [[ ! -f "$app/.complete" ]]; then
  log "npm install --omit=dev into $app (a minute or two)"
  rm -rf "$app" "$app.tmp"
  mkdir -p "$app.tmp"
  cp "$work/package.json" "${lock[@]}" "$app.tmp/"
  cp -a "$UPSTREAM/src" "$app.tmp/src"
  (cd "$app.tmp" && npm install --omit=dev --no-audit --no-fund --loglevel=error >&2)
  touch "$app.tmp/.complete"
  mv "$app.tmp" "$app"
fi
log "app: $app"
echo "$app"
