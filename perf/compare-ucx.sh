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
#   BUFFERS=1          pact-perf --buffers (1 = one buffer per side, as ucx_perftest uses)
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
# ucx_perftest sends every message from one buffer and receives into one buffer, so its data
# stays in cache; pact-perf does the same by default here (BUFFERS=0: one buffer per message in
# flight, which on this VM makes large-message bandwidth DRAM-bound for both tools).
BUFFERS=${BUFFERS:-1}
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
rm -f "$out"/pact-* "$out"/ucx-* "$out"/batch-*
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  [[ -n ${OUT:-} ]] || rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One ucx_perftest batch file per size, with the iteration counts pact-perf uses for that size
# (see perf/p2p_bench.cpp: bwIters, latIters).
sizes=()
for (( s = min; s <= max; s *= FACTOR )); do
  sizes+=("$s")
  n=$(( budget / s )); (( n < 5 )) && n=5; (( n > MAX_ITERS )) && n=$MAX_ITERS
  w=$(( n / 10 )); (( w < 1 )) && w=1; (( w > 1000 )) && w=1000
  ln=1000; (( s > 65536 )) && ln=$(( 1000 * 65536 / s )); (( ln < 50 )) && ln=50
  lw=$(( ln / 10 )); (( lw < 5 )) && lw=5
  : > "$out/batch-$s.txt"
  if (( s >= bw_min )); then echo "bw_$s -t tag_bw -s $s -n $n -w $w" >> "$out/batch-$s.txt"; fi
  echo "lat_$s -t tag_lat -s $s -n $ln -w $lw" >> "$out/batch-$s.txt"
done

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

run_ucx() {  # $1 = size, $2 = result csv
  local port tries=0 batch=$out/batch-$1.txt
  port=$(free_port)
  ucx_perftest -p "$port" -b "$batch" > "$out/ucx-server.log" 2>&1 &
  server_pid=$!
  # Wait for the server's listening socket without connecting to it (it serves one client).
  until ss -ltn "sport = :$port" | grep -q LISTEN; do
    (( ++tries > 100 )) && die "ucx_perftest server did not start (see $out/ucx-server.log)"
    kill -0 "$server_pid" 2>/dev/null || die "ucx_perftest server exited: $(tail -3 "$out/ucx-server.log")"
    sleep 0.1
  done
  timeout "$STEP_TIMEOUT" ucx_perftest 127.0.0.1 -p "$port" -b "$batch" -f -v > "$2" 2> "$2.err" ||
    die "ucx_perftest client failed: $(tail -3 "$2.err")"
  wait "$server_pid" || true
  server_pid=
}

run_pact() {  # $1 = size, $2 = result json
  local bw=(--no-bw)
  if (( $1 >= bw_min )); then
    bw=(--min-size "$1" --max-size "$1" --budget "$budget" --max-iters "$MAX_ITERS")
  fi
  timeout "$STEP_TIMEOUT" "$PACT_PERF" p2p --plugin "$PLUGIN" --window "$WINDOW" \
    --buffers "$BUFFERS" "${bw[@]}" \
    --lat-min-size "$1" --lat-max-size "$1" --json "$2" > "$2.log" 2>&1 ||
    die "pact-perf failed at size $1: $(tail -5 "$2.log")"
}

# Interleave at the finest useful grain: per size, A then B or B then A (alternating), so a burst
# of load from other processes hits both sides of a pair about equally.
echo "# UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES PACT_NET_DEVICES=$PACT_NET_DEVICES rounds=$ROUNDS window=$WINDOW"
echo "# plugin $PLUGIN"
for (( r = 1; r <= ROUNDS; r++ )); do
  echo "# round $r/$ROUNDS"
  i=0
  for s in "${sizes[@]}"; do
    if (( (r + i) % 2 )); then
      run_pact "$s" "$out/pact-$r-$s.json"; run_ucx "$s" "$out/ucx-$r-$s.csv"
    else
      run_ucx "$s" "$out/ucx-$r-$s.csv"; run_pact "$s" "$out/pact-$r-$s.json"
    fi
    i=$(( i + 1 ))
  done
done

python3 - "$out" <<'EOF'
# Noise on a shared machine is strongly correlated in time, so the ratio column is the median of
# per-pair ratios (pact and ucx run back to back for the same size and round); the absolute
# columns are plain medians over rounds.
import csv, glob, json, os, re, statistics, sys
out = sys.argv[1]
pact, ucx = {}, {}  # (kind, size) -> {round: value}
for path in glob.glob(f"{out}/pact-*-*.json"):
    rnd = int(re.match(r"pact-(\d+)-", os.path.basename(path)).group(1))
    for row in json.load(open(path))["results"]:
        if row["bw_gbps"] is not None: pact.setdefault(("bw", row["size"]), {})[rnd] = row["bw_gbps"]
        if row["lat_p50_us"] is not None: pact.setdefault(("lat", row["size"]), {})[rnd] = row["lat_p50_us"]
for path in glob.glob(f"{out}/ucx-*-*.csv"):
    rnd = int(re.match(r"ucx-(\d+)-", os.path.basename(path)).group(1))
    with open(path) as f:
        for row in csv.reader(f):
            m = re.fullmatch(r"(bw|lat)_(\d+)", row[0].strip()) if row else None
            if not m: continue
            kind, size = m.group(1), int(m.group(2))
            # bw: overall_bw in MiB/s -> GB/s; lat: 50th-percentile one-way latency in us
            value = float(row[6]) * 1048576 / 1e9 if kind == "bw" else float(row[2])
            ucx.setdefault((kind, size), {})[rnd] = value
def med(d, key):
    v = list(d.get(key, {}).values())
    return statistics.median(v) if v else float("nan")
def ratio(key):
    a, b = pact.get(key, {}), ucx.get(key, {})
    r = [a[k] / b[k] for k in a if k in b and b[k] > 0]
    return statistics.median(r) if r else float("nan")
def fmt(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0: return f"{size >> shift}{unit}"
    return str(size)
sizes = sorted({s for _, s in list(pact) + list(ucx)})
print("| size | pact GB/s | ucx GB/s | bw ratio | pact P50 lat us | ucx lat us | lat ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|")
bw_ratios, lat_ratios = [], []
for s in sizes:
    br, lr = ratio(("bw", s)), ratio(("lat", s))
    if s >= 1 << 20 and ("bw", s) in pact: bw_ratios.append(br)
    if s <= 4096 and ("lat", s) in pact: lat_ratios.append(lr)
    print(f"| {fmt(s)} | {med(pact, ('bw', s)):.3f} | {med(ucx, ('bw', s)):.3f} | {br:.2f} | "
          f"{med(pact, ('lat', s)):.2f} | {med(ucx, ('lat', s)):.2f} | {lr:.2f} |")
def verdict(ratios, ok):
    if not ratios: return "n/a (no such sizes measured)"
    bad = [r for r in ratios if not ok(r)]
    return "met" if not bad else f"NOT met ({len(bad)} of {len(ratios)} sizes miss)"
print()
print("ratios are medians of per-pair ratios (pact / ucx, same size and round)")
print("target bandwidth >= 0.9x raw UCX for sizes >= 1M:", verdict(bw_ratios, lambda r: r >= 0.9))
print("target latency <= 1.25x raw UCX for sizes <= 4K:", verdict(lat_ratios, lambda r: r <= 1.25))
EOF
