#!/usr/bin/env bash
# Runs the arm64 release binary on an amd64 machine, under qemu-user: the static binary of the
# release's arm64 image (scripts/release.sh image-binary arm64, cross-compiled), its
# `--version`, and `inject` on the golden inputs (tests/golden/inject/), whose output must equal
# the amd64 release binary's byte for byte. The elect + supervise pairs against a real
# kube-apiserver are tests/api/emulated_binary.rs, which .ci/run runs with this script's
# binary and runner (PME_ELECTOR_BINARY, PME_ELECTOR_RUNNER).
#
#   scripts/check-arm64.sh [--amd64 FILE]     # build (or take from the cache) and check
#   scripts/check-arm64.sh --runner           # only print the command that runs an arm64 binary
#
#   --amd64 FILE  the amd64 binary to compare with (.ci/run: the release dry run's image
#                 binary); default: build it as the release does (scripts/release.sh
#                 image-binary amd64)
#
# What is missing is installed first: the Debian packages gcc-aarch64-linux-gnu and
# libc6-dev-arm64-cross (the cross linker, for a build) and qemu-user-static (apt-get; root
# or passwordless sudo), the Rust target aarch64-unknown-linux-gnu (rustup). The binary is
# cached under $PME_CACHE/arm64/KEY, KEY a hash of the sources, Cargo.lock, rustc's version
# and the image repository, so a run on unchanged sources builds nothing (and installs no
# cross toolchain). Prints the runner on the last line but one of stdout, the arm64 binary's
# path on the last.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "check-arm64: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

triple=aarch64-unknown-linux-gnu
repo="${PME_RELEASE_IMAGE:-ghcr.io/passmower/passmower-elector}"
amd64="" runner_only=""
while (($#)); do
  case "$1" in
    --amd64) amd64="${2:?--amd64 needs a file}"; shift 2 ;;
    --runner) runner_only=1; shift ;;
    *) log "unknown argument: $1"; exit 2 ;;
  esac
done

# apt_install PACKAGE...: only what is not installed yet.
apt_install() {
  local missing=() p sudo=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
  log "installing: ${missing[*]}"
  "${sudo[@]}" apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# The command that runs an aarch64 binary here: none on an arm64 machine, else qemu-user
# (Debian's qemu-user-static names it qemu-aarch64-static, qemu-user qemu-aarch64).
runner() {
  if [[ "$(uname -m)" == aarch64 ]]; then
    echo ""
    return
  fi
  local q
  for q in qemu-aarch64-static qemu-aarch64; do
    if command -v "$q" >/dev/null; then command -v "$q"; return; fi
  done
  apt_install qemu-user-static
  command -v qemu-aarch64-static || fail "qemu-user-static installed no qemu-aarch64-static"
}

if [[ -n $runner_only ]]; then
  runner
  exit 0
fi

run=()
r="$(runner)"
[[ -z "$r" ]] || run=("$r")
log "runner: ${run[*]:-(native)}"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
cache="${PME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/passmower-elector}/arm64"
key="$({
  git ls-files -z -- src build.rs Cargo.toml Cargo.lock | sort -z | xargs -0 sha256sum
  rustc -vV
  echo "$repo"
} | sha256sum | cut -c1-16)"
bin="$cache/$version-$key/passmower-elector"

if [[ -x "$bin" ]]; then
  log "cached: $bin"
else
  log "no cached binary for $version-$key: building"
  apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  [[ -d "$(rustc --print sysroot)/lib/rustlib/$triple/lib" ]] || rustup target add "$triple" >&2
  rel="$(mktemp -d)"
  trap 'rm -rf "$rel"' EXIT
  scripts/release.sh --dir "$rel" --image-repo "$repo" image-binary arm64
  # Only the newest build is kept.
  rm -rf "$cache"
  mkdir -p "$(dirname "$bin")"
  install -m 0755 "$rel/work/arm64/passmower-elector" "$bin.tmp"
  mv "$bin.tmp" "$bin"
fi

