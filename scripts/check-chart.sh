#!/usr/bin/env bash
# Lints and renders charts/passmower-elector with a helm built by scripts/build-helm.sh, and
# renders NOTES.txt too (helm only shows it on install, which needs a cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
helm="$(bash scripts/build-helm.sh | tail -1)"
chart=charts/passmower-elector
"$helm" lint --strict "$chart"
"$helm" lint --strict "$chart" --set replicaCount=1,denyIdleNamespace=false,classicSidecar=true
"$helm" template passmower-elector "$chart" -n auth >/dev/null
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
