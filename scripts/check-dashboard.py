#!/usr/bin/env python3
"""Checks the Grafana dashboard of the passmower-elector chart without a Grafana.

Structure: the fields Grafana needs to import it (title, uid, schemaVersion, templating, panels),
unique panel ids, panels on the 24-column grid without overlaps, every panel and target on the
dashboard's data source variable, a non-empty PromQL expression and a unique refId per target,
value mappings on state timelines, and every `$variable` an expression uses defined (or one of
Grafana's own). Metrics: every metric name the dashboard and the alert rules use is one the
elector, the webhook (src/elect/metrics.rs, src/webhook/metrics.rs) or the kube-apiserver
exports. PromQL: with --rules-out FILE, writes each expression (variables replaced by sample
values) as a recording rule, so `promtool check rules FILE` parses every one with Prometheus's
own parser; scripts/check-monitoring.sh does both.

Usage: scripts/check-dashboard.py [--rules-out FILE]; exit 1 with the list of what is wrong.
Standard library only.
"""

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts/passmower-elector/files/passmower-elector.dashboard.json"
RULE_FILES = [
    ROOT / "charts/passmower-elector/files/passmower-elector.rules.yaml",
    ROOT / "charts/passmower-elector-webhook/files/passmower-elector-webhook.rules.yaml",
]
METRIC_SOURCES = {
    "passmower_elector": ROOT / "src/elect/metrics.rs",
    "passmower_elector_webhook": ROOT / "src/webhook/metrics.rs",
}
# Metrics of the kube-apiserver the rules and the dashboard read (k8s.io/apiserver,
# pkg/admission/plugin/policy/validating/metrics: BETA, labels policy, policy_binding,
# error_type, enforcement_action).
APISERVER_METRICS = {"apiserver_validating_admission_policy_check_total"}
# Grafana's own variables, and a sample value for each variable when the expressions are
# parsed (a regex matcher takes any of them).
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__interval": "30s", "__range": "1h"}
SAMPLE_VALUES = {"namespace": "passmower", "job": "passmower/passmower", "datasource": "prometheus"}
PANEL_TYPES = {"timeseries", "state-timeline", "stat", "bargauge", "table", "text", "row"}


def registered_metrics():
    """The metric names the elector and the webhook register, with their series suffixes."""
    names = set()
    for prefix, source in METRIC_SOURCES.items():
        text = source.read_text()
        for name in re.findall(r'(?:register|scrape_gauge)\(\s*(?:&mut encoder,\s*)?"([a-z_]+)"', text):
            base = f"{prefix}_{name}"
            names.update({base, base + "_total", base + "_bucket", base + "_sum", base + "_count"})
    return names


def metric_names(expr):
    return set(re.findall(r"\b((?:passmower_elector|apiserver)_[a-z0-9_]+)", expr))


def substitute(expr):
    def value(m):
        name = m.group(1) or m.group(2)
        return GRAFANA_VARIABLES.get(name) or SAMPLE_VALUES[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def check(dashboard, problems):
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
        if key not in dashboard:
            problems.append(f"dashboard: no {key!r}")
    if not 0 < len(dashboard.get("uid", "")) <= 40:
        problems.append("dashboard: uid must be 1 to 40 characters")
    variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        problems.append("dashboard: no `datasource` variable (panels name ${datasource})")
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query" and v.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"variable {v.get('name')}: not on ${{datasource}}")
    ids, cells = set(), {}
    expressions = []
    for p in dashboard.get("panels", []):
        where = f"panel {p.get('id')} {p.get('title')!r}"
        if p.get("id") in ids:
            problems.append(f"{where}: duplicate id")
        ids.add(p.get("id"))
        if p.get("type") not in PANEL_TYPES:
            problems.append(f"{where}: unknown type {p.get('type')!r}")
        if not p.get("title"):
            problems.append(f"{where}: no title")
        if not p.get("description"):
            problems.append(f"{where}: no description (the panel's help)")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy") or g["x"] + g["w"] > 24 or g["h"] < 1:
            problems.append(f"{where}: gridPos {g} is not on the 24-column grid")
            continue
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    problems.append(f"{where}: overlaps panel {cells[(x, y)]}")
                    break
                cells[(x, y)] = p.get("id")
        if p.get("type") in ("row", "text"):
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{where}: datasource is not ${{datasource}}")
        targets = p.get("targets") or []
        if not targets:
            problems.append(f"{where}: no targets")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or not all(refs):
            problems.append(f"{where}: refIds {refs} are not unique and non-empty")
        for t in targets:
            expr = (t.get("expr") or "").strip()
            if not expr:
                problems.append(f"{where} {t.get('refId')}: empty expr")
                continue
            if t.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"{where} {t.get('refId')}: datasource is not ${{datasource}}")
            for name in re.findall(r"\$\{(\w+)\}|\$(\w+)", expr):
                name = name[0] or name[1]
                if name not in variables and name not in GRAFANA_VARIABLES:
                    problems.append(f"{where} {t.get('refId')}: ${name} is not a variable")
            expressions.append((f"panel_{p.get('id')}_{t.get('refId')}", expr))
        if p.get("type") == "state-timeline" and not p.get("fieldConfig", {}).get("defaults", {}).get("mappings"):
            problems.append(f"{where}: a state timeline without value mappings shows bare numbers")
    for v in dashboard.get("templating", {}).get("list", []):
        query = v.get("definition", "")
        inner = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        if v.get("type") == "query":
            if not inner:
                problems.append(f"variable {v.get('name')}: not a label_values(SELECTOR, LABEL) query")
            else:
                expressions.append((f"variable_{v.get('name')}", inner.group(1)))
    return expressions


def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--rules-out", type=Path, help="write the expressions as a rules file")
    opts = args.parse_args()
    problems = []
    try:
        dashboard = json.loads(DASHBOARD.read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"check-dashboard: {DASHBOARD}: {e}")
    expressions = check(dashboard, problems)
    known = registered_metrics() | APISERVER_METRICS
    used = [(name, e) for name, e in expressions]
    for rules in RULE_FILES:
        text = rules.read_text()
        found = re.findall(r"expr: \|\n((?:\s{10}.*\n)+)", text)
        if len(found) != text.count("expr:"):
            problems.append(f"{rules.name}: write every expr as a block (`expr: |`) indented 10 spaces")
        used.extend((rules.name, expr) for expr in found)
    for where, expr in used:
        for metric in metric_names(expr):
            if metric not in known:
                problems.append(f"{where}: {metric} is not a metric the elector, the webhook or the apiserver exports")
    if opts.rules_out:
        lines = ["groups:", "  - name: dashboard-expressions", "    rules:"]
        for name, expr in expressions:
            lines.append(f"      - record: {name}")
            lines.append(f"        expr: {json.dumps(substitute(expr))}")
        opts.rules_out.write_text("\n".join(lines) + "\n")
    if problems:
        print("check-dashboard: " + DASHBOARD.name + ":\n  " + "\n  ".join(problems), file=sys.stderr)
        sys.exit(1)
    panels = sum(1 for p in dashboard["panels"] if p.get("type") != "row")
    print(f"check-dashboard: {panels} panels, {len(expressions)} expressions, structure and metric names OK", file=sys.stderr)


if __name__ == "__main__":
    main()
