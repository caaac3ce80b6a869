#!/usr/bin/env bash
# ci/device-perf.sh: the benchmarks whose targets a 2-core machine cannot judge, run on a lent
# machine with more cores (the GPU machine: 16 cores) from the carried .gpu-bundle/ (made by
# ci/gpu-bundle.sh from a build with perf/; it holds pact-perf, pact-ucp-bw, the UCX's ucx_perftest
# and every library they need). Run from the repository root, after or instead of ci/gpu-check.sh:
#   1. facts: cores, memory, CPU model, the bundle's commit and UCX;
#   2. perf/coll-baseline.sh over tcp and over shared memory: 8 ranks of pact-perf coll
#      (allreduce, alltoall) against 8 raw pact-ucp-bw pairs and the ring's latency floor (the
#      collectives issue's targets: busbw >= 0.9x raw from 1 MiB, 8 B allreduce <= 1.25x floor);
#   3. pact-perf mix: the KV class's P99 under a checkpoint stream, isolated and shared, against
#      KV alone (target: isolated <= 1.5x alone);
#   4. perf/compare-ucx.sh over tcp and sm: the plugin against raw UCP in NCCL's slot pattern,
#      64 KiB .. 64 MiB, and the 8 B latency and message rate (the bandwidth issue's targets).
# Every step runs under `timeout` and only while the time budget lasts (BUDGET_S, default 330 s:
# with the GPU check's 1-3 minutes it fits one 10-minute device call); a step that does not fit is
# reported as skipped. Results, logs and summary.txt (each step's verdict lines) land in $OUT
# (default /tmp/device-perf). QUICK=1: 4 ranks, small sizes, one round (a check of this script
# on any machine; its figures mean nothing). Exit: 0 when every step that ran finished (the
# verdicts themselves are read from summary.txt), 1 when one failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-/tmp/device-perf}
bundle=${PACT_GPU_BUNDLE:-.gpu-bundle}
BUDGET_S=${BUDGET_S:-330}
QUICK=${QUICK:-0}
mkdir -p "$OUT" || { echo "device-perf: cannot create OUT=$OUT" >&2; exit 1; }
summary=$OUT/summary.txt
: > "$summary"
exec > >(tee "$OUT/device-perf.log") 2>&1

start=$SECONDS
failed=0
say() { echo "$*" | tee -a "$summary"; }

[ -x "$bundle/bin/pact-perf" ] && [ -x "$bundle/bin/pact-ucp-bw" ] && [ -x "$bundle/bin/ucx_perftest" ] || {
  say "DEVICE-PERF FAIL: $bundle/bin lacks pact-perf, pact-ucp-bw or ucx_perftest: run ci/gpu-bundle.sh on a build with perf/"
  exit 1
}
lib=$(cd "$bundle/lib" && pwd -P)
bin=$(cd "$bundle/bin" && pwd -P)
export LD_LIBRARY_PATH=$lib UCX_MODULE_DIR=$lib/ucx PATH=$bin:$PATH
export PACT_PERF=$bin/pact-perf UCP_BW=$bin/pact-ucp-bw PLUGIN=$lib/libnccl-net-pact.so
export UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo
# The target's C++ runtime may be older than the build machine's: then the bundle's copy.
if ! "$PACT_PERF" --help > /dev/null 2>&1; then
  export LD_LIBRARY_PATH=$lib:$lib/compat
  "$PACT_PERF" --help > /dev/null 2>&1 || { say "DEVICE-PERF FAIL: pact-perf does not start: $("$PACT_PERF" --help 2>&1 | head -2)"; exit 1; }
  echo "using the bundle's libstdc++ (lib/compat)"
fi
# The raw UCP side gets the tcp segment sizes the plugin sets on its own contexts, as pact-info
# shows them for DEFAULT (pact keeps a user's value, so its side is unchanged): on UCX 1.2x,
# UCX's defaults leave raw tcp 2-3x below either (docs/performance.md, "UCX 1.22").
# RAW_TCP_SETTINGS=0: UCX's own.
if [ "${RAW_TCP_SETTINGS:-1}" = 1 ]; then
  service=$("$bin/pact-info" --no-probe 2>/dev/null | awk '/^  DEFAULT / { f = 1 } f && $1 == "service" { print; exit }')
  for var in UCX_TCP_TX_SEG_SIZE UCX_TCP_RX_SEG_SIZE; do
    value=$(grep -o "$var=[^ ,]*" <<< "$service" | cut -d= -f2)
    [ -n "$value" ] && export "$var=$value"
  done
fi

if [ "$QUICK" = 1 ]; then
  ranks=4 rounds=1 coll_max=4M mix_s=1 cmp_rounds=1 cmp_max=1M
else
  ranks=8 rounds=1 coll_max=64M mix_s=3 cmp_rounds=3 cmp_max=64M
fi

echo "== machine =="
echo "pact device perf: $(date -u +%Y-%m-%dT%H:%M:%SZ), OUT=$OUT, budget ${BUDGET_S} s, quick=$QUICK"
say "tcp segments for both sides: ${UCX_TCP_TX_SEG_SIZE:-UCX default} send, ${UCX_TCP_RX_SEG_SIZE:-UCX default} receive"
say "cores: $(nproc), memory: $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), cpu: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
[ -f "$bundle/MANIFEST" ] && sed -n 's/^\(commit\|ucx\): */bundle \1: /p' "$bundle/MANIFEST" | tee -a "$summary"

# step NAME SECONDS CMD...: runs CMD under timeout when SECONDS still fit the budget; its lines
# that start with "# " or "target" (the scripts' verdicts) go to the summary.
step() {
  local name=$1 limit=$2 left rc
  shift 2
  left=$((BUDGET_S - (SECONDS - start)))
  echo
  echo "== $name =="
  if [ "$left" -lt "$limit" ]; then
    say "$name: skipped (needs up to $limit s, $left s of the budget left)"
    return 0
  fi
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  rc=$?
  cat "$OUT/$name.txt"
  grep -E '^(# |target|8-byte|\| )' "$OUT/$name.txt" | grep -v '^# round' | sed "s/^/$name: /" >> "$summary"
  if [ "$rc" -ne 0 ]; then
    say "$name: FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ", over $limit s"))"
    failed=1
  fi
}

for tls in tcp sm; do
  step "coll-$tls" 90 env OUT="$OUT/coll-$tls" RANKS=$ranks ROUNDS=$rounds MIN_SIZE=1M MAX_SIZE=$coll_max \
    FACTOR=4 ITERS=5 BUDGET=64M STEP_TIMEOUT=80 perf/coll-baseline.sh "$tls"
done

step mix 40 env UCX_TLS=tcp "$PACT_PERF" mix --seconds "$mix_s" --json "$OUT/mix.json"

# compare NAME LIMIT TLS MIN MAX LAT_MAX
compare() {
  step "$1" "$2" env OUT="$OUT/$1" ROUNDS=$cmp_rounds MIN_SIZE="$4" MAX_SIZE="$5" FACTOR=4 LAT_MAX_SIZE="$6" \
    BUDGET=128M STEP_TIMEOUT=60 perf/compare-ucx.sh "$3"
}
compare compare-tcp 60 tcp 64K "$cmp_max" 0
compare compare-sm 60 sm,self 64K "$cmp_max" 0
compare compare-tcp-8B 30 tcp 8 8 8

echo
echo "== summary ($((SECONDS - start)) s) =="
cat "$summary"
if [ "$failed" -ne 0 ]; then
  echo "DEVICE-PERF FAIL: a step failed (see above)"
  exit 1
fi
echo "DEVICE-PERF DONE"
