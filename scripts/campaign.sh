#!/usr/bin/env bash
# The fault campaign, long form: N pods (elector + supervisor + recording child) against a
# private kube-apiserver + etcd, with faults from a seeded schedule; fails on any overlap of two
# leaders' operator mode or a leaderless gap beyond its bound. See tests/fault_campaign.rs.
#
#   scripts/campaign.sh                          # 10 minutes, a fresh seed (printed)
#   scripts/campaign.sh --duration 30m --seed 42
#   scripts/campaign.sh --duration 2m --pods 3 --keep   # keep logs and records even on success
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

duration=10m
seed=""
pods=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --pods) pods="$2"; shift 2 ;;
    --keep) export PME_KEEP_TMP=1; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "campaign.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -z "${PME_CONTROL_PLANE:-}" ]]; then
  PME_CONTROL_PLANE="$(scripts/build-test-cluster.sh | tail -n 1)"
fi
export PME_CONTROL_PLANE
export PME_CAMPAIGN_DURATION="$duration"
[[ -n "$seed" ]] && export PME_CAMPAIGN_SEED="$seed"
[[ -n "$pods" ]] && export PME_CAMPAIGN_PODS="$pods"

# Release build: the campaign is about timing, and the product ships optimized.
exec cargo test --release --test fault_campaign long_fault_campaign -- --ignored --nocapture
