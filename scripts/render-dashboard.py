#!/usr/bin/env python3
"""Draws the chart's Grafana dashboard as an SVG from a real Prometheus, without a Grafana.

Every panel of charts/passmower-elector/files/passmower-elector.dashboard.json is laid out on its
gridPos; every target's expression is evaluated by Prometheus itself (/api/v1/query_range, the
dashboard's variables replaced: $namespace, $job, $__rate_interval) over the run; time series
are drawn as lines, bars or points as their fieldConfig says, state timelines as bands coloured
by their value mappings, and the run's events as dashed markers. Writes OUT.svg and OUT.md (the
generated page: command, date, machine, the run's events). scripts/dashboard-run.sh calls it.
Standard library only.
"""

import argparse
import datetime
import json
import math
import platform
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts/passmower-elector/files/passmower-elector.dashboard.json"
# Grafana's names for the colours the dashboard uses, and its classic palette.
NAMED = {"green": "#56A64B", "red": "#E02F44", "blue": "#3274D9", "orange": "#FF780A",
         "yellow": "#F2CC0C", "transparent": None}
PALETTE = ["#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9",
           "#705DA0", "#508642", "#CCA300"]
COLUMN, ROW = 50, 34  # pixels per grid column and grid row
# Query step for gauges; step of the increase()/rate() panels, and their window, which is one
# step and one scrape interval (2s), as Grafana's $__rate_interval: consecutive windows then
# share one sample, so no increment falls between two of them.
STEP, RATE, RATE_WINDOW = 2, 10, 12


def query(prometheus, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as r:
        answer = json.load(r)
    if answer.get("status") != "success":
        raise SystemExit(f"render-dashboard: {expr}: {answer}")
    return answer["data"]["result"]


def legend(fmt, labels):
    out = fmt or "{{__name__}}"
    for k, v in labels.items():
        out = out.replace("{{" + k + "}}", v)
    return out


def substitute(expr, namespace, job, rate):
    return (expr.replace("$__rate_interval", f"{rate}s").replace("$__interval", f"{RATE}s")
            .replace("$namespace", namespace)
            .replace("$job", job))


def color_of(name, fallback):
    if name is None:
        return fallback
    return NAMED.get(name, name)


class Svg:
    def __init__(self):
        self.parts = []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=11, anchor="start", color="#333", weight="normal"):
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                 f'fill="{color}" font-weight="{weight}">{escape(s)}</text>')


def panel_frame(svg, p, x0, y0, w, h):
    svg.add(f'<rect x="{x0 + 3}" y="{y0 + 3}" width="{w - 6}" height="{h - 6}" rx="4" '
            f'fill="#ffffff" stroke="#d8d9da"/>')
    svg.text(x0 + 12, y0 + 20, p["title"], size=13, weight="bold")


