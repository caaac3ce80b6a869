#!/usr/bin/env python3
"""--plot on pact-perf p2p, coll, kv and mix, and pact-plot (perf/plot.py, beside pact-perf) over
several runs: each SVG parses, holds the lines or bars its results call for, every point and bar
inside the plot area; what is not a result, or a plot that cannot be written, is refused with a
message. Times are never asserted.

Usage: plot_test.py PACT_PERF"""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from checks import fail, finish

perf = sys.argv[1]
plot = os.path.join(os.path.dirname(os.path.abspath(perf)), "pact-plot")
env = dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo", UCX_TLS="tcp")
L, R, T, B = 70, 570, 40, 380  # the plot area (perf/plot.py's margins)


def run(cmd, name, timeout=180):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail("%s: exit %d" % (name, p.returncode), p.stdout + p.stderr)
    return p


def lines_of(svg):
    """{label: [(x, y)]} of an SVG's polylines."""
    out = {}
    for e in ET.parse(svg).iter():
        if e.tag.endswith("polyline"):
            label = next(c.text for c in e if c.tag.endswith("title"))
            out[label] = [tuple(map(float, xy.split(","))) for xy in e.get("points").split()]
    return out


def bars_of(svg):
    """[(title, x, y, height)] of an SVG's bars."""
    out = []
    for e in ET.parse(svg).iter():
        if e.tag.endswith("rect") and e.get("class") == "bar":
            title = next(c.text for c in e if c.tag.endswith("title"))
            out.append((title, float(e.get("x")), float(e.get("y")), float(e.get("height"))))
    return out


def inside(pts):
    return all(L <= x <= R and T <= y <= B for x, y in pts)


