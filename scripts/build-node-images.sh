#!/usr/bin/env bash
# Builds the two images the real-pod tests need besides the sidecar (scripts/build-sidecar-image.sh),
# as OCI archives that `ctr -n k8s.io images import` loads; no Docker, no registry:
#
#   pause      the pod sandbox image (containerd's sandbox_image): a static Go program that
#              waits for SIGTERM/SIGINT and reaps orphans, as Kubernetes' own pause does.
#   passmower  the real upstream Passmower, laid out as its Dockerfile's production stage:
#              /app with package.json, package-lock.json, `npm install --omit=dev`
#              node_modules and src/, NODE_ENV=production, and the shell-form entrypoint
#              `node --no-warnings src/app.js`, as root (node:lts's user).
#
# Passmower's image differs from upstream's in its base only, and says why:
# - Base: a Debian bookworm root filesystem (debootstrap --variant=minbase from the mirror in
#   this machine's apt sources) instead of node:lts, which no registry here serves.
# - Node.js: this machine's Node.js 20 (/usr/bin/node, linked against glibc, libstdc++ and
#   libgcc_s only, all in minbase), copied to /usr/local/bin/node. Debian bookworm's nodejs is
#   18.19, and two of Passmower's runtime dependencies (@simplewebauthn/server 13,
#   @peculiar/x509) require Node.js >= 20.
# - package.json: a copy without @codemowers/oidc-key-manager, whose ^1.2.0 is not in the npm
#   registry and which src/ never imports (the chart's pre-install Job uses it; the tests create
#   the oidc-keys Secret themselves).
# - No frontend/ or styles/ bundles: the public source has none; the OIDC endpoints and the
#   operators do not need them.
# - libfaketime (Debian's package, in the root filesystem), for the real-pod fault clock-skew:
#   a test preloads it into one pod's app to put that pod's wall clock ahead. Nothing loads it
#   unless the test sets LD_PRELOAD (testkit/src/node/faketime.rs); this image is the test
#   bed's Passmower, never a product image.
# The upstream source is read from PME_UPSTREAM (default: ../shared/upstream/passmower beside
# the repository) and never copied into the repository. Any generation under ../shared/upstream/
# builds: 1.3.0 (passmower/), the 2.2 era (passmower-before-election/), 2.4
# (passmower-with-election/); each gets its own archive, keyed by its package files and src/.
#
# Everything is cached under $PME_CACHE/node-images, each step keyed by what it is made of:
# the root filesystem by suite and variant, node_modules by the package.json copy, the lock file
# and the Node.js binary, the archives by every input's hash. A warm run only checks keys.
#
# Prints the directory holding pause.tar, passmower.tar and images.env (NAME_REF=reference
# lines) on its last line of stdout. Needs root (debootstrap), python3, go, npm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO="$PWD"

# shellcheck source=scripts/lib/build.sh
. scripts/lib/build.sh
build_start node-images node-images
UPSTREAM="${PME_UPSTREAM:-$REPO/../shared/upstream/passmower}"
SUITE="${DEBIAN_SUITE:-bookworm}"
NODE_BIN="${PME_NODE_JS:-$(command -v node || true)}"
sha() { sha256sum | cut -c1-16; }

[[ -f "$UPSTREAM/package.json" && -d "$UPSTREAM/src" ]] || die "no Passmower source at $UPSTREAM (set PME_UPSTREAM)"
[[ -x "$NODE_BIN" ]] || die "Node.js is required (node on PATH, or PME_NODE_JS)"
for tool in python3 go npm debootstrap; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
build_scratch "$CACHE"
export GOTOOLCHAIN=local CGO_ENABLED=0

# --- pause ---------------------------------------------------------------------------------
pause_src='package main

// The pod sandbox: holds the namespaces, reaps orphans (with a shared PID namespace it is
// PID 1), exits 0 on SIGTERM/SIGINT.
import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
'
pause_key="$( { echo "$pause_src"; go version; } | sha)"
pause_ref="docker.io/local/pause:$pause_key"
pause_tar="$CACHE/pause-$pause_key.tar"
if [[ ! -f "$pause_tar" ]]; then
  log "building the pause image"
  mkdir -p "$work/pause"
  printf '%s' "$pause_src" >"$work/pause/main.go"
  (cd "$work/pause" && go mod init local/pause >/dev/null 2>&1 && go build -trimpath -ldflags "-s -w" -o pause .)
  python3 scripts/oci-image.py --out "$pause_tar" --ref "$pause_ref" \
    --file "$work/pause/pause:/pause:0755" --user 65535:65535 --entrypoint '["/pause"]'
fi

# --- Debian root filesystem ------------------------------------------------------------------
# The mirror this machine's apt uses (deb822 sources first, then the one-line format).
mirror="${DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  mirror="$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1 || true)"
fi
if [[ -z "$mirror" ]]; then
  mirror="$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
