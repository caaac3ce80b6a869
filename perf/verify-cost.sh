#!/usr/bin/env bash
# perf/verify-cost.sh: what a class's `verify` costs on NCCL comms: plugin bandwidth with
# verify=crc32c and verify=xxh3 against verify=none, 64 KiB to 64 MiB, over tcp and shared memory,
# interleaved (each round runs the three in a rotated order) and repeated.
#
# Usage: perf/verify-cost.sh [--rounds N] [--json FILE]
#   Every run: PACT_TC_DEFAULT="verify=V" pact-perf p2p --no-lat --window 8 --buffers 0
#   --min-size 64K --max-size 64M --factor 4 --budget $BUDGET (NCCL's slot pattern: 8 in flight,
#   each in its own registered buffer, GB/s counted at the receiver), UCX_TLS=tcp then sm,
#   UCX_NET_DEVICES=PACT_NET_DEVICES=lo.
# Printed: per transport and size the median GB/s over rounds of each check and the ratio
# crc32c/none and xxh3/none (the median of the per-round ratios). --json FILE keeps the table.
# Environment: BUILD [build], ROUNDS [3], BUDGET [256M], RUN_TIMEOUT [180 s per run].
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$here/$BUILD
rounds=${ROUNDS:-3} json='' budget=${BUDGET:-256M} run_timeout=${RUN_TIMEOUT:-180}
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=${2:?--rounds needs N}; shift 2 ;;
    --json) json=${2:?--json needs FILE}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "verify-cost.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "verify-cost.sh: --rounds must be a positive integer" >&2; exit 2; }
perf=$BUILD/perf/pact-perf
[[ -x $perf ]] || { echo "verify-cost.sh: $perf not built" >&2; exit 2; }
work=$(mktemp -d /tmp/pact-verify-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
export UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo
checks=(none crc32c xxh3)
echo "# verify-cost: $rounds round(s), budget $budget per size; load $(cut -d' ' -f1-3 /proc/loadavg)"
for tls in tcp sm; do
  for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < 3; k++)); do
      v=${checks[$(((k + r) % 3))]}
      out=$work/$tls-$v-r$r.json
      if ! UCX_TLS=$tls PACT_TC_DEFAULT="verify=$v" timeout "$run_timeout" "$perf" p2p --no-lat --window 8 \
          --buffers 0 --min-size 64K --max-size 64M --factor 4 --budget "$budget" --json "$out" \
          > "$work/$tls-$v-r$r.log" 2>&1; then
        echo "verify-cost.sh: run $tls verify=$v round $r failed:" >&2
        tail -5 "$work/$tls-$v-r$r.log" >&2
        exit 1
      fi
      echo "  $tls round $((r + 1)) verify=$v done"
    done
  done
done
python3 - "$work" "$rounds" "$json" <<'EOF'
import json, statistics, sys
work, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(tls, v, r):
    return {row["size"]: row["bw_gbps"] for row in json.load(open(f"{work}/{tls}-{v}-r{r}.json"))["results"]}
def label(n):
    for unit, s in ((1 << 20, "M"), (1 << 10, "K")):
        if n % unit == 0: return f"{n // unit}{s}"
    return str(n)
table = []
for tls in ("tcp", "sm"):
    runs = {v: [load(tls, v, r) for r in range(rounds)] for v in ("none", "crc32c", "xxh3")}
    print(f"\n{tls}: GB/s, median of {rounds}; ratio = median of the per-round ratios to none")
    print(f"{'size':>6} {'none':>8} {'crc32c':>8} {'xxh3':>8} {'crc/none':>9} {'xxh3/none':>10}")
    for size in sorted(runs["none"][0]):
        med = {v: statistics.median(run[size] for run in runs[v]) for v in runs}
        ratio = {v: statistics.median(runs[v][r][size] / runs["none"][r][size] for r in range(rounds))
                 for v in ("crc32c", "xxh3")}
        print(f"{label(size):>6} {med['none']:8.3f} {med['crc32c']:8.3f} {med['xxh3']:8.3f} "
              f"{ratio['crc32c']:9.2f} {ratio['xxh3']:10.2f}")
        table.append({"tls": tls, "size": size, **{f"{v}_gbps": med[v] for v in med},
                      "crc32c_ratio": ratio["crc32c"], "xxh3_ratio": ratio["xxh3"]})
if out:
    json.dump({"rounds": rounds, "rows": table}, open(out, "w"), indent=1)
EOF