with tempfile.TemporaryDirectory() as tmp:
    # p2p: --plot alone (no --json): one bandwidth line, a point per size.
    svg = os.path.join(tmp, "p2p.svg")
    run([perf, "p2p", "--no-lat", "--min-size", "1K", "--max-size", "1M", "--factor", "4", "--plot", svg], "p2p --plot")
    if os.path.exists(svg):
        ls = lines_of(svg)
        if len(ls) != 1 or len(next(iter(ls.values()))) != 6 or not inside(next(iter(ls.values()))):
            fail("p2p --plot: %s (want one line of 6 points inside the plot)" % ls)
        else:
            print("ok: p2p --plot drew one line of 6 sizes", flush=True)

    # coll: --json and --plot together: every op a line; then two runs on one chart.
    runs = []
    for tls in ("tcp", "sm"):
        js, svg = os.path.join(tmp, "coll-%s.json" % tls), os.path.join(tmp, "coll-%s.svg" % tls)
        env["UCX_TLS"] = tls
        run([perf, "coll", "-np", "2", "--op", "all", "-b", "4K", "-e", "1M", "-f", "4", "-n", "1", "-w", "0",
             "--json", js, "--plot", svg], "coll --plot over " + tls)
        runs.append(js + "=" + tls)
        if os.path.exists(svg):
            ls = lines_of(svg)
            if len(ls) != 6 or not all(len(p) == 5 and inside(p) for p in ls.values()):
                fail("coll --plot over %s: %d lines %s (want 6 ops x 5 sizes)" % (tls, len(ls), list(ls)))
    env["UCX_TLS"] = "tcp"
    svg = os.path.join(tmp, "coll.svg")
    run([sys.executable, plot, svg] + runs, "pact-plot over two coll runs")
    ls = lines_of(svg) if os.path.exists(svg) else {}
    if len(ls) != 12 or not all(inside(p) for p in ls.values()) or "sm allreduce" not in ls:
        fail("pact-plot over two coll runs: %s (want 12 lines: 6 ops x 2 runs)" % list(ls))
    else:
        print("ok: coll --plot drew 6 ops per run; pact-plot put both runs' 12 lines on one chart", flush=True)

    # kv: one run is bars (all and healthy requests); runs of two request sizes are lines.
    kvs = []
    for bs in ("16K", "64K"):
        js, svg = os.path.join(tmp, "kv-%s.json" % bs), os.path.join(tmp, "kv-%s.svg" % bs)
        run([perf, "kv", "--seconds", "0.5", "--block-size", bs, "--json", js, "--plot", svg], "kv --plot " + bs)
        kvs.append(js + "=pact")
    svg = os.path.join(tmp, "kv-16K.svg")
    bars = bars_of(svg) if os.path.exists(svg) else []
    names = sorted({t.split(" P")[0] for t, _, _, _ in bars})
    if len(bars) != 6 or names != ["all", "healthy"] or not all(h > 0 and T <= y and y + h <= B + 0.5 for _, _, y, h in bars):
        fail("kv --plot: %d bars for %s (want P50/P95/P99 of all and healthy)" % (len(bars), names))
    svg = os.path.join(tmp, "kv.svg")
    run([sys.executable, plot, svg] + kvs, "pact-plot over two kv runs")
    ls = lines_of(svg) if os.path.exists(svg) else {}
    if sorted(ls) != ["pact p50", "pact p95", "pact p99"] or not all(len(p) == 2 and inside(p) for p in ls.values()):
        fail("pact-plot over kv runs of two sizes: %s (want P50/P95/P99 lines of 2 points)" % ls)
    else:
        print("ok: kv --plot drew bars; two kv runs are three percentile lines against the request size", flush=True)

    # mix: bars per phase and stream.
    svg = os.path.join(tmp, "mix.svg")
    run([perf, "mix", "--seconds", "0.4", "--ckpt-bytes", "2M", "--plot", svg], "mix --plot")
    bars = bars_of(svg) if os.path.exists(svg) else []
    groups = {t.split(" P")[0] for t, _, _, _ in bars}
    if len(bars) != 21 or "alone kv" not in groups or "shared ckpt" not in groups:
        fail("mix --plot: %d bars, groups %s (want 7 phase/stream groups of 3)" % (len(bars), sorted(groups)))
    else:
        print("ok: mix --plot drew P50/P95/P99 for each of the 7 phase/stream groups", flush=True)

    # A smallest bar on a power of ten (a P50 of exactly 1000 us, seen in CI) is still drawn above the axis.
    loader = importlib.machinery.SourceFileLoader("pact_plot", plot)  # pact-plot has no .py suffix
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("pact_plot", loader))
    loader.exec_module(mod)
    svg = os.path.join(tmp, "decade.svg")
    open(svg, "w").write(mod.render_bars([("all", [1000.0, 3000.0, 4000.0]), ("healthy", [1000.2, 1000.2, 1000.2])], "us", "t"))
    low = [(t, h) for t, _, _, h in bars_of(svg) if h <= 0]
    if low:
        fail("render_bars: bars drawn zero high at a power of ten: %s" % low)
    else:
        print("ok: a bar at a power of ten is drawn above the axis", flush=True)

    # Refusals: not a pact-perf result; a plot that cannot be written fails the command, saying so.
    bad = os.path.join(tmp, "bad.json")
    open(bad, "w").write('{"meta": {"tool": "pact-perf scale"}, "results": []}')
    p = subprocess.run([sys.executable, plot, os.path.join(tmp, "x.svg"), bad], capture_output=True, text=True, timeout=60)
    if p.returncode == 0 or "not pact-perf p2p, coll, kv or mix" not in p.stderr:
        fail("pact-plot: a scale result was not refused: exit %d %r" % (p.returncode, p.stderr))
    before = {f for f in os.listdir("/tmp") if f.startswith("pact-perf-plot-")}
    p = subprocess.run([perf, "p2p", "--no-lat", "--min-size", "1K", "--max-size", "1K", "--plot",
                        os.path.join(tmp, "no-such-dir", "p.svg")], env=env, capture_output=True, text=True, timeout=120)
    left = {f for f in os.listdir("/tmp") if f.startswith("pact-perf-plot-")} - before
    if p.returncode == 0 or "pact-plot could not draw" not in p.stderr:
        fail("p2p --plot into a missing directory: exit %d, %r" % (p.returncode, p.stderr[-500:]))
    elif left:
        fail("p2p --plot left its temporary JSON behind: %s" % left)
    else:
        print("ok: a non-result is refused; an unwritable --plot fails the command and leaves no temporary file", flush=True)

finish("--plot and pact-plot")
