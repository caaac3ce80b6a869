#!/usr/bin/env bash
# Side-by-side: `pact-perf p2p` (an NCCL net plugin driven through pact::loader) against raw UCP on
# the same transport, loopback, same message sizes, same pattern. Bandwidth: pact-perf p2p against
# pact-ucp-bw (perf/ucp_bw.cpp: raw UCP tag send/receive, nothing in between), both in NCCL's slot
# pattern by default: a window of 8 in flight, each message in its own buffer, receives
# pre-posted, counted at the receiver. Latency: pact-perf's ping-pong against ucx_perftest tag_lat.
# Runs are interleaved (A,B then B,A ...) and repeated; each cell is the median over rounds.
#
# usage: perf/compare-ucx.sh [TLS]          TLS defaults to $UCX_TLS, then tcp (e.g. tcp, sm, shm)
# environment (all optional):
#   BUILD=build        build directory holding perf/pact-perf, perf/pact-ucp-bw and the plugin
#   PACT_PERF=...  UCP_BW=...  PLUGIN=...   the binaries / net plugin .so, if not under BUILD
#   ROUNDS=3  MIN_SIZE=8  MAX_SIZE=64M  FACTOR=2  WINDOW=8  BUDGET=256M  MAX_ITERS=20000
#   BUFFERS=0          slot buffers per side: 0 = one per message in flight (NCCL's slot pattern,
#                      the default); 1 = one buffer for every message (ucx_perftest's pattern,
#                      which keeps the data in cache; the output says "one buffer")
#   RAW_ARGS=          extra pact-ucp-bw arguments, e.g. --peer-errors (pact's UCX error mode)
#   BW_MIN_SIZE=$MIN_SIZE  smallest size of the bandwidth sweep
#   LAT_MAX_SIZE=64K   largest size of the latency sweep (which starts at MIN_SIZE)
#   OUT=dir            keep raw results there (default: a temporary directory, removed at exit)
#   STEP_TIMEOUT=900   seconds allowed for one run
# Bandwidth: GB/s = 1e9 bytes/s. Latency: one-way microseconds; pact P50 of RTT/2 against
# ucx_perftest's 50th-percentile latency. Targets (docs/performance.md): bandwidth >= 0.97x raw
# UCP from 64K, 8-byte message rate >= ucx_perftest tag_bw, 8-byte latency <= 1.1x ucx_perftest.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=perf/ucx-lib.sh
. "$here/perf/ucx-lib.sh"
perf_env "${1:-}"
ROUNDS=${ROUNDS:-3}
BUFFERS=${BUFFERS:-0}
RAW_ARGS=${RAW_ARGS:-}
MIN_SIZE=${MIN_SIZE:-8}
MAX_SIZE=${MAX_SIZE:-64M}
LAT_MAX_SIZE=${LAT_MAX_SIZE:-64K}
FACTOR=${FACTOR:-2}
WINDOW=${WINDOW:-8}
BUDGET=${BUDGET:-256M}
MAX_ITERS=${MAX_ITERS:-20000}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}
pattern="NCCL's slot pattern (window $WINDOW, a buffer per message in flight)"
(( BUFFERS == 0 )) || pattern="one buffer: $BUFFERS buffer(s) per side reused by every message (ucx_perftest's pattern), window $WINDOW"

die() { echo "compare-ucx: $*" >&2; exit 1; }
[[ -x $PACT_PERF ]] || die "no pact-perf at $PACT_PERF (set BUILD or PACT_PERF)"
[[ -x $UCP_BW ]] || die "no pact-ucp-bw at $UCP_BW (set BUILD or UCP_BW)"
[[ -r $PLUGIN ]] || die "no plugin at $PLUGIN (set BUILD or PLUGIN)"
command -v ucx_perftest >/dev/null || die "ucx_perftest not found"
command -v python3 >/dev/null || die "python3 not found"

bytes() {  # 4K -> 4096
  local v=${1^^}
  case $v in
    *K) echo $(( ${v%K} << 10 )) ;; *M) echo $(( ${v%M} << 20 )) ;; *G) echo $(( ${v%G} << 30 )) ;;
    *) echo "$v" ;;
  esac
}
min=$(bytes "$MIN_SIZE"); max=$(bytes "$MAX_SIZE"); budget=$(bytes "$BUDGET")
bw_min=$(bytes "${BW_MIN_SIZE:-$MIN_SIZE}"); lat_max=$(bytes "$LAT_MAX_SIZE")

