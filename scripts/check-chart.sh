#!/usr/bin/env bash
# Lints and renders charts/passmower-elector with a helm built by scripts/build-helm.sh (HELM
# selects another binary, e.g. Helm 4), renders NOTES.txt too (helm only shows it on install,
# which needs a cluster; tests/api/inject_chart.rs installs it for real and runs what it prints),
# and checks that what the chart must refuse is refused.
#
# With PME_RENDERED_CHART_DIR set, also writes the chart as installed (`helm template`) into
# that directory, one file per values variant, for tests/api/manifests_dry_run.rs to send to a real
# kube-apiserver as a strict server-side dry run (.ci/run sets it before the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
helm="${HELM:-$(bash scripts/build-helm.sh | tail -1)}"
chart=charts/passmower-elector
image=(--set image.repository=registry.example.com/passmower-elector)
"$helm" lint --strict "$chart" "${image[@]}"
"$helm" lint --strict "$chart" "${image[@]}" --set idleNamespace=pm-idle,denyIdleNamespace=true,classicSidecar=true,fence.enabled=false
"$helm" lint --strict "$chart" "${image[@]}" --set 'imagePullSecrets={regcred,other}'
"$helm" lint --strict "$chart" "${image[@]}" --set injectedBy=webhook,guard.enabled=true
"$helm" lint --strict "$chart" "${image[@]}" --set guard.enabled=false
"$helm" lint --strict "$chart" "${image[@]}" --set podMonitor.enabled=true
# The monitoring objects (scripts/check-monitoring.sh checks what they hold with promtool).
"$helm" lint --strict "$chart" "${image[@]}" --set prometheusRule.enabled=true,dashboard.enabled=true \
  --set prometheusRule.namespace=monitoring,prometheusRule.labels.release=kube-prometheus-stack \
  --set dashboard.annotations.grafana_folder=Passmower
