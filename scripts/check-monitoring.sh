#!/usr/bin/env bash
# Checks the alert rules and the Grafana dashboard the charts ship:
#   - `promtool check rules` on both plain rules files (charts/*/files/*.rules.yaml);
#   - `promtool test rules` on tests/alerts/*.test.yaml: series that make each alert fire and
#     series where it must stay silent;
#   - scripts/check-dashboard.py (structure, metric names) and every dashboard expression
#     parsed by promtool;
#   - the charts' PrometheusRules as rendered (narrowed to the release's namespace and fence)
#     checked by promtool again, and the dashboard ConfigMap holding the dashboard file as is.
# promtool comes from scripts/build-promtool.sh (PROMTOOL selects another), helm from
# scripts/build-helm.sh (HELM selects another).
set -euo pipefail
cd "$(dirname "$0")/.."
promtool="${PROMTOOL:-$(bash scripts/build-promtool.sh | tail -1)}"
helm="${HELM:-$(bash scripts/build-helm.sh | tail -1)}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
fail() { echo "check-monitoring: $*" >&2; exit 1; }

rules=(
  charts/passmower-elector/files/passmower-elector.rules.yaml
  charts/passmower-elector-webhook/files/passmower-elector-webhook.rules.yaml
)
"$promtool" check rules --lint=all --lint-fatal "${rules[@]}"
"$promtool" test rules tests/alerts/*.test.yaml

python3 scripts/check-dashboard.py --rules-out "$scratch/dashboard.rules.yaml"
"$promtool" check rules "$scratch/dashboard.rules.yaml"

# spec_of FILE: the `spec:` of a rendered PrometheusRule, which is a rules file.
spec_of() { sed -n '/^spec:$/,$p' "$1" | tail -n +2 | sed 's/^  //'; }
image=(--set image.repository=registry.example.com/passmower-elector)
"$helm" template passmower-elector charts/passmower-elector -n auth "${image[@]}" \
  --set prometheusRule.enabled=true --show-only templates/prometheusrule.yaml >"$scratch/elector-rule.yaml"
spec_of "$scratch/elector-rule.yaml" >"$scratch/elector.rules.yaml"
"$promtool" check rules "$scratch/elector.rules.yaml"
! grep -q 'namespace=~' "$scratch/elector.rules.yaml" || fail "the chart's rules still match every namespace"
grep -q 'policy="passmower-elector-fence.auth.passmower"' "$scratch/elector.rules.yaml" \
  || fail "the chart's rules do not name the release's write fence"
[[ $(grep -v '^ *#' "$scratch/elector.rules.yaml" | grep -o 'namespace="auth"' | wc -l) -eq \
   $(grep -v '^ *#' charts/passmower-elector/files/passmower-elector.rules.yaml | grep -o 'namespace=~".\*"' | wc -l) ]] \
  || fail "not every namespace matcher of the chart's rules is narrowed to namespace auth"

# Without the chart's fence the electors' check can only say "missing": that alert goes, the
# others stay.
"$helm" template passmower-elector charts/passmower-elector -n auth "${image[@]}" --set fence.enabled=false \
  --set prometheusRule.enabled=true --show-only templates/prometheusrule.yaml >"$scratch/unfenced-rule.yaml"
spec_of "$scratch/unfenced-rule.yaml" >"$scratch/unfenced.rules.yaml"
"$promtool" check rules "$scratch/unfenced.rules.yaml"
! grep -q 'alert: PassmowerWriteFenceMissing' "$scratch/unfenced.rules.yaml" \
  || fail "with fence.enabled=false the chart still alerts on a missing fence"
[[ $(grep -c '^ *- alert:' "$scratch/unfenced.rules.yaml") -eq $(( $(grep -c '^ *- alert:' "$scratch/elector.rules.yaml") - 1 )) ]] \
  || fail "with fence.enabled=false the chart dropped more than the missing-fence alert"

"$helm" template pmw charts/passmower-elector-webhook -n passmower-elector-system "${image[@]}" \
  --set prometheusRule.enabled=true --show-only templates/prometheusrule.yaml >"$scratch/webhook-rule.yaml"
spec_of "$scratch/webhook-rule.yaml" >"$scratch/webhook.rules.yaml"
"$promtool" check rules "$scratch/webhook.rules.yaml"
grep -q 'namespace="passmower-elector-system"' "$scratch/webhook.rules.yaml" \
  || fail "the webhook chart's rule is not narrowed to its namespace"

"$helm" template passmower-elector charts/passmower-elector -n auth "${image[@]}" \
  --set dashboard.enabled=true --show-only templates/dashboard.yaml >"$scratch/dashboard.yaml"
grep -q '^    grafana_dashboard: "1"$' "$scratch/dashboard.yaml" || fail "the dashboard ConfigMap lacks its sidecar label"
sed -n '/^  passmower-elector.json: |-$/,$p' "$scratch/dashboard.yaml" | tail -n +2 | sed 's/^    //' >"$scratch/dashboard.json"
diff -q "$scratch/dashboard.json" <(sed -e '$a\' charts/passmower-elector/files/passmower-elector.dashboard.json) >/dev/null \
  || fail "the dashboard ConfigMap does not hold files/passmower-elector.dashboard.json as it is"
echo "check-monitoring: rules, rule tests, dashboard and the charts' monitoring objects OK ($("$promtool" --version | head -1))" >&2
