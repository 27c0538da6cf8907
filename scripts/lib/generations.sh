# shellcheck shell=bash
# The Passmower generations the tests and benchmarks run, and the upstream tree of each under
# ../shared/upstream/ (see its README). Sourced by scripts/real-pods.sh, write-inventory.sh,
# side-by-side.sh, bench.sh and .ci/run; the one place that maps a generation to its tree.
#
#   1.3  passmower/                  release 1.3.0
#   2.2  passmower-before-election/  the 2.2/2.3 era, no election of its own
#   2.4  passmower-with-election/    2.4.0, which elects its operator leader itself

PME_ALL_GENERATIONS="1.3 2.2 2.4"

# generation_tree GEN: prints the tree's folder name; exit 2 (with a message naming the allowed
# values) for an unknown generation. $2, if given, names the variable the value came from.
generation_tree() {
  case "$1" in
    1.3) echo passmower ;;
    2.2) echo passmower-before-election ;;
    2.4) echo passmower-with-election ;;
    *)
      echo "${2:-generation}: unknown Passmower generation '$1' (allowed: $PME_ALL_GENERATIONS)" >&2
      return 2
      ;;
  esac
}

# generation_upstream GEN: the tree's absolute path (../shared/upstream/<tree> beside the repo).
generation_upstream() {
  local tree root
  tree="$(generation_tree "$1" "${2:-}")" || return 2
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  echo "$root/../shared/upstream/$tree"
}

# generation_list VALUE: the generations named in VALUE (space or comma separated; empty: all),
# one per line, each checked. $2 names the variable for the error message.
generation_list() {
  local list gen
  list="${1:-$PME_ALL_GENERATIONS}"
  for gen in ${list//,/ }; do
    generation_tree "$gen" "${2:-}" >/dev/null || return 2
    echo "$gen"
  done
}
