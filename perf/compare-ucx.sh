#!/usr/bin/env bash
# Side-by-side: `pact-perf p2p` (an NCCL net plugin driven through pact::loader) against raw
# `ucx_perftest` (UCP tag_bw / tag_lat) on the same transport, loopback, same message sizes.
# Runs are interleaved (A,B then B,A ...) and repeated; each cell is the median over rounds.
#
# usage: perf/compare-ucx.sh [TLS]          TLS defaults to $UCX_TLS, then tcp (e.g. tcp, sm, shm)
# environment (all optional):
#   BUILD=build        build directory holding perf/pact-perf and plugin/libnccl-net-pact.so
#   PACT_PERF=...      pact-perf binary (default $BUILD/perf/pact-perf)
#   PLUGIN=...         net plugin .so (default $BUILD/plugin/libnccl-net-pact.so)
#   ROUNDS=3  MIN_SIZE=8  MAX_SIZE=64M  FACTOR=2  WINDOW=16  BUDGET=256M  MAX_ITERS=20000
#   BW_MIN_SIZE=$MIN_SIZE  smallest size of the bandwidth sweep (the latency sweep starts at MIN_SIZE)
#   OUT=dir            keep raw results there (default: a temporary directory, removed at exit)
#   STEP_TIMEOUT=900   seconds allowed for one pact-perf or ucx_perftest run
# Bandwidth: GB/s = 1e9 bytes/s (ucx_perftest prints MB/s meaning MiB/s; converted here).
# Latency: one-way microseconds; pact P50 of RTT/2 vs ucx_perftest's 50th-percentile latency.
set -euo pipefail

tls=${1:-${UCX_TLS:-tcp}}
export UCX_TLS=$tls
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
export PACT_NET_DEVICES=${PACT_NET_DEVICES:-lo}
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$here/build}
PACT_PERF=${PACT_PERF:-$BUILD/perf/pact-perf}
PLUGIN=${PLUGIN:-$BUILD/plugin/libnccl-net-pact.so}
ROUNDS=${ROUNDS:-3}
MIN_SIZE=${MIN_SIZE:-8}
MAX_SIZE=${MAX_SIZE:-64M}
FACTOR=${FACTOR:-2}
WINDOW=${WINDOW:-16}
BUDGET=${BUDGET:-256M}
MAX_ITERS=${MAX_ITERS:-20000}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}

die() { echo "compare-ucx: $*" >&2; exit 1; }
[[ -x $PACT_PERF ]] || die "no pact-perf at $PACT_PERF (set BUILD or PACT_PERF)"
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
bw_min=$(bytes "${BW_MIN_SIZE:-$MIN_SIZE}")

if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT"; out=$OUT; else out=$(mktemp -d); fi
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  [[ -n ${OUT:-} ]] || rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The same iteration counts pact-perf uses (see perf/p2p_bench.cpp: bwIters, latIters).
batch=$out/ucx-batch.txt
: > "$batch"
for (( s = min; s <= max; s *= FACTOR )); do
  n=$(( budget / s )); (( n < 5 )) && n=5; (( n > MAX_ITERS )) && n=$MAX_ITERS
  w=$(( n / 10 )); (( w < 1 )) && w=1; (( w > 1000 )) && w=1000
  ln=1000; (( s > 65536 )) && ln=$(( 1000 * 65536 / s )); (( ln < 50 )) && ln=50
  lw=$(( ln / 10 )); (( lw < 5 )) && lw=5
  if (( s >= bw_min )); then echo "bw_$s -t tag_bw -s $s -n $n -w $w" >> "$batch"; fi
  echo "lat_$s -t tag_lat -s $s -n $ln -w $lw" >> "$batch"
done

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

