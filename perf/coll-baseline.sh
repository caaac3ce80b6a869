#!/usr/bin/env bash
# pact-perf coll on N ranks against the same transport raw, interleaved per round (#15's targets):
# - bandwidth: N pairs of pact-ucp-bw at once (raw UCP tag, NCCL's slot pattern, window 8), so
#   N links carry traffic together as in a ring of N (each rank one stream out and one in; an
#   all-to-all rank sends to its peers at once). A ring allreduce's busbw is what each link
#   carries, and an alltoall's busbw what each rank sends, so the baseline busbw at a size is
#   the mean per-pair bandwidth at that size. Target: pact's busbw >= 0.9x from 1 MiB.
# - latency: the ring's floor, steps x ucx_perftest's one-hop tag_lat P50 at 8 B (allreduce:
#   2(n-1) steps); target: pact's 8-byte allreduce time (200 iterations) <= 1.25x the floor.
# Medians over rounds. pact-perf coll reduces on the CPU and its ranks share the machine's cores
# with the links' copies; raw UCP does neither of the first.
#
# usage: perf/coll-baseline.sh [TLS]       TLS defaults to $UCX_TLS, then tcp
# environment (all optional):
#   BUILD=build (or PACT_PERF, UCP_BW, PLUGIN one by one)  RANKS=8  ROUNDS=2  OPS="allreduce alltoall"  MIN_SIZE=1M  MAX_SIZE=64M  FACTOR=4
#   ITERS=5  BUDGET=128M (raw bytes per size and pair)  RAW_ARGS="--peer-errors --yield" over tcp,
#   "--yield" otherwise (pact's UCX error mode; yielding when idle, as pact-perf coll's ranks do:
#   N pairs share the cores)
#   OUT=dir (keep the results; default a temporary directory)  STEP_TIMEOUT=900
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=perf/ucx-lib.sh
. "$here/perf/ucx-lib.sh"
perf_env "${1:-}"
RANKS=${RANKS:-8}
ROUNDS=${ROUNDS:-2}
OPS=${OPS:-allreduce alltoall}
MIN_SIZE=${MIN_SIZE:-1M}
MAX_SIZE=${MAX_SIZE:-64M}
FACTOR=${FACTOR:-4}
ITERS=${ITERS:-5}
BUDGET=${BUDGET:-128M}
# pact's endpoints use UCX's peer error mode where the transport has it (tcp), not on shared memory.
default_raw="--yield"; [[ $tls == *tcp* ]] && default_raw="--peer-errors --yield"
RAW_ARGS=${RAW_ARGS-$default_raw}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}

die() { echo "coll-baseline: $*" >&2; exit 1; }
[[ -x $PACT_PERF ]] || die "no pact-perf at $PACT_PERF (set BUILD or PACT_PERF)"
[[ -x $UCP_BW ]] || die "no pact-ucp-bw at $UCP_BW (set BUILD or UCP_BW)"
[[ -r $PLUGIN ]] || die "no plugin at $PLUGIN (set BUILD or PLUGIN)"
command -v ucx_perftest >/dev/null || die "ucx_perftest not found"

perf_workdir