"$helm" template passmower-elector "$chart" -n auth "${image[@]}" >/dev/null
if [[ -n "${PME_RENDERED_CHART_DIR:-}" ]]; then
  mkdir -p "$PME_RENDERED_CHART_DIR"
  rm -f "$PME_RENDERED_CHART_DIR"/*.yaml
  "$helm" template passmower-elector "$chart" -n auth "${image[@]}" >"$PME_RENDERED_CHART_DIR/default.yaml"
  # An idle namespace a namespace could have, guarded by the chart's policy.
  "$helm" template passmower-elector "$chart" -n auth "${image[@]}" \
    --set idleNamespace=pm-idle,denyIdleNamespace=true \
    >"$PME_RENDERED_CHART_DIR/deny-idle-namespace.yaml"
  # The webhook path: the replica guard admits the namespace's opt-in label.
  "$helm" template passmower-elector "$chart" -n auth "${image[@]}" --set injectedBy=webhook \
    >"$PME_RENDERED_CHART_DIR/injected-by-webhook.yaml"
  # Another Passmower release name and a Lease name of its own; the chart's PodMonitor.
  "$helm" template passmower-elector "$chart" -n auth "${image[@]}" \
    --set passmower.release=auth,classicSidecar=true,lease.name=pm-leader \
    --set podMonitor.enabled=true,podMonitor.labels.release=prometheus \
    >"$PME_RENDERED_CHART_DIR/release-auth-lease-name.yaml"
  echo "check-chart: rendered into $PME_RENDERED_CHART_DIR: $(cd "$PME_RENDERED_CHART_DIR" && echo *.yaml)" >&2
fi
# refuse WHAT MESSAGE ARGS...: the chart must fail to render, saying MESSAGE.
refuse() {
  local what="$1" message="$2" out
  shift 2
  if out="$("$helm" template passmower-elector "$chart" -n auth "$@" 2>&1)"; then
    echo "check-chart: $what was accepted" >&2
    exit 1
  fi
  if [[ "$out" != *"$message"* ]]; then
    echo "check-chart: $what was refused without saying \"$message\": $out" >&2
    exit 1
  fi
}
refuse "a missing image" "image.repository is required"
# With the webhook the chart names no image (the webhook chart does): none is required.
if ! "$helm" template passmower-elector "$chart" -n auth --set injectedBy=webhook >/dev/null; then
  echo "check-chart: injectedBy=webhook without image.repository was refused" >&2
  exit 1
fi
refuse "the released repository's latest" "version tags only" --set image.repository=ghcr.io/passmower/passmower-elector,image.tag=latest
refuse "an image.digest that is no sha256 digest" "image.digest" "${image[@]}" --set image.digest=sha256:00
# A digest pins the image: REPOSITORY:TAG@DIGEST (a released chart sets all three).
digest=sha256:$(printf '%064d' 0)
if ! "$helm" template passmower-elector charts/passmower-elector-webhook -n auth "${image[@]}" --set image.digest="$digest" \
  | grep -q "image: registry.example.com/passmower-elector:[^@]*@$digest"; then
  echo "check-chart: image.digest is not in the webhook Deployment's image" >&2
  exit 1
fi
refuse "an invalid idleNamespace" "idleNamespace" "${image[@]}" --set idleNamespace='a*'
refuse "an idleNamespace a namespace could have, unguarded" "denyIdleNamespace=true" "${image[@]}" --set idleNamespace=pm-idle
# kubeVersion: the admission policies' API (the idle-namespace guard, the write fence) is GA
# in 1.30.
refuse "Kubernetes 1.29" "kubeVersion" "${image[@]}" --kube-version 1.29.0
refuse "an injectedBy that is neither postRenderer nor webhook" "injectedBy" "${image[@]}" --set injectedBy=argocd
refuse "an imagePullSecrets entry that is no Secret name" "is not a Secret name" "${image[@]}" --set 'imagePullSecrets={Regcred}'
"$helm" template passmower-elector "$chart" -n auth "${image[@]}" --kube-version 1.30.0 >/dev/null
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
"$helm" template passmower-elector "$scratch/chart" -n auth "${image[@]}" --show-only templates/notes-check.yaml >/dev/null
# The webhook chart (tests/api/webhook_chart.rs renders it with both helms and installs it for real).
webhook_chart=charts/passmower-elector-webhook
"$helm" lint --strict "$webhook_chart" "${image[@]}"
"$helm" lint --strict "$webhook_chart" "${image[@]}" --set certificates.mode=certManager,optIn.namespaces=false
"$helm" lint --strict "$webhook_chart" "${image[@]}" --set injection.idleNamespace=pm-idle,injection.denyIdleNamespace=true
"$helm" lint --strict "$webhook_chart" "${image[@]}" --set prometheusRule.enabled=true,prometheusRule.labels.release=kube-prometheus-stack
# The pod-level settings of the webhook's own pods, and the injected pods' pull secrets.
"$helm" lint --strict "$webhook_chart" "${image[@]}" \
  --set 'imagePullSecrets={regcred},injection.imagePullSecrets={regcred}' \
  --set podAnnotations.team=auth,priorityClassName=high,nodeSelector.zone=a \
  --set 'tolerations[0].operator=Exists' \
  --set-json 'affinity={"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"kubernetes.io/hostname"}}]}}'
if out="$("$helm" template pmw "$webhook_chart" -n passmower-elector-system "${image[@]}" --set 'injection.imagePullSecrets={Regcred}' 2>&1)" \
  || [[ "$out" != *"injection.imagePullSecrets: \"Regcred\" is not a Secret name"* ]]; then
  echo "check-chart: the webhook chart took an injection.imagePullSecrets entry that is no Secret name: $out" >&2
  exit 1
fi
if out="$("$helm" template pmw "$webhook_chart" -n passmower-elector-system "${image[@]}" --set injection.idleNamespace=pm-idle 2>&1)" \
  || [[ "$out" != *"injection.denyIdleNamespace=true"* ]]; then
  echo "check-chart: the webhook chart took an unguarded injection.idleNamespace pm-idle: $out" >&2
  exit 1
fi
"$helm" template pmw "$webhook_chart" -n passmower-elector-system "${image[@]}" >/dev/null
echo "check-chart: lint, template, refusals and NOTES.txt OK ($("$helm" version --short))" >&2
