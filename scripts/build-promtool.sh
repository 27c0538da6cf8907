#!/usr/bin/env bash
# Builds promtool (or, with the argument `prometheus`, the Prometheus server) from the Go module
# github.com/prometheus/prometheus into a cache directory keyed by its version, so a warm run
# only checks that the binary is there. promtool checks and unit-tests the alert rules
# (`promtool check rules`, `promtool test rules`); the server evaluates the dashboard's queries
# over a recorded run for the picture in the docs (scripts/render-dashboard.py).
#
# Usage: scripts/build-promtool.sh [promtool|prometheus]
# Prints the path of the binary on its last line of stdout.
# Environment: PROMETHEUS_VERSION (the Go module's version, default below; v0.316.0 is
# Prometheus 3.16.0), PME_CACHE (cache root).
set -euo pipefail
# shellcheck source=scripts/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
tool="${1:-promtool}"
case "$tool" in
  promtool | prometheus) ;;
  *) echo "build-promtool: the argument must be promtool or prometheus, got $tool" >&2; exit 2 ;;
esac
# One lock per tool: the server's build does not hold up a cached promtool.
build_start "$tool"
# Built with the tag remove_all_sd: of Prometheus's service discoveries only file and http stay
# (the dashboard run uses file_sd; promtool's rule checks use none), which leaves the cloud
# providers' SDKs out of the build and cuts its time several-fold. The cache key says so.
OUT="$CACHE/prometheus/prometheus-${PROMETHEUS_VERSION}-file-sd"
build_cached "$OUT/$tool" "$OUT/$tool"

module=github.com/prometheus/prometheus
GO_TAGS=remove_all_sd go_scratch
go_module elector-tools/prometheus
go get "${module}/cmd/${tool}@${PROMETHEUS_VERSION}" >&2
# The module's v0.3XX.Y is Prometheus 3.XX.Y; stamp it as the release build does (-X into
# prometheus/common/version), so `promtool --version` says which rules engine checked.
release="$(sed -E 's/^v0\.([0-9])([0-9]{2})\.([0-9]+)$/\1.\2.\3/; s/^([0-9])\.0([0-9])/\1.\2/' <<<"$PROMETHEUS_VERSION")"
ldflags="-s -w -X github.com/prometheus/common/version.Version=${release} -X github.com/prometheus/common/version.Branch=module -X github.com/prometheus/common/version.Revision=${PROMETHEUS_VERSION}"
log "compiling $tool ${PROMETHEUS_VERSION} (Prometheus ${release}; minutes on two cores)"
# The server without the builtinassets tag serves no web UI; its HTTP API is all that is used.
go_build "$OUT/$tool" "$ldflags" "${module}/cmd/${tool}"
log "built: $OUT/$tool"
echo "$OUT/$tool"
