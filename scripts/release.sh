#!/usr/bin/env bash
# Builds a release of passmower-elector step by step, as .github/workflows/release.yml runs it
# on the forge, or whole for this machine's architecture with `dry-run` (what .ci/run does):
# nothing is pushed or signed then.
#
#   scripts/release.sh [OPTIONS] STEP [STEP...]
#
# Steps, in order; each reads what the earlier ones left in --dir:
#   image-binary ARCH  the static binary for the image, built with PME_RELEASE_IMAGE=REPO (its
#                      inject and webhook default to REPO:VERSION; it cannot know the digest
#                      of the image it is in), and its single-platform image archive
#   index              one image index over every platform built:
#                      dist/passmower-elector-image-VERSION.oci.tar; its digest: work/image-digest
#   binary ARCH        the standalone static binary, built with the digest too (it defaults to
#                      REPO:VERSION@DIGEST): dist/passmower-elector-VERSION-linux-ARCH
#   charts             both charts packaged (dist/NAME-VERSION.tgz) with REPO, VERSION and the
#                      digest in their values
#   sbom               dist/passmower-elector-VERSION.spdx.json: the crates built in (SPDX 2.3)
#   checksums          dist/SHA256SUMS
#   verify             scripts/release/verify.py: index, binaries, charts, SBOM and checksums
#                      agree; prints the listing
#   rehearse-push      copies the index with the push's own command into a local OCI layout and
#                      checks the digest survives (needs skopeo; a registry-free rehearsal)
#   dry-run            all of the above for this machine's architecture, or --platforms
#                      (nothing leaves the machine)
#   push               (forge) the image index to REPO:VERSION and the charts to CHART_REPO,
#                      logged in with REGISTRY_USER / REGISTRY_PASSWORD; chart digests to
#                      work/chart-digests
#   sign               (forge) cosign, keyless (the workflow's OIDC identity): the image index
#                      and its platform manifests, the SBOM as its attestation, the charts,
#                      SHA256SUMS (dist/SHA256SUMS.sigstore.json); logs in as push does
#   publish            (forge) a GitHub release of TAG with dist/* and its CHANGELOG section
#
# ARCH is amd64 or arm64. A binary for an ARCH other than this machine's is cross-compiled:
# the Rust target (`rustup target add aarch64-unknown-linux-gnu`) and a cross gcc
# (`aarch64-linux-gnu-gcc`, Debian gcc-aarch64-linux-gnu + libc6-dev-arm64-cross) must be there.
#
# Options:
#   --dir DIR          where the release is built (default: $CARGO_TARGET_DIR/release, else
#                      target/release); DIR/dist is what gets published, DIR/work the rest
#   --image-repo REPO  image repository (default $PME_RELEASE_IMAGE, else
#                      ghcr.io/passmower/passmower-elector)
#   --chart-repo OCI   where push puts the charts (default $PME_RELEASE_CHARTS, else
#                      oci://ghcr.io/passmower/charts)
#   --tag TAG          the release tag: must be v<crate version>, with a CHANGELOG section
#   --platforms LIST   dry-run: the architectures to build (default: this machine's), e.g.
#                      amd64,arm64 where the other one's Rust target and cross gcc are there
#   --binary FILE      take FILE as every binary instead of building (tests; then nothing
#                      checks the binaries' default image)
#
# Environment: HELM (else scripts/build-helm.sh), SOURCE_DATE_EPOCH (the image's and the
# SBOM's time; else the commit's), GH_TOKEN (publish).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "release: $*" >&2; }
die() { log "$*"; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d;s/^# \{0,1\}//' >&2; exit 2; }

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
dir="" repo="${PME_RELEASE_IMAGE:-ghcr.io/passmower/passmower-elector}"
chart_repo="${PME_RELEASE_CHARTS:-oci://ghcr.io/passmower/charts}" tag="" prebuilt="" dry_platforms=""
steps=()
while (($#)); do
  case "$1" in
    --dir) dir="${2:?--dir needs a directory}"; shift 2 ;;
    --image-repo) repo="${2:?--image-repo needs a repository}"; shift 2 ;;
    --chart-repo) chart_repo="${2:?--chart-repo needs oci://HOST/PATH}"; shift 2 ;;
    --tag) tag="${2:?--tag needs a tag}"; shift 2 ;;
    --binary) prebuilt="$(realpath "${2:?--binary needs a file}")"; shift 2 ;;
    --platforms) dry_platforms="${2:?--platforms needs amd64, arm64 or both}"; shift 2 ;;
    -h|--help) usage ;;
    -*) log "unknown option: $1"; usage ;;
    *) steps+=("$1"); shift ;;
  esac