fi
# Packages besides minbase (part of the cache key): see the header.
ROOTFS_PACKAGES="libfaketime"
rootfs="$CACHE/rootfs-debian-$SUITE-minbase-${ROOTFS_PACKAGES//,/-}"
if [[ ! -f "$rootfs.complete" ]]; then
  [[ -n "$mirror" ]] || die "no Debian mirror found in /etc/apt (set DEBIAN_MIRROR)"
  [[ $(id -u) -eq 0 ]] || die "debootstrap needs root"
  log "debootstrap --variant=minbase --include=$ROOTFS_PACKAGES $SUITE from $mirror (a minute or two)"
  rm -rf "$rootfs" "$rootfs.tmp" "$rootfs.complete"
  debootstrap --variant=minbase --include="$ROOTFS_PACKAGES" "$SUITE" "$rootfs.tmp" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  # What a container runtime provides or an image does not need: device nodes, apt's package
  # lists and caches, documentation.
  rm -rf "$rootfs.tmp"/dev/* "$rootfs.tmp"/var/cache/apt/* "$rootfs.tmp"/var/lib/apt/lists/* \
    "$rootfs.tmp"/usr/share/doc/* "$rootfs.tmp"/usr/share/man/* "$rootfs.tmp"/var/log/*
  mv "$rootfs.tmp" "$rootfs"
  touch "$rootfs.complete"
fi
rootfs_key="$(sha <"$rootfs/var/lib/dpkg/status")"

# --- node_modules ----------------------------------------------------------------------------
mkdir -p "$work/pkg"
python3 - "$UPSTREAM/package.json" "$work/pkg/package.json" <<'PY'
import json, sys
pkg = json.load(open(sys.argv[1]))
pkg.get("dependencies", {}).pop("@codemowers/oidc-key-manager", None)
json.dump(pkg, open(sys.argv[2], "w"), indent=2)
PY
# A tree without a lock file (the reconstructed 2.2-era tree has none) is installed from its
# package.json ranges, and npm writes the lock file the image gets.
lock=()
if [[ -f "$UPSTREAM/package-lock.json" ]]; then
  cp "$UPSTREAM/package-lock.json" "$work/pkg/package-lock.json"
  lock=("$work/pkg/package-lock.json")
fi
node_key="$(sha256sum "$NODE_BIN" | sha)"
modules_key="$(cat "$work/pkg/package.json" "${lock[@]}" <(echo "$node_key") | sha)"
modules="$CACHE/passmower-modules-$modules_key"
if [[ ! -f "$modules/.complete" ]]; then
  log "npm install --omit=dev (Passmower's dependencies, a minute or two)"
  rm -rf "$modules" "$modules.tmp"
  mkdir -p "$modules.tmp"
  cp "$work/pkg/package.json" "${lock[@]}" "$modules.tmp/"
  (cd "$modules.tmp" && npm install --omit=dev --no-audit --no-fund --loglevel=error >&2)
  touch "$modules.tmp/.complete"
  mv "$modules.tmp" "$modules"
fi

# --- passmower archive -----------------------------------------------------------------------
src_key="$(cd "$UPSTREAM" && find src -type f -print0 | sort -z | xargs -0 sha256sum | sha)"
script_key="$(cat "$0" scripts/oci-image.py | sha)"
pm_key="$(echo "$rootfs_key $node_key $modules_key $src_key $script_key" | sha)"
pm_ref="docker.io/local/passmower:$pm_key"
pm_tar="$CACHE/passmower-$pm_key.tar"
if [[ ! -f "$pm_tar" ]]; then
  log "assembling the Passmower image"
  app="$work/app-layer/app"
  mkdir -p "$app"
  # npm rewrote the lock file without the dropped package; the image gets what was installed.
  cp "$modules/package.json" "$modules/package-lock.json" "$app/"
  cp -a "$modules/node_modules" "$app/node_modules"
  cp -a "$UPSTREAM/src" "$app/src"
  python3 scripts/oci-image.py --out "$pm_tar" --ref "$pm_ref" --gzip-level 1 \
    --dir "$rootfs" --dir "$work/app-layer" \
    --file "$NODE_BIN:/usr/local/bin/node:0755" \
    --workdir /app --env NODE_ENV=production \
    --entrypoint '["/bin/sh","-c","node --no-warnings src/app.js"]'
fi

out="$CACHE/set-$(echo "$pause_key $pm_key" | sha)"
mkdir -p "$out"
ln -sfn "$pause_tar" "$out/pause.tar"
ln -sfn "$pm_tar" "$out/passmower.tar"
printf 'PAUSE_REF=%s\nPASSMOWER_REF=%s\nPASSMOWER_UPSTREAM=%s\n' "$pause_ref" "$pm_ref" \
  "$(cd "$UPSTREAM" && pwd -P)" >"$out/images.env"
log "images: $pause_ref $pm_ref"
echo "$out"