def time_axis(svg, px, pw, py, ph, start, end, events):
    span = end - start
    for minute in range(0, int(span // 60) + 1):
        x = px + pw * (minute * 60) / span
        svg.add(f'<line x1="{x:.1f}" y1="{py}" x2="{x:.1f}" y2="{py + ph}" stroke="#eeeeee"/>')
        svg.text(x, py + ph + 12, f"{minute}:00", size=9, anchor="middle", color="#777")
    for t, label in events:
        x = px + pw * (t - start) / span
        svg.add(f'<line x1="{x:.1f}" y1="{py}" x2="{x:.1f}" y2="{py + ph}" stroke="#8e8e8e" '
                f'stroke-dasharray="3,3"/>')


def draw_state_timeline(svg, p, results, px, py, pw, ph, start, end):
    step = STEP
    mappings = {}
    for m in p["fieldConfig"]["defaults"].get("mappings", []):
        for value, spec in m.get("options", {}).items():
            mappings[float(value)] = spec
    rows = sorted(results, key=lambda r: r[0])
    label_w = 90
    if not rows:
        svg.text(px + pw / 2, py + ph / 2, "no data", anchor="middle", color="#999")
        return
    rh = min(22, ph / len(rows))
    span = end - start
    for i, (name, values, step) in enumerate(rows):
        y = py + i * rh
        svg.text(px, y + rh * 0.7, name, size=10)
        for j, (t, v) in enumerate(values):
            t_next = values[j + 1][0] if j + 1 < len(values) else t + step
            if t_next - t > 3 * step:
                t_next = t + step
            spec = mappings.get(v)
            fill = color_of(spec.get("color") if spec else None, "#bbbbbb")
            if fill is None:
                continue
            x = px + label_w + (pw - label_w) * (t - start) / span
            x2 = px + label_w + (pw - label_w) * (t_next - start) / span
            svg.add(f'<rect x="{x:.1f}" y="{y + 1:.1f}" width="{max(x2 - x, 0.5):.1f}" '
                    f'height="{rh * 0.8:.1f}" fill="{fill}" fill-opacity="0.85"/>')
    # Legend: the mapped states.
    lx, ly = px, py + ph + 16
    for value in sorted(mappings):
        spec = mappings[value]
        fill = color_of(spec.get("color"), None)
        if fill is None:
            continue
        item = 24 + 5.5 * len(spec["text"])
        if lx + item > px + pw:
            lx, ly = px, ly + 14
        svg.add(f'<rect x="{lx:.1f}" y="{ly}" width="10" height="10" fill="{fill}"/>')
        svg.text(lx + 14, ly + 9, spec["text"], size=10)
        lx += item


def draw_timeseries(svg, p, results, px, py, pw, ph, start, end):
    defaults = p["fieldConfig"]["defaults"]
    custom = defaults.get("custom", {})
    style = custom.get("drawStyle", "line")
    series = [(name, values) for name, values, _ in results]
    steps_of = {name: step for name, _, step in results}
    if not any(values for _, values in series):
        svg.text(px + pw / 2, py + ph / 2, "no data", anchor="middle", color="#999")
        return
    top = max((v for _, values in series for _, v in values if not math.isnan(v)), default=1)
    stacked = style == "bars" and custom.get("stacking", {}).get("mode") == "normal"
    if stacked:
        sums = {}
        for _, values in series:
            for t, v in values:
                sums[t] = sums.get(t, 0) + v
        top = max(sums.values(), default=1)
    top = max(top, 1 if defaults.get("unit") != "s" else 0.001) * 1.15
    bottom = defaults.get("min", 0)
    span = end - start

    def xy(t, v):
        return (px + pw * (t - start) / span, py + ph - ph * (v - bottom) / (top - bottom))

    for frac in (0, 0.5, 1):
        v = bottom + (top / 1.15 - bottom) * frac
        _, y = xy(start, v)
        svg.add(f'<line x1="{px}" y1="{y:.1f}" x2="{px + pw}" y2="{y:.1f}" stroke="#eeeeee"/>')
        unit = "s" if defaults.get("unit") == "s" else ""
        svg.text(px - 4, y + 3, f"{v:.3g}{unit}", size=9, anchor="end", color="#777")
    steps = defaults.get("thresholds", {}).get("steps", [])
    if custom.get("thresholdsStyle", {}).get("mode") == "line":
        for s in steps[1:]:
            if not bottom <= s["value"] <= top:
                continue
            _, y = xy(start, s["value"])
            svg.add(f'<line x1="{px}" y1="{y:.1f}" x2="{px + pw}" y2="{y:.1f}" '
                    f'stroke="{color_of(s["color"], "#999")}" stroke-dasharray="6,3"/>')
    stack = {}
    bar_w = max(pw * RATE / span * 0.8, 2)
    current_v = 0
    for i, (name, values) in enumerate(series):
        if defaults.get("color", {}).get("mode") == "fixed":
            color = color_of(defaults["color"].get("fixedColor"), PALETTE[i % len(PALETTE)])
        elif defaults.get("color", {}).get("mode") == "thresholds" and steps:
            color = color_of(steps[min(1, len(steps) - 1)]["color"], PALETTE[0])
        else:
            color = PALETTE[i % len(PALETTE)]
        if style == "bars":
            for t, v in values:
                if v <= 0 or math.isnan(v):
                    continue
                base = stack.get(t, 0) if stacked else 0
                x, y = xy(t, base + v)
                _, y0 = xy(t, base)
                # Side by side when not stacked: each series its share of the step.
                width = bar_w if stacked else bar_w / len(series)
                left = x - bar_w + (0 if stacked else i * width)
                svg.add(f'<rect x="{left:.1f}" y="{y:.1f}" width="{width:.1f}" '
                        f'height="{max(y0 - y, 1):.1f}" fill="{color}" fill-opacity="0.85"/>')
                stack[t] = base + v
        elif style == "points":
            for t, v in values:
                if not math.isnan(v):
                    x, y = xy(t, v)
                    svg.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>')
        else:
            segments, current, last_t = [], [], None
            for t, v in values:
                if math.isnan(v) or (last_t is not None and t - last_t > 3 * steps_of[name]):
                    if current:
                        segments.append(current)
                    current = []
                if not math.isnan(v):
                    if custom.get("lineInterpolation") == "stepAfter" and current:
                        current.append(xy(t, current_v))
                    current.append(xy(t, v))
                    current_v = v
                last_t = t
            if current:
                segments.append(current)
            for seg in segments:
                pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in seg)
                svg.add(f'<polyline points="{pts}" fill="none" stroke="{color}" '
                        f'stroke-width="{custom.get("lineWidth", 1) + 0.5}"/>')
        per_row = max(int(pw // 130), 1)
        lx, ly = px + 4 + 130 * (i % per_row), py + ph + 16 + 13 * (i // per_row)
        svg.add(f'<rect x="{lx}" y="{ly}" width="10" height="3" fill="{color}"/>')
        svg.text(lx + 14, ly + 5, name[:22], size=10)


def machine():
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return f"{platform.system()} {platform.release()}, {cores} cores, {cpu}".strip(", ")


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--prometheus", required=True)
    a.add_argument("--start", type=float, required=True)
    a.add_argument("--end", type=float, required=True)
    a.add_argument("--events", type=Path, required=True)
    a.add_argument("--namespace", required=True)
    a.add_argument("--job", required=True)
    a.add_argument("--command", required=True)
    a.add_argument("--out", type=Path, required=True)
    opts = a.parse_args()
    dash = json.loads(DASHBOARD.read_text())
    events = [(float(t), label) for t, label in
              (line.split("\t", 1) for line in opts.events.read_text().splitlines() if line)]
    events = [(t, l) for t, l in events if l != "end"]
    width = 24 * COLUMN + 20
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dash["panels"]) * ROW + 60
    svg = Svg()
    svg.add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif">')
    svg.add(f'<rect width="{width}" height="{height}" fill="#f4f5f5"/>')
    svg.text(12, 26, f'{dash["title"]} — namespace {opts.namespace}, a real run of {(opts.end - opts.start) / 60:.1f} minutes',
             size=15, weight="bold")
    with urllib.request.urlopen(f"{opts.prometheus}/api/v1/label/__name__/values", timeout=30) as r:
        scraped = set(json.load(r)["data"])
    empty = []
    for p in dash["panels"]:
        g = p["gridPos"]
        x0, y0, w, h = 10 + g["x"] * COLUMN, 40 + g["y"] * ROW, g["w"] * COLUMN, g["h"] * ROW
        panel_frame(svg, p, x0, y0, w, h)
        top = 16 if g["y"] == 0 else 0  # room for the event markers
        px, py, pw, ph = x0 + 50, y0 + 30 + top, w - 66, h - 80 - top
        results = []
        for t in p["targets"]:
            uses_rate = "$__rate_interval" in t["expr"] or "$__interval" in t["expr"]
            step = RATE if uses_rate else STEP
            start = opts.start + (RATE if uses_rate else 0)
            expr = substitute(t["expr"], opts.namespace, opts.job, RATE_WINDOW)
            for r in query(opts.prometheus, expr, start, opts.end, step):
                values = [(float(ts), float(v)) for ts, v in r["values"]]
                results.append((legend(t.get("legendFormat"), r["metric"]), values, step))
        if not results:
            used = {m for t in p["targets"]
                    for m in re.findall(r"\b((?:passmower_elector|apiserver)_[a-z0-9_]+)", t["expr"])}
            missing = sorted(m for m in used if m not in scraped
                             and re.sub(r"_(bucket|sum|count)$", "", m) + "_bucket" not in scraped)
            empty.append((p["title"], missing))
        time_axis(svg, px + (90 if p["type"] == "state-timeline" else 0),
                  pw - (90 if p["type"] == "state-timeline" else 0), py, ph, opts.start, opts.end, events)
        if p["type"] == "state-timeline":
            draw_state_timeline(svg, p, results, px, py, pw, ph, opts.start, opts.end)
        else:
            draw_timeseries(svg, p, results, px, py, pw, ph, opts.start, opts.end)
        if not results and empty[-1][1]:
            svg.text(px + pw / 2, py + ph / 2 + 16, "no series of " + ", ".join(empty[-1][1]),
                     size=9, anchor="middle", color="#999")
        if g["y"] == 0:
            for n, (t, label) in enumerate(events, 1):
                x = px + 90 + (pw - 90) * (t - opts.start) / (opts.end - opts.start)
                svg.add(f'<circle cx="{x:.1f}" cy="{py - 9}" r="7" fill="#555"/>')
                svg.text(x, py - 5.5, str(n), size=9, anchor="middle", color="#fff", weight="bold")
    svg.add("</svg>")
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.with_suffix(".svg").write_text("\n".join(svg.parts) + "\n")

    version = urllib.request.urlopen(f"{opts.prometheus}/api/v1/status/buildinfo", timeout=10)
    version = json.load(version)["data"]["version"]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# The dashboard, from a real run",
        "",
        "Generated by `" + opts.command + "` on " + when + " (" + machine() + "); do not edit.",
        "",
        "The chart's Grafana dashboard ([monitoring](../operations/monitoring.md)), every panel's",
        f"query evaluated by a real Prometheus {version} over the run and drawn by",
        "`scripts/render-dashboard.py`: a kube-apiserver and etcd on loopback with the write fence",
        "`inject` generates, three pods as processes (elector with the default timings 15s/10s/2s/3s,",
        "supervisor, and a stand-in app that writes a Secret every half second as leader, with its",
        "pod's bound ServiceAccount token), scraped every 2s. Numbered markers:",
        "",
    ]
    for n, (t, label) in enumerate(events, 1):
        lines.append(f"{n}. {t - opts.start:.0f}s: {label}")
    lines += ["", "![the dashboard over the run](dashboard.svg)", ""]
    for title, missing in empty:
        ours = [f"`{m}`" for m in missing if m.startswith("passmower_")]
        theirs = [f"`{m}`" for m in missing if not m.startswith("passmower_")]
        why = "; ".join(
            ([f"the elector of this build does not export {', '.join(ours)}"] if ours else [])
            + ([f"the kube-apiserver counted none ({', '.join(theirs)} has no series)"] if theirs else [])
        ) or "nothing of the kind happened in this run"
        lines.append(f"- No data in *{title}*: {why}.")
    if empty:
        lines.append("")
    opts.out.with_suffix(".md").write_text("\n".join(lines))
    print(f"render-dashboard: wrote {opts.out.with_suffix('.svg')} and .md; empty panels: {[t for t, _ in empty] or 'none'}")


if __name__ == "__main__":
    main()