done
((${#steps[@]})) || usage
dir="$(realpath -m "${dir:-${CARGO_TARGET_DIR:-target}/release}")"
dist="$dir/dist" work="$dir/work"
mkdir -p "$dist" "$work"
[[ "$repo" =~ ^[a-z0-9._-]+(:[0-9]+)?(/[a-z0-9._-]+)+$ ]] \
  || die "--image-repo $repo: a repository in lower case, without tag or digest (e.g. ghcr.io/OWNER/passmower-elector)"
[[ "$chart_repo" == oci://* ]] || die "--chart-repo $chart_repo: an oci:// reference"
# The time written into the image and the SBOM: the commit's, so a rebuild writes the same
# bytes. Given to those writers only: ring's and psm's build scripts rerun when cargo sees
# SOURCE_DATE_EPOCH change, and with them most of the dependency tree.
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
unset SOURCE_DATE_EPOCH

host_arch() {
  case "$(uname -m)" in
    x86_64|amd64) echo amd64 ;;
    aarch64|arm64) echo arm64 ;;
    *) die "this machine is $(uname -m): releases are built for amd64 and arm64 only" ;;
  esac
}
triple_of() {
  case "$1" in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) die "architecture $1: amd64 or arm64" ;;
  esac
}

# cargo_build ARCH OUT [DIGEST]: the static release binary with the release variables, copied
# to OUT. Cross-compiles when ARCH is not this machine's.
cargo_build() {
  local arch="$1" out="$2" digest="${3:-}" triple
  triple="$(triple_of "$arch")"
  if [[ -n "$prebuilt" ]]; then
    log "$arch: taking $prebuilt (--binary) instead of building"
    install -m 0755 "$prebuilt" "$out"
    return
  fi
  local -a cross=()
  if [[ "$arch" != "$(host_arch)" ]]; then
    local cpu="${triple%%-unknown-*}" gcc upper
    gcc="$cpu-linux-gnu-gcc"
    upper="$(echo "$triple" | tr 'a-z-' 'A-Z_')"
    [[ -d "$(rustc --print sysroot)/lib/rustlib/$triple/lib" ]] \
      || die "$arch: the Rust standard library for $triple is not installed: rustup target add $triple"
    command -v "$gcc" >/dev/null \
      || die "$arch: $gcc is missing (Debian: gcc-${cpu//_/-}-linux-gnu and libc6-dev-${arch}-cross)"
    cross=("CARGO_TARGET_${upper}_LINKER=$gcc" "CC_${triple//-/_}=$gcc")
    log "$arch: cross-compiling with $gcc"
  fi
  log "$arch: cargo build --release --target $triple (PME_RELEASE_IMAGE=$repo${digest:+ PME_RELEASE_IMAGE_DIGEST=$digest})"
  # --target keeps crt-static away from build scripts and proc macros (check-static-binary.sh).
  env "${cross[@]}" PME_RELEASE_IMAGE="$repo" PME_RELEASE_IMAGE_DIGEST="$digest" \
    RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$triple" --bin passmower-elector >&2
  install -m 0755 "${CARGO_TARGET_DIR:-target}/$triple/release/passmower-elector" "$out"
}

# check_default BINARY ARCH WANT: the binary names WANT as its default image, and inject uses
# it when no --image is given. Only for a binary this machine runs.
check_default() {
  local bin="$1" arch="$2" want="$3" out
  if [[ -n "$prebuilt" ]]; then
    log "$arch: --binary given: its default image is not checked"
    return
  fi
  if [[ "$arch" != "$(host_arch)" ]]; then
    log "$arch: built for another machine: its default image is checked by verify (the digest in it) only"
    return
  fi
  out="$("$bin" --version)"
  [[ "$out" == *"sidecar image: $want ("* ]] || die "$bin --version does not name $want: $out"
  out="$(printf '%s\n' 'apiVersion: apps/v1' 'kind: Deployment' 'metadata: {name: passmower, namespace: auth}' \
    'spec: {selector: {matchLabels: {app: p}}, template: {metadata: {labels: {app: p}}, spec: {serviceAccountName: passmower, containers: [{name: passmower, image: "passmower:1"}]}}}' \
    | env -u ELECTOR_IMAGE "$bin" inject --no-fence 2>/dev/null)" || die "$bin inject without --image failed"
  grep -q "image: $want\$" <<<"$out" || die "$bin inject without --image does not use $want"
  log "$arch: $(basename "$bin") defaults to $want (--version and inject)"
}

step_image_binary() {
  local arch="${1:?image-binary needs ARCH}" triple
  triple="$(triple_of "$arch")"
  mkdir -p "$work/$arch"
  cargo_build "$arch" "$work/$arch/passmower-elector"
  check_default "$work/$arch/passmower-elector" "$arch" "$repo:$version"
  SOURCE_DATE_EPOCH="$epoch" scripts/build-sidecar-image.sh --binary "$work/$arch/passmower-elector" --target "$triple" \
    --image "$repo:$version" --out "$work/$arch/image.oci.tar" --digest-file "$work/$arch/manifest-digest" >/dev/null
}

step_index() {
  local -a from=()
  local archive
  for archive in "$work"/*/image.oci.tar; do
    [[ -e "$archive" ]] && from+=(--from "$archive")
  done
  ((${#from[@]})) || die "index: no platform image in $work (run image-binary ARCH first)"
  rm -f "$dist"/passmower-elector-image-*.oci.tar
  SOURCE_DATE_EPOCH="$epoch" python3 scripts/oci-image.py --out "$dist/passmower-elector-image-$version.oci.tar" --ref "$repo:$version" \
    "${from[@]}" --digest-file "$work/image-digest"
}

image_digest() {
  [[ -s "$work/image-digest" ]] || die "no image digest in $work (run index first)"
  cat "$work/image-digest"
}

platforms() {
  local p out=()
  for p in "$work"/*/image.oci.tar; do
    [[ -e "$p" ]] && out+=("$(basename "$(dirname "$p")")")
  done
  local IFS=,
  echo "${out[*]}"
}

step_binary() {
  local arch="${1:?binary needs ARCH}" digest out
  digest="$(image_digest)"
  out="$dist/passmower-elector-$version-linux-$arch"
  cargo_build "$arch" "$out" "$digest"
  check_default "$out" "$arch" "$repo:$version@$digest"
}

helm_bin() {
  if [[ -z "${HELM:-}" ]]; then
    HELM="$(scripts/build-helm.sh | tail -n 1)"
  fi
  echo "$HELM"
}

step_charts() {
  local digest helm name chart_version app_version
  digest="$(image_digest)"
  helm="$(helm_bin)"
  rm -rf "$work/charts"
  mkdir -p "$work/charts"
  for name in passmower-elector passmower-elector-webhook; do
    chart_version="$(sed -n 's/^version: *//p' "charts/$name/Chart.yaml")"
    app_version="$(sed -n 's/^appVersion: *//p' "charts/$name/Chart.yaml" | tr -d '"')"
    [[ "$chart_version" == "$version" && "$app_version" == "$version" ]] \
      || die "charts/$name/Chart.yaml: version $chart_version, appVersion $app_version: both must be the crate's $version (bump them with Cargo.toml)"
    cp -r "charts/$name" "$work/charts/$name"
    python3 scripts/release/set-chart-image.py "$work/charts/$name" "$repo" "$version" "$digest"
    "$helm" lint --strict "$work/charts/$name" >&2
    rm -f "$dist/$name-$version.tgz"
    "$helm" package "$work/charts/$name" --version "$version" --app-version "$version" -d "$dist" >&2
  done
}

step_sbom() {
  local -a targets=()
  local p
  for p in $(platforms | tr , ' '); do targets+=(--target "$(triple_of "$p")"); done
  ((${#targets[@]})) || die "sbom: no platform built"
  SOURCE_DATE_EPOCH="$epoch" python3 scripts/release/sbom.py --out "$dist/passmower-elector-$version.spdx.json" "${targets[@]}"
}

step_checksums() {
  (
    cd "$dist"
    rm -f SHA256SUMS
    # Every published file but the signatures, which are made of SHA256SUMS afterwards.
    find . -maxdepth 1 -type f ! -name '*.sig' ! -name '*.pem' ! -name '*.sigstore.json' \
      ! -name '*.bundle' -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >"$work/SHA256SUMS"
    mv "$work/SHA256SUMS" SHA256SUMS
  )
  log "wrote $dist/SHA256SUMS"
}

step_verify() {
  local -a extra=()
  [[ -z "$prebuilt" ]] || extra+=(--prebuilt)
  python3 scripts/release/verify.py --dir "$dir" --repo "$repo" --version "$version" \
    --platforms "$(platforms)" --helm "$(helm_bin)" "${extra[@]}"
}

step_rehearse_push() {
  command -v skopeo >/dev/null || die "rehearse-push needs skopeo (Debian package skopeo)"
  local digest layout got
  digest="$(image_digest)"
  layout="$work/push-rehearsal"
  rm -rf "$layout"
  # What push runs, with a local OCI layout in place of the registry.
  skopeo copy --quiet --all --preserve-digests \
    "oci-archive:$dist/passmower-elector-image-$version.oci.tar" "oci:$layout:$version"
  got="sha256:$(skopeo inspect --raw "oci:$layout:$version" | sha256sum | cut -d' ' -f1)"
  [[ "$got" == "$digest" ]] || die "rehearse-push: skopeo wrote an index with digest $got, not $digest"
  log "rehearse-push: skopeo copy --all --preserve-digests keeps $digest ($(skopeo inspect --raw "oci:$layout:$version" \
    | python3 -c 'import json,sys; print(", ".join(m["platform"]["os"]+"/"+m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"]))'))"
  log "sign would sign: $repo@$digest (--recursive: each platform manifest), its SBOM attestation, both charts by the digests push reports, dist/SHA256SUMS (covering: $(cut -d' ' -f3 "$dist/SHA256SUMS" | tr '\n' ' '))"
}

check_tag() {
  [[ -z "$tag" ]] && return
  [[ "$tag" == "v$version" ]] || die "tag $tag, but Cargo.toml says version $version: tag v$version"
  grep -q "^## \[\?$version\]\?\( \|$\)" CHANGELOG.md \
    || die "CHANGELOG.md has no section '## $version' (rename '## Unreleased' before tagging)"
}

# registry_login TOOL...: each tool keeps its own credentials (skopeo: containers' auth.json,
# helm: its registry config, cosign: Docker's config.json).
registry_login() {
  [[ -n "${REGISTRY_PASSWORD:-}" ]] || { log "REGISTRY_PASSWORD unset: using existing logins"; return; }
  local host="${repo%%/*}" chart_host="${chart_repo#oci://}" tool
  chart_host="${chart_host%%/*}"
  for tool in "$@"; do
    case "$tool" in
      skopeo) skopeo login --username "${REGISTRY_USER:?REGISTRY_USER}" --password-stdin "$host" <<<"$REGISTRY_PASSWORD" >&2 ;;
      helm) "$(helm_bin)" registry login "$chart_host" --username "$REGISTRY_USER" --password-stdin <<<"$REGISTRY_PASSWORD" >&2 ;;
      cosign)
        cosign login "$host" --username "$REGISTRY_USER" --password-stdin <<<"$REGISTRY_PASSWORD" >&2
        [[ "$chart_host" == "$host" ]] \
          || cosign login "$chart_host" --username "$REGISTRY_USER" --password-stdin <<<"$REGISTRY_PASSWORD" >&2 ;;
    esac
  done
}