run_ucx() {  # $1 = result csv
  local port tries=0
  port=$(free_port)
  ucx_perftest -p "$port" -b "$batch" > "$out/ucx-server.log" 2>&1 &
  server_pid=$!
  # Wait for the server's listening socket without connecting to it (it serves one client).
  until ss -ltn "sport = :$port" | grep -q LISTEN; do
    (( ++tries > 100 )) && die "ucx_perftest server did not start (see $out/ucx-server.log)"
    kill -0 "$server_pid" 2>/dev/null || die "ucx_perftest server exited: $(tail -3 "$out/ucx-server.log")"
    sleep 0.1
  done
  timeout "$STEP_TIMEOUT" ucx_perftest 127.0.0.1 -p "$port" -b "$batch" -f -v > "$1" 2> "$1.err" ||
    die "ucx_perftest client failed: $(tail -3 "$1.err")"
  wait "$server_pid" || true
  server_pid=
}

run_pact() {  # $1 = result json
  timeout "$STEP_TIMEOUT" "$PACT_PERF" p2p --plugin "$PLUGIN" --window "$WINDOW" \
    --min-size "$bw_min" --max-size "$max" --factor "$FACTOR" --budget "$budget" --max-iters "$MAX_ITERS" \
    --lat-min-size "$min" --lat-max-size "$max" --lat-factor "$FACTOR" \
    --json "$1" > "$1.log" 2>&1 || die "pact-perf failed: $(tail -5 "$1.log")"
}

echo "# UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES PACT_NET_DEVICES=$PACT_NET_DEVICES rounds=$ROUNDS window=$WINDOW"
echo "# plugin $PLUGIN"
for (( r = 1; r <= ROUNDS; r++ )); do
  if (( r % 2 )); then
    echo "# round $r: pact"; run_pact "$out/pact-$r.json"
    echo "# round $r: ucx";  run_ucx "$out/ucx-$r.csv"
  else
    echo "# round $r: ucx";  run_ucx "$out/ucx-$r.csv"
    echo "# round $r: pact"; run_pact "$out/pact-$r.json"
  fi
done

python3 - "$out" "$ROUNDS" <<'EOF'
import csv, json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
pact_bw, pact_lat, ucx_bw, ucx_lat = {}, {}, {}, {}
for r in range(1, rounds + 1):
    for row in json.load(open(f"{out}/pact-{r}.json"))["results"]:
        if row["bw_gbps"] is not None: pact_bw.setdefault(row["size"], []).append(row["bw_gbps"])
        if row["lat_p50_us"] is not None: pact_lat.setdefault(row["size"], []).append(row["lat_p50_us"])
    with open(f"{out}/ucx-{r}.csv") as f:
        for row in csv.reader(f):
            if not row or "_" not in row[0] or row[0].endswith(".txt"): continue
            kind, size = row[0].split("_", 1)
            size = int(size)
            if kind == "bw":   # overall_bw, MiB/s
                ucx_bw.setdefault(size, []).append(float(row[6]) * 1048576 / 1e9)
            elif kind == "lat":  # 50th-percentile one-way latency, us
                ucx_lat.setdefault(size, []).append(float(row[2]))
def med(d, k): return statistics.median(d[k]) if d.get(k) else float("nan")
def fmt(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0: return f"{size >> shift}{unit}"
    return str(size)
sizes = sorted(set(pact_bw) | set(pact_lat) | set(ucx_bw) | set(ucx_lat))
print(f"| size | pact GB/s | ucx GB/s | bw ratio | pact P50 lat us | ucx lat us | lat ratio |")
print(f"|---:|---:|---:|---:|---:|---:|---:|")
bw_ok, lat_ok = True, True
for s in sizes:
    pb, ub, pl, ul = med(pact_bw, s), med(ucx_bw, s), med(pact_lat, s), med(ucx_lat, s)
    br, lr = pb / ub if ub else float("nan"), pl / ul if ul else float("nan")
    if s >= 1 << 20 and not br >= 0.9: bw_ok = False
    if s <= 4096 and not lr <= 1.25: lat_ok = False
    print(f"| {fmt(s)} | {pb:.3f} | {ub:.3f} | {br:.2f} | {pl:.2f} | {ul:.2f} | {lr:.2f} |")
print()
print(f"target bandwidth >= 0.9x raw UCX for sizes >= 1M: {'met' if bw_ok else 'NOT met'}")
print(f"target latency <= 1.25x raw UCX for sizes 8..4K: {'met' if lat_ok else 'NOT met'}")
EOF
