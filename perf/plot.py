#!/usr/bin/env python3
"""Plots of pact-perf results as SVG (a small writer of our own: no plotting library needed).

    python3 perf/plot.py OUT.svg RUN.json[=LABEL] [RUN.json[=LABEL] ...] [--metric M] [--title T]

Installed beside pact-perf as pact-plot, which runs it for `--plot OUT.svg`. Each RUN is the
--json file of `pact-perf p2p`, `coll`, `kv` or `mix` (several runs, plugins or transports go on
one chart, one line each; a coll file with several ops gives a line per op; kv files with the
same label join into one line).
Metrics:
  auto    what suits the results (default): bw for p2p and coll; lat for several kv request
          sizes, bars for one; bars for mix
  bw      GB/s against the message size (log2 axis): p2p bw_gbps, coll out-of-place busbw, kv
          goodput against the request's bytes
  busbw-in  coll in-place busbw
  lat     us against the size: p2p lat_p50_us, lat_p95_us and lat_p99_us (three lines per run),
          coll out-of-place time, kv commit P50/P95/P99 against the request's bytes
  bars    P50/P95/P99 as bars (log scale): kv per request set (all, healthy, slow, in us), mix per
          phase and stream (ms; mix --face nccl: the latency stream, with the bulk stream's
          goodput per phase written beside the bars)
Writes OUT.svg; exits 1 with a message when a file is not a pact-perf result or holds no point.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
W, H, L, R, T, B = 760, 440, 70, 190, 40, 60  # size and margins


@functools.lru_cache(maxsize=None)
def load(path: str):
    """(tool, document) of one result file (read once)."""
    try:
        doc = json.load(open(path))
        tool = doc["meta"]["tool"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit("plot: %s is not a pact-perf --json result (%s)" % (path, e))
    if tool not in ("pact-perf p2p", "pact-perf coll", "pact-perf kv", "pact-perf mix"):
        sys.exit("plot: %s comes from %r, not pact-perf p2p, coll, kv or mix" % (path, tool))
    return tool, doc


def kv_bytes(doc) -> int:
    m = doc["meta"]
    return int(m["block_bytes"]) * int(m["blocks_per_request"])


def series(path: str, label: str, metric: str):
    """(label, [(size, value)]) lines from one result file."""
    tool, doc = load(path)
    out = []
    if tool == "pact-perf p2p":
        keys = {"bw": ["bw_gbps"], "lat": ["lat_p50_us", "lat_p95_us", "lat_p99_us"]}.get(metric)
        if keys is None:
            sys.exit("plot: --metric %s does not apply to p2p results" % metric)
        for k in keys:
            pts = [(r["size"], r[k]) for r in doc["results"] if r.get(k) is not None]
            out.append((label if len(keys) == 1 else "%s %s" % (label, k.split("_")[1]), pts))
    elif tool == "pact-perf coll":
        if metric not in ("bw", "busbw-in", "lat"):
            sys.exit("plot: --metric %s does not apply to coll results" % metric)
        place, key = {"bw": ("out_of_place", "busbw_gbps"), "busbw-in": ("in_place", "busbw_gbps"),
                      "lat": ("out_of_place", "time_us")}[metric]
        rows = doc["results"]
        ops = sorted({r["op"] for r in rows})
        for op in ops:
            pts = [(r["size"], r[place][key]) for r in rows if r["op"] == op and r["size"] > 0]
            out.append((label if len(ops) == 1 else "%s %s" % (label, op), pts))
    elif tool == "pact-perf kv":
        if metric == "bw":
            out.append((label, [(kv_bytes(doc), doc["goodput_gbps"])]))
        elif metric == "lat":
            lat = doc["latency"]["all"]
            for k in ("p50_us", "p95_us", "p99_us"):
                out.append(("%s %s" % (label, k.split("_")[0]), [(kv_bytes(doc), lat[k])]))
        else:
            sys.exit("plot: --metric %s does not apply to kv results" % metric)
    else:
        sys.exit("plot: mix results are drawn as bars (--metric bars or auto)")
    return out


def bar_groups(path: str, label: str, prefix: bool):
    """(group name, [p50, p95, p99]) of one kv or mix file, and the unit. Rows without
    percentiles (mix --face nccl's bulk stream, measured by its goodput) have no bars."""
    tool, doc = load(path)
    pre = label + " " if prefix else ""
    if tool == "pact-perf mix":
        return [(pre + "%s %s" % (r["phase"], r["stream"]), [r["p50_ms"], r["p95_ms"], r["p99_ms"]])
                for r in doc["results"] if r.get("p50_ms") is not None], "ms"
    if tool == "pact-perf kv":
        return [(pre + k, [v["p50_us"], v["p95_us"], v["p99_us"]])
                for k, v in doc["latency"].items() if v.get("samples", 0) > 0], "us"
    sys.exit("plot: --metric bars draws kv and mix results, not %s" % tool)


def bar_notes(path: str, label: str, prefix: bool):
    """Text lines beside the bars: mix --face nccl's bulk goodput per phase (it has no bars)."""
    tool, doc = load(path)
    if tool != "pact-perf mix" or doc["meta"].get("face") != "nccl":
        return []
    pre = label + " " if prefix else ""
    return [pre + "%s %.3f" % (r["phase"], r["goodput_gbit_s"])
            for r in doc["results"] if r["stream"] == "bulk"]


def nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(v))
    return next(m * e for m in (1, 2, 2.5, 5, 10) if m * e >= v)