echo "lat_8 -t tag_lat -s 8 -n 20000 -w 2000" > "$out/batch-lat.txt"
for (( round = 1; round <= ROUNDS; round++ )); do
  # Alternate which side goes first.
  order=(raw pact); (( round % 2 == 0 )) && order=(pact raw)
  for side in "${order[@]}"; do
    if [[ $side == raw ]]; then
      pids=()
      for (( p = 0; p < RANKS; p++ )); do
        # shellcheck disable=SC2086  # RAW_ARGS: extra words on purpose
        timeout "$STEP_TIMEOUT" "$UCP_BW" --min-size "$MIN_SIZE" --max-size "$MAX_SIZE" --factor "$FACTOR" \
          --budget "$BUDGET" $RAW_ARGS --json "$out/raw-$round-$p.json" > "$out/raw-$round-$p.log" 2>&1 &
        pids+=($!)
      done
      for pid in "${pids[@]}"; do wait "$pid" || die "pact-ucp-bw failed (see $out/raw-$round-*.log)"; done
      ucx_perftest_pair "$out/batch-lat.txt" "$out/ucx-server.log" "$out/lat-$round.txt" "$STEP_TIMEOUT"
    else
      for op in $OPS; do
        timeout "$STEP_TIMEOUT" "$PACT_PERF" coll --plugin "$PLUGIN" -np "$RANKS" --op "$op" -b "$MIN_SIZE" -e "$MAX_SIZE" -f "$FACTOR" \
          -n "$ITERS" -w 1 --json "$out/pact-$round-$op.json" > "$out/pact-$round-$op.log" 2>&1 ||
          die "pact-perf coll $op failed (see $out/pact-$round-$op.log)"
      done
      timeout "$STEP_TIMEOUT" "$PACT_PERF" coll --plugin "$PLUGIN" -np "$RANKS" --op allreduce -b 8 -e 8 -n 200 -w 20 \
        --json "$out/pact-$round-lat.json" > "$out/pact-$round-lat.log" 2>&1 ||
        die "pact-perf coll 8 B allreduce failed (see $out/pact-$round-lat.log)"
    fi
  done
  echo "round $round done" >&2
done

python3 - "$out" "$ROUNDS" "$RANKS" "$tls" "$OPS" "$MIN_SIZE" <<'EOF_PY'
import glob, json, os, statistics, sys
out, rounds, n, tls, ops, min_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5].split(), sys.argv[6]
unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
lo = int(min_size[:-1]) * unit[min_size[-1].upper()] if min_size[-1].upper() in unit else int(min_size)
med = statistics.median
raw = {}  # size -> [per round: mean per-pair GB/s]
lat = []
for r in range(1, rounds + 1):
    per = {}
    for f in glob.glob(os.path.join(out, "raw-%d-*.json" % r)):
        for row in json.load(open(f))["results"]:
            per.setdefault(row["size"], []).append(row["bw_gbps"])
    for s, v in per.items():
        raw.setdefault(s, []).append(sum(v) / len(v))
    for line in open(os.path.join(out, "lat-%d.txt" % r)):  # -f -v: "lat_8,iterations,P50,..."
        f = line.strip().split(",")
        if f[0] == "lat_8" and len(f) > 2:
            lat.append(float(f[2]))
hop = med(lat)
print("# pact-perf coll on %d ranks against raw UCP on the same transport (UCX_TLS=%s), %d round(s), medians" % (n, tls, rounds))
print("# raw: %d pact-ucp-bw pairs at once (mean per pair); one-hop tag_lat P50 at 8 B: %.2f us" % (n, hop))
print("%-10s %10s %12s %12s %8s" % ("op", "size", "pact_busbw", "raw_link", "ratio"))
verdicts = []
for op in ops:
    bus, t8 = {}, []
    for r in range(1, rounds + 1):
        for row in json.load(open(os.path.join(out, "pact-%d-%s.json" % (r, op))))["results"]:
            bus.setdefault(row["size"], []).append(row["out_of_place"]["busbw_gbps"])
        if op == "allreduce":
            t8 += [row["out_of_place"]["time_us"] for row in json.load(open(os.path.join(out, "pact-%d-lat.json" % r)))["results"]]
    ratios = []
    for s in sorted(bus):
        if s < lo or s not in raw:
            continue
        p, b = med(bus[s]), med(raw[s])
        ratios.append(p / b)
        print("%-10s %10d %12.3f %12.3f %8.2f" % (op, s, p, b, p / b))
    if ratios:
        verdicts.append("%s busbw from %s: %.2f-%.2fx raw (target >= 0.9): %s" % (
            op, min_size, min(ratios), max(ratios), "met" if min(ratios) >= 0.9 else "NOT met"))
    if op == "allreduce" and t8:
        floor = 2 * (n - 1) * hop
        verdicts.append("allreduce 8 B: %.1f us against the ring's floor %d x %.2f = %.1f us: %.2fx (target <= 1.25): %s" % (
            med(t8), 2 * (n - 1), hop, floor, med(t8) / floor, "met" if med(t8) <= 1.25 * floor else "NOT met"))
for v in verdicts:
    print("# " + v)
EOF_PY