step_push() {
  local digest got name out chart_digest
  digest="$(image_digest)"
  registry_login skopeo helm
  skopeo copy --all --preserve-digests \
    "oci-archive:$dist/passmower-elector-image-$version.oci.tar" "docker://$repo:$version" >&2
  got="sha256:$(skopeo inspect --raw "docker://$repo:$version" | sha256sum | cut -d' ' -f1)"
  [[ "$got" == "$digest" ]] || die "push: the registry serves $repo:$version as $got, not $digest"
  : >"$work/chart-digests"
  for name in passmower-elector passmower-elector-webhook; do
    out="$("$(helm_bin)" push "$dist/$name-$version.tgz" "$chart_repo" 2>&1)"
    echo "$out" >&2
    chart_digest="$(sed -n 's/^Digest: *//p' <<<"$out")"
    [[ "$chart_digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "push: helm push $name printed no digest"
    echo "${chart_repo#oci://}/$name@$chart_digest" >>"$work/chart-digests"
  done
  log "pushed $repo:$version@$digest and $(tr '\n' ' ' <"$work/chart-digests")"
}

step_sign() {
  local digest ref
  digest="$(image_digest)"
  [[ -s "$work/chart-digests" ]] || die "sign: no chart digests (run push first)"
  registry_login cosign
  cosign sign --yes --recursive "$repo@$digest"
  cosign attest --yes --type spdxjson --predicate "$dist/passmower-elector-$version.spdx.json" "$repo@$digest"
  while read -r ref; do cosign sign --yes "$ref"; done <"$work/chart-digests"
  cosign sign-blob --yes --bundle "$dist/SHA256SUMS.sigstore.json" "$dist/SHA256SUMS"
}

step_publish() {
  [[ -n "$tag" ]] || die "publish needs --tag"
  local notes="$work/release-notes.md"
  # The CHANGELOG section of this version, up to the next '## '.
  awk -v v="$version" '$0 ~ "^## \\[?"v"\\]?( |$)" {on=1; next} on && /^## / {exit} on {print}' CHANGELOG.md >"$notes"
  {
    echo
    echo "Image: \`$repo:$version@$(image_digest)\` (linux/$(platforms | sed 's|,|, linux/|g'))."
    echo "Verify: docs/release.md in the repository."
  } >>"$notes"
  gh release create "$tag" --verify-tag --title "passmower-elector $version" --notes-file "$notes" "$dist"/*
}

step_dry_run() {
  local arch archs
  archs="${dry_platforms:-$(host_arch)}"
  for arch in ${archs//,/ }; do triple_of "$arch" >/dev/null; done
  rm -rf "$dist" "$work"
  mkdir -p "$dist" "$work"
  for arch in ${archs//,/ }; do step_image_binary "$arch"; done
  step_index
  for arch in ${archs//,/ }; do step_binary "$arch"; done
  step_charts
  step_sbom
  step_checksums
  step_verify
  if command -v skopeo >/dev/null; then step_rehearse_push; else log "skopeo missing: push not rehearsed"; fi
  log "dry run of $version for linux/${archs//,/, linux/} in $dir: nothing pushed, nothing signed"
}

check_tag
i=0
while ((i < ${#steps[@]})); do
  s="${steps[$i]}"
  i=$((i + 1))
  case "$s" in
    image-binary|binary)
      a="${steps[$i]:-}"; i=$((i + 1))
      [[ "$a" == amd64 || "$a" == arm64 ]] || die "$s needs ARCH (amd64 or arm64), got '${a}'"
      "step_${s//-/_}" "$a" ;;
    index|charts|sbom|checksums|verify|rehearse-push|dry-run|push|sign|publish) "step_${s//-/_}" ;;
    *) log "unknown step: $s"; usage ;;
  esac
done