def size_label(b: int) -> str:
    for unit, n in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= n:
            return "%d%s" % (b // n, unit)
    return "%dB" % b


def render(lines, metric: str, title: str, xlabel: str = "message size (bytes)", linear_x: bool = False) -> str:
    """linear_x: x is a plain number (time), not a size on a log2 axis."""
    pts = [p for _, ps in lines for p in ps]
    if not pts:
        sys.exit("plot: no points to plot")
    xs = [s if linear_x else math.log2(max(s, 1)) for s, _ in pts]
    x0, x1 = min(xs), max(xs)
    x1 = x1 if x1 > x0 else x0 + 1
    log_y = metric == "lat"
    if log_y:
        ys = [math.log10(max(v, 1e-3)) for _, v in pts]
        y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
        y1 = y1 if y1 > y0 else y0 + 1
    else:
        y0, y1 = 0.0, nice_max(max(v for _, v in pts))
    pw, ph = W - L - R, H - T - B
    fx = lambda s: L + ((s if linear_x else math.log2(max(s, 1))) - x0) / (x1 - x0) * pw
    fy = lambda v: T + ph - ((math.log10(max(v, 1e-3)) if log_y else v) - y0) / (y1 - y0) * ph
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
         'font-size="12">' % (W, H), '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="22" font-size="15">%s</text>' % (L, escape(title))]
    xticks = ([(x0 + (x1 - x0) * k / 10, "%.0f" % (x0 + (x1 - x0) * k / 10)) for k in range(11)] if linear_x else
              [(2 ** i, size_label(2 ** i)) for i in range(int(x0), int(math.ceil(x1)) + 1, max(1, int((x1 - x0) // 10) or 1))])
    for v, label in xticks:
        x = fx(v)
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, T, x, T + ph))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x, T + ph + 18, label))
    ticks = [10 ** k for k in range(int(y0), int(y1) + 1)] if log_y else [y0 + (y1 - y0) * k / 5 for k in range(6)]
    for v in ticks:
        y = fy(v)
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, y, L + pw, y))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (L - 6, y + 4, v))
    o.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>' % (L, T, pw, ph))
    o.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (L + pw / 2, H - 18, escape(xlabel)))
    ylab = {"bw": "GB/s", "busbw-in": "GB/s (in place)", "lat": "us (log)", "gbit": "Gbit/s"}[metric]
    o.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">%s</text>' % (T + ph / 2, T + ph / 2, ylab))
    for k, (label, ps) in enumerate(lines):
        c = COLORS[k % len(COLORS)]
        path = " ".join("%.1f,%.1f" % (fx(s), fy(v)) for s, v in sorted(ps))
        o.append('<polyline class="series" fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>'
                 % (c, path, escape(label)))
        ly = T + 14 + 18 * k
        o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>' % (L + pw + 12, ly - 4, L + pw + 32, ly - 4, c))
        o.append('<text x="%d" y="%d">%s</text>' % (L + pw + 36, ly, escape(label)))
    o.append("</svg>")
    return "\n".join(o) + "\n"


