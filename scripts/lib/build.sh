# shellcheck shell=bash
# What every scripts/build-*.sh shares: the cache root, one builder per cache at a time, the
# answer for a build that is already cached, a scratch directory removed at exit, and (for the
# tools built from Go modules through the module proxy; prebuilt downloads are not an option
# here) the Go settings and the wrapper module k8s.io/kubernetes needs outside its repository.
#
#   . scripts/lib/build.sh
#   build_start helm                    # CACHE, the lock, log/die say "build-helm: ..."
#   OUT="$CACHE/helm/helm-$VERSION"
#   build_cached "$OUT/helm" "$OUT/helm"  # prints the first argument and exits when every file is there
#   go_scratch                          # Go's settings; cd into a scratch directory ($work)
#   go_module elector-tools/helm        # a module there to `go get` the tool into
#   go get ... && go_build "$OUT/helm" "-s -w" helm.sh/helm/v3/cmd/helm

# build_start NAME [SUBDIR]: CACHE is the cache root (PME_CACHE, else ~/.cache/passmower-elector),
# or SUBDIR of it; the lock .build-NAME.lock in it is held until the script exits. One build per
# cache at a time: another (CI beside a test run, two test binaries) would write the same files,
# and a cached result is only trusted once its builder has finished.
build_start() {
  BUILD_NAME="$1"
  CACHE="${PME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/passmower-elector}${2:+/$2}"
  mkdir -p "$CACHE"
  exec 9>>"$CACHE/.build-$BUILD_NAME.lock"
  flock 9
}

log() { echo "build-${BUILD_NAME:-?}: $*" >&2; }
die() {
  log "$*"
  exit 1
}

# build_cached PRINT FILE...: when every FILE is an executable, says so, prints PRINT (the
# script's answer) and ends the script.
build_cached() {
  local print="$1" file
  shift
  for file in "$@"; do [[ -x "$file" ]] || return 0; done
  log "cached: $print"
  echo "$print"
  exit 0
}

# build_scratch PARENT: a fresh directory under PARENT in $work, removed when the script exits.
build_scratch() {
  work="$(mktemp -d "$1/work.XXXXXX")"
  # shellcheck disable=SC2064 # the directory is known now
  trap "rm -rf '$work'" EXIT
}

# go_scratch: checks for go, sets the Go build settings every tool is built with (module mode,
# the local toolchain, static binaries; GO_TAGS adds build tags), makes a scratch directory
# ($work) and goes into it.
go_scratch() {
  command -v go >/dev/null || die "go is required (the Go toolchain builds $BUILD_NAME)"
  build_scratch "${TMPDIR:-/tmp}"
  export GOFLAGS="-mod=mod${GO_TAGS:+ -tags=$GO_TAGS}" GOTOOLCHAIN=local CGO_ENABLED=0
  cd "$work" || exit 1
}

# go_module NAME: starts a module in the current directory, to `go get` the tool into.
go_module() {
  go mod init "$1" >/dev/null 2>&1
}

# go_build FILE LDFLAGS PACKAGE: builds PACKAGE into FILE; a build that fails leaves no FILE.
go_build() {
  mkdir -p "$(dirname "$1")"
  go build -trimpath -ldflags "$2" -o "$1.tmp" "$3"
  mv "$1.tmp" "$1"
}

# kube_module DIR VERSION: a module in DIR (made once, then reused) that can build the commands of
# k8s.io/kubernetes at VERSION, and cd into it. k8s.io/kubernetes points its staging modules
# (k8s.io/api, ...) at ./staging with version v0.0.0; outside its repository those replace lines
# do not apply, so the wrapper replaces each with its published v0.MINOR.PATCH twin.
kube_module() {
  local dir="$1" version="$2" gomod staging
  if [[ -f "$dir/go.mod" ]]; then
    cd "$dir" || exit 1
    return
  fi
  mkdir -p "$dir" && cd "$dir" || exit 1
  go mod init "elector-test/kube-${version//./-}" >/dev/null 2>&1
  go mod download -json "k8s.io/kubernetes@${version}" >"$dir/dl.json"
  gomod="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' "$dir/dl.json")"
  staging="v0.${version#v1.}"
  {
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging"'#p' "$gomod"
    echo ")"
  } >>go.mod
}