# What it is: a static aarch64 executable.
readelf -hW "$bin" | grep -q 'Machine:.*AArch64' || fail "$bin is not an AArch64 executable"
if readelf -lW "$bin" | grep -q INTERP; then fail "$bin has a program interpreter (dynamically linked)"; fi
if readelf -dW "$bin" | grep -q '(NEEDED)'; then fail "$bin needs shared libraries"; fi
log "$(stat -c %s "$bin") bytes, AArch64, static"

out="$("${run[@]}" "$bin" --version)" || fail "--version failed"
log "--version: ${out//$'\n'/; }"
[[ "$out" == *"$version"* ]] || fail "--version does not name $version"
[[ "$out" == *"sidecar image: $repo:$version ("* ]] || fail "--version does not name the image $repo:$version"

if [[ -z "$amd64" ]]; then
  amd="$(mktemp -d)"
  trap 'rm -rf "$amd" "${rel:-}"' EXIT
  log "no --amd64: building it as the release does"
  scripts/release.sh --dir "$amd" --image-repo "$repo" image-binary amd64
  amd64="$amd/work/amd64/passmower-elector"
fi
readelf -hW "$amd64" | grep -q 'Machine:.*X86-64' || fail "--amd64 $amd64 is not an x86-64 executable"

# inject on the golden inputs with the arguments tests/scenarios/inject_golden.rs gives them
# (the first without --image: the default image the release compiles in), and one input that
# fails: both binaries must write the same bytes and exit alike.
image=--image=registry.example.com/passmower-elector:0.1.0
cases=(
  "passmower.in.yaml|--namespace auth"
  "passmower.in.yaml|$image --namespace auth"
  "passmower.in.yaml|--classic-sidecar --namespace auth --deny-idle-namespace --idle-namespace pm-idle-never-create --image registry.example.com/passmower-elector:test"
  "passmower.in.yaml|$image --namespace auth --kube-version v1.29.4 --no-fence"
  "passmower.in.yaml|$image --workload-only"
  "passmower-2.4.in.yaml|$image --namespace auth"
  "passmower-2.4.in.yaml|--namespace auth --passmower-election=fence-only"
  "statefulset.in.yaml|$image --kind StatefulSet --container app --app-command /usr/bin/idp --no-fence"
  "list.in.yaml|$image"
  "mixed.in.yaml|$image"
  "private-registry.in.yaml|$image --image-pull-secret=sidecar-registry --image-pull-secret=app-registry"
  "no-target.in.yaml|$image"
)
work="$(mktemp -d)"
trap 'rm -rf "$work" "${amd:-}" "${rel:-}"' EXIT
n=0
for c in "${cases[@]}"; do
  input="tests/golden/inject/${c%%|*}"
  read -ra args <<<"${c#*|}"
  n=$((n + 1))
  # Nothing from this shell's environment (ELECTOR_*, HELM_NAMESPACE) may change the output.
  rc_amd=0 rc_arm=0
  env -i PATH="$PATH" "$amd64" inject "${args[@]}" <"$input" >"$work/$n.amd64" 2>"$work/$n.amd64.err" || rc_amd=$?
  env -i PATH="$PATH" "${run[@]}" "$bin" inject "${args[@]}" <"$input" >"$work/$n.arm64" 2>"$work/$n.arm64.err" || rc_arm=$?
  [[ $rc_amd == "$rc_arm" ]] || fail "inject ${args[*]} < $input: amd64 exit $rc_amd, arm64 exit $rc_arm"
  cmp "$work/$n.amd64" "$work/$n.arm64" >&2 || {
    diff "$work/$n.amd64" "$work/$n.arm64" | head -n 20 >&2 || true
    fail "inject ${args[*]} < $input: the arm64 output differs from the amd64 output"
  }
  cmp -s "$work/$n.amd64.err" "$work/$n.arm64.err" || fail "inject ${args[*]} < $input: the messages differ"
  log "inject ${args[*]} < $input: exit $rc_arm, $(wc -c <"$work/$n.arm64") bytes, sha256 $(sha256sum <"$work/$n.arm64" | cut -c1-12), identical"
done
log "PASS: --version and $n inject runs identical to amd64"
echo "${run[*]}"
echo "$bin"