def render_bars(groups, unit: str, title: str, notes=()) -> str:
    vals = [v for _, vs in groups for v in vs if v > 0]
    if not vals:
        sys.exit("plot: no points to plot")
    lo = math.log10(min(vals))
    # The axis starts a decade lower when the smallest bar sits on (or just above) a power of ten,
    # so that no bar is drawn zero high: a P50 of 1000.2 us is a bar, not a line on the axis.
    y0 = math.floor(lo) - (1 if lo - math.floor(lo) < 0.05 else 0)
    y1 = max(math.ceil(math.log10(max(vals))), y0 + 1)
    pw, ph = W - L - R, H - T - B
    fy = lambda v: T + ph - (math.log10(max(v, 10 ** y0)) - y0) / (y1 - y0) * ph
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
         'font-size="12">' % (W, H), '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="22" font-size="15">%s</text>' % (L, escape(title))]
    for k in range(y0, y1 + 1):
        y = fy(10 ** k)
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, y, L + pw, y))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (L - 6, y + 4, 10 ** k))
    o.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>' % (L, T, pw, ph))
    o.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">%s (log)</text>'
             % (T + ph / 2, T + ph / 2, unit))
    gw = pw / len(groups)
    bw = gw * 0.8 / 3
    names = ("P50", "P95", "P99")
    for g, (name, vs) in enumerate(groups):
        x0 = L + g * gw + gw * 0.1
        for i, v in enumerate(vs):
            y = fy(v)
            o.append('<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %g %s</title></rect>'
                     % (x0 + i * bw, y, bw, T + ph - y, COLORS[i], escape(name), names[i], v, unit))
        o.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>' % (L + g * gw + gw / 2, T + ph + 16 + 12 * (g % 2), escape(name)))
    for i, n in enumerate(names):
        ly = T + 14 + 18 * i
        o.append('<rect x="%d" y="%d" width="20" height="10" fill="%s"/>' % (L + pw + 12, ly - 9, COLORS[i]))
        o.append('<text x="%d" y="%d">%s</text>' % (L + pw + 36, ly, n))
    if notes:
        ny = T + 14 + 18 * len(names) + 16
        o.append('<text x="%d" y="%d">bulk goodput (Gbit/s)</text>' % (L + pw + 12, ny))
        for k, line in enumerate(notes):
            o.append('<text class="note" x="%d" y="%d" font-size="11">%s</text>' % (L + pw + 12, ny + 16 * (k + 1), escape(line)))
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="RESULT.json or RESULT.json=LABEL")
    ap.add_argument("--metric", choices=["auto", "bw", "busbw-in", "lat", "bars"], default="auto")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    runs = [(path, label or path.rsplit("/", 1)[-1].removesuffix(".json"))
            for path, _, label in (r.partition("=") for r in a.runs)]
    metric = a.metric
    if metric == "auto":
        tools = [load(path)[0] for path, _ in runs]
        if "pact-perf mix" in tools:
            metric = "bars"
        elif all(t == "pact-perf kv" for t in tools):
            metric = "bars" if len({kv_bytes(load(p)[1]) for p, _ in runs}) == 1 else "lat"
        else:
            metric = "bw"
    titles = {"bw": "bandwidth", "busbw-in": "bus bandwidth, in place", "lat": "latency",
              "bars": "latency percentiles"}
    if metric == "bars":
        groups, unit, notes = [], "us", []
        for path, label in runs:
            g, unit = bar_groups(path, label, len(runs) > 1)
            groups += g
            notes += bar_notes(path, label, len(runs) > 1)
        if not groups:
            sys.exit("plot: no latency percentiles to draw")
        svg = render_bars(groups, unit, a.title or titles[metric], notes)
        what = "%d groups of bars" % len(groups)
    else:
        lines = {}
        for path, label in runs:  # lines of the same label (kv runs of one system) join
            for name, pts in series(path, label, metric):
                lines.setdefault(name, []).extend(pts)
        lines = list(lines.items())
        kv = all(load(p)[0] == "pact-perf kv" for p, _ in runs)
        svg = render(lines, metric, a.title or titles[metric], "request size (bytes)" if kv else "message size (bytes)")
        what = "%d lines, %d points" % (len(lines), sum(len(p) for _, p in lines))
    open(a.out, "w").write(svg)
    print("plot: wrote %s (%s)" % (a.out, what))


if __name__ == "__main__":
    main()