perf_workdir
rm -f "$out"/pact-* "$out"/ucx-* "$out"/raw-* "$out"/batch-*

# One ucx_perftest batch file per latency size, with the iteration counts pact-perf uses for that
# size (see perf/p2p_bench.cpp: latIters).
sizes=()
for (( s = min; s <= max; s *= FACTOR )); do
  sizes+=("$s")
  (( s <= lat_max )) || continue
  ln=1000; (( s > 65536 )) && ln=$(( 1000 * 65536 / s )); (( ln < 50 )) && ln=50
  lw=$(( ln / 10 )); (( lw < 5 )) && lw=5
  echo "lat_$s -t tag_lat -s $s -n $ln -w $lw" > "$out/batch-$s.txt"
  # The 8-byte message rate is also compared with ucx_perftest's tag_bw (one buffer does not
  # matter at 8 bytes), the figure the earlier comparisons used.
  if (( s == 8 )); then echo "bw_8 -t tag_bw -s 8 -n $MAX_ITERS -w 1000" >> "$out/batch-$s.txt"; fi
done

run_ucx() {  # $1 = size, $2 = result csv: ucx_perftest tag_lat
  ucx_perftest_pair "$out/batch-$1.txt" "$out/ucx-server.log" "$2" "$STEP_TIMEOUT"
}

run_raw() {  # $1 = size, $2 = result json: pact-ucp-bw in the same pattern as pact-perf
  # shellcheck disable=SC2086  # RAW_ARGS: extra words on purpose
  timeout "$STEP_TIMEOUT" "$UCP_BW" --window "$WINDOW" --buffers "$BUFFERS" --min-size "$1" \
    --max-size "$1" --budget "$budget" --max-iters "$MAX_ITERS" $RAW_ARGS --json "$2" > "$2.log" 2>&1 ||
    die "pact-ucp-bw failed at size $1: $(tail -5 "$2.log")"
}

run_pact() {  # $1 = size, $2 = result json
  local bw=(--no-bw) lat=(--no-lat)
  if (( $1 >= bw_min )); then
    bw=(--min-size "$1" --max-size "$1" --budget "$budget" --max-iters "$MAX_ITERS")
  fi
  if (( $1 <= lat_max )); then lat=(--lat-min-size "$1" --lat-max-size "$1"); fi
  timeout "$STEP_TIMEOUT" "$PACT_PERF" p2p --plugin "$PLUGIN" --window "$WINDOW" \
    --buffers "$BUFFERS" "${bw[@]}" "${lat[@]}" --json "$2" > "$2.log" 2>&1 ||
    die "pact-perf failed at size $1: $(tail -5 "$2.log")"
}

run_baseline() {  # $1 = size, $2 = round
  if (( $1 >= bw_min )); then run_raw "$1" "$out/raw-$2-$1.json"; fi
  if (( $1 <= lat_max )); then run_ucx "$1" "$out/ucx-$2-$1.csv"; fi
}

# Interleave at the finest useful grain: per size, A then B or B then A (alternating), so a burst
# of load from other processes hits both sides of a pair about equally.
echo "# UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES PACT_NET_DEVICES=$PACT_NET_DEVICES rounds=$ROUNDS"
echo "# pattern: $pattern${RAW_ARGS:+; raw UCP with $RAW_ARGS}"
echo "# plugin $PLUGIN"
for (( r = 1; r <= ROUNDS; r++ )); do
  echo "# round $r/$ROUNDS"
  i=0
  for s in "${sizes[@]}"; do
    if (( (r + i) % 2 )); then
      run_pact "$s" "$out/pact-$r-$s.json"; run_baseline "$s" "$r"
    else
      run_baseline "$s" "$r"; run_pact "$s" "$out/pact-$r-$s.json"
    fi
    i=$(( i + 1 ))
  done
done

