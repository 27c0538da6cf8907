#!/usr/bin/env bash
# Builds the passmower-elector sidecar image as an OCI archive, where no Docker engine exists:
# the static release binary (built as scripts/check-static-binary.sh builds it) at
# /usr/local/bin/passmower-elector, user 65532:65532, that path as the entrypoint, and the labels
# of Dockerfile.sidecar — the same image as `docker buildx build -f Dockerfile.sidecar`, one
# layer, no base image. tests/scenarios/sidecar_image.rs checks that the two declare the same path, user,
# entrypoint and labels.
#
#   scripts/build-sidecar-image.sh [--out FILE] [--image REF] [--binary FILE] [--target TRIPLE]
#
#   --out FILE      archive to write (default: passmower-elector-image.tar in the target dir)
#   --image REF     image reference recorded in the archive
#                   (default: ghcr.io/passmower/passmower-elector:<crate version>)
#   --binary FILE   put this binary in instead of building the static release one
#   --target TRIPLE Rust target of the static build (default: the host's gnu triple); the
#                   image's architecture follows it: x86_64-* is amd64, aarch64-* arm64, and
#                   any other is refused. With --binary and no --target: this machine's
#                   (oci-image.py refuses a binary built for another)
#   --digest-file F write the image manifest's digest to F
#
# Then load or push it, e.g.:
#   ctr -n k8s.io images import FILE                       # containerd on a node
#   skopeo copy oci-archive:FILE docker://ghcr.io/you/passmower-elector:0.1.0
#   podman load -i FILE
# Prints the archive's path on its last line of stdout. Needs cargo and python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "build-sidecar-image: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d;s/^# \{0,1\}//' >&2; exit 2; }

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
out="" image="ghcr.io/passmower/passmower-elector:${version}" binary="" target="" digest_file=""
while (($#)); do
  case "$1" in
    --out) out="${2:?--out needs a file}"; shift 2 ;;
    --image) image="${2:?--image needs a reference}"; shift 2 ;;
    --binary) binary="${2:?--binary needs a file}"; shift 2 ;;
    --target) target="${2:?--target needs a triple}"; shift 2 ;;
    --digest-file) digest_file="${2:?--digest-file needs a file}"; shift 2 ;;
    -h|--help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done
command -v python3 >/dev/null || { log "python3 is required (scripts/oci-image.py writes the archive)"; exit 1; }

arch_args=()
if [[ -z "$binary" ]]; then
  target="${target:-$(rustc -vV | sed -n 's/^host: //p')}"
fi
if [[ -n "$target" ]]; then
  case "$target" in
    x86_64-*) arch_args=(--arch amd64) ;;
    aarch64-*) arch_args=(--arch arm64) ;;
    *) log "--target $target: the image is built for x86_64 and aarch64 Linux (amd64, arm64) only"; exit 2 ;;
  esac
fi
if [[ -z "$binary" ]]; then
  log "building the static release binary for $target"
  # --target keeps crt-static away from build scripts and proc macros (as check-static-binary.sh).
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --target "$target" >&2
  binary="${CARGO_TARGET_DIR:-target}/$target/release/passmower-elector"
fi
[[ -x "$binary" ]] || { log "--binary $binary: not an executable file"; exit 2; }
out="${out:-${CARGO_TARGET_DIR:-target}/passmower-elector-image.tar}"
mkdir -p "$(dirname "$out")"

# Path, user, entrypoint and labels: as Dockerfile.sidecar's final stage.
digest_args=()
[[ -z "$digest_file" ]] || digest_args=(--digest-file "$digest_file")
python3 scripts/oci-image.py --out "$out" --ref "$image" "${arch_args[@]}" "${digest_args[@]}" \
  --file "$binary:/usr/local/bin/passmower-elector:0755" \
  --user 65532:65532 \
  --entrypoint '["/usr/local/bin/passmower-elector"]' \
  --label "org.opencontainers.image.title=passmower-elector" \
  --label "org.opencontainers.image.description=Lease-based leader election sidecar and supervisor that makes multi-replica Passmower safe" \
  --label "org.opencontainers.image.source=https://github.com/passmower/passmower-elector" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  --label "org.opencontainers.image.version=${version}"
log "image $image"
echo "$out"
