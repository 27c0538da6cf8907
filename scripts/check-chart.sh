#!/usr/bin/env bash
# Lints and renders charts/passmower-elector with a helm built by scripts/build-helm.sh, and
# renders NOTES.txt too (helm only shows it on install, which needs a cluster).
#
# With PME_RENDERED_CHART_DIR set, also writes the chart as installed (`helm template`) into
# that directory, one file per values variant, for tests/manifests_dry_run.rs to send to a real
# kube-apiserver as a strict server-side dry run (.ci/run sets it before the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
helm="$(bash scripts/build-helm.sh | tail -1)"
chart=charts/passmower-elector
"$helm" lint --strict "$chart"
"$helm" lint --strict "$chart" --set replicaCount=1,denyIdleNamespace=false,classicSidecar=true
"$helm" template passmower-elector "$chart" -n auth >/dev/null
if [[ -n "${PME_RENDERED_CHART_DIR:-}" ]]; then
  mkdir -p "$PME_RENDERED_CHART_DIR"
  rm -f "$PME_RENDERED_CHART_DIR"/*.yaml
  "$helm" template passmower-elector "$chart" -n auth >"$PME_RENDERED_CHART_DIR/default.yaml"
  # replicaCount=1 takes the other PodDisruptionBudget branch (minAvailable).
  "$helm" template passmower-elector "$chart" -n auth \
    --set replicaCount=1,classicSidecar=true,lease.name=pm-leader \
    >"$PME_RENDERED_CHART_DIR/classic-sidecar-one-replica.yaml"
  echo "check-chart: rendered into $PME_RENDERED_CHART_DIR: $(cd "$PME_RENDERED_CHART_DIR" && echo *.yaml)" >&2
fi
if "$helm" template passmower-elector "$chart" --set idleNamespace='a*' >/dev/null 2>&1; then
  echo "check-chart: an invalid idleNamespace was accepted" >&2
  exit 1
fi
# NOTES.txt rendered as a normal template in a scratch copy of the chart.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cp -r "$chart" "$scratch/chart"
{
  echo '{{- define "notes" }}'
  cat "$chart/templates/NOTES.txt"
  echo '{{- end }}'
  echo 'notes: {{ include "notes" . | quote }}'
} >"$scratch/chart/templates/notes-check.yaml"
rm "$scratch/chart/templates/NOTES.txt"
"$helm" template passmower-elector "$scratch/chart" -n auth --show-only templates/notes-check.yaml >/dev/null
echo "check-chart: lint, template and NOTES.txt OK ($("$helm" version --short))" >&2