python3 - "$out" <<'PY'
# Noise on a shared machine is strongly correlated in time, so the ratio columns are medians of
# per-pair ratios (pact and the baseline run back to back for the same size and round); the
# absolute columns are plain medians over rounds.
import csv, glob, json, os, re, statistics, sys
out = sys.argv[1]
pact, base, perftest_bw = {}, {}, {}  # (kind, size) -> {round: value}; perftest_bw: round -> GB/s
def load_json(prefix, into, kinds):
    for path in glob.glob(f"{out}/{prefix}-*-*.json"):
        rnd = int(re.match(prefix + r"-(\d+)-", os.path.basename(path)).group(1))
        for row in json.load(open(path))["results"]:
            for kind, field in kinds:
                if row.get(field) is not None:
                    into.setdefault((kind, row["size"]), {})[rnd] = row[field]
load_json("pact", pact, [("bw", "bw_gbps"), ("lat", "lat_p50_us")])
load_json("raw", base, [("bw", "bw_gbps")])
for path in glob.glob(f"{out}/ucx-*-*.csv"):
    rnd = int(re.match(r"ucx-(\d+)-", os.path.basename(path)).group(1))
    with open(path) as f:
        for row in csv.reader(f):
            m = re.fullmatch(r"(lat|bw)_(\d+)", row[0].strip()) if row else None
            if not m: continue
            if m.group(1) == "lat": base.setdefault(("lat", int(m.group(2))), {})[rnd] = float(row[2])
            else: perftest_bw[rnd] = float(row[6]) * 1048576 / 1e9  # overall bandwidth, MiB/s
def med(d, key):
    v = list(d.get(key, {}).values())
    return statistics.median(v) if v else float("nan")
def ratio(key):
    a, b = pact.get(key, {}), base.get(key, {})
    r = [a[k] / b[k] for k in a if k in b and b[k] > 0]
    return statistics.median(r) if r else float("nan")
def fmt(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0: return f"{size >> shift}{unit}"
    return str(size)
def cell(v, spec):  # NaN (not measured) -> "-"
    return "-" if v != v else format(v, spec)
sizes = sorted({s for _, s in list(pact) + list(base)})
print("| size | pact GB/s | raw UCP GB/s | bw ratio | pact P50 lat us | ucx_perftest lat us | lat ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|")
bw_ratios, rate, lat8 = [], [], []
for s in sizes:
    br, lr = ratio(("bw", s)), ratio(("lat", s))
    if s >= 64 << 10 and ("bw", s) in pact: bw_ratios.append(br)
    if s == 8:
        rate, lat8 = [br], [lr]
    print(f"| {fmt(s)} | {cell(med(pact, ('bw', s)), '.3f')} | {cell(med(base, ('bw', s)), '.3f')} | "
          f"{cell(br, '.2f')} | {cell(med(pact, ('lat', s)), '.2f')} | "
          f"{cell(med(base, ('lat', s)), '.2f')} | {cell(lr, '.2f')} |")
if ("bw", 8) in pact:
    rate_pt = [pact[("bw", 8)][k] / perftest_bw[k] for k in pact[("bw", 8)] if perftest_bw.get(k)]
    rate_pt = [statistics.median(rate_pt)] if rate_pt else []
    print(f"\n8-byte message rate: pact {med(pact, ('bw', 8)) * 1e9 / 8:,.0f}/s, raw UCP (same "
          f"pattern) {med(base, ('bw', 8)) * 1e9 / 8:,.0f}/s, ucx_perftest tag_bw "
          f"{statistics.median(perftest_bw.values()) * 1e9 / 8 if perftest_bw else float('nan'):,.0f}/s")
def verdict(ratios, ok):
    if not ratios or any(r != r for r in ratios): return "n/a (not measured)"
    bad = [r for r in ratios if not ok(r)]
    return "met" if not bad else f"NOT met ({len(bad)} of {len(ratios)} sizes miss)"
print()
print("ratios are medians of per-pair ratios (pact / baseline, same size and round)")
print("target bandwidth >= 0.97x raw UCP from 64K:", verdict(bw_ratios, lambda r: r >= 0.97))
print("8-byte message rate against raw UCP in the same pattern:", cell(rate[0] if rate else float("nan"), ".2f"))
print("target 8-byte message rate >= ucx_perftest tag_bw:", verdict(rate_pt if ("bw", 8) in pact else [], lambda r: r >= 1.0))
print("target 8-byte latency <= 1.1x ucx_perftest:", verdict(lat8, lambda r: r <= 1.1))
PY
