#!/usr/bin/env bash
# perf/netns-engine-rails.sh: the multi-rail benchmark of the transfer ENGINE's traffic classes
# over the veth rails that ci/netns.sh builds (namespaces pactA / pactB, pairs pa<i>/pb<i>, tbf
# rate limits); the engine counterpart of perf/netns-rails.sh (which measures the NCCL plugin).
#
# Usage: perf/netns-engine-rails.sh [--keep DIR]
#
# Each run is pact-engine-rails (perf/engine_rails.cpp): the receiver in pactA listening on
# 10.77.0.1, the sender in pactB; a warmup transfer, then $COUNT transfers of $SIZE bytes in class
# KV ($WINDOW in flight, 0 = all at once; the receiver expects all at once). Goodput = data bytes
# committed / (last commit - warmup commit), at the receiver. UCX_TLS=tcp everywhere.
#   equal rails (ci/netns.sh up --pairs 2 --rate $RATE):
#     a  one   PACT_TC_KV=ordered; PACT_NET_DEVICES=UCX_NET_DEVICES=pa0 / pb0
#     b  two   PACT_TC_KV=unordered,lanes=2,chunk=$CHUNK,steer=adaptive; PACT_NET_DEVICES=
#              pa0,pa1 / pb0,pb1 (the engine fuses them: one rail each, lane i on rail i%2;
#              UCX_NET_DEVICES unset, each rail pins its own UCX context)
#   pair 0 slowed (ci/netns.sh up --pairs 2 --rate $RATE --slow-rate $SLOW_RATE):
#     c  adaptive    as b
#     d  roundrobin  as b with steer=roundrobin
# Each round builds the equal rails and runs a and b, then the slowed rails and runs c and d; the
# order inside each pair alternates between rounds. Printed: every run's goodput and the share of
# the data bytes that arrived on pa0 (rx_bytes growth of pa0 / (pa0 + pa1) in pactA, headers
# included), then per case the median over rounds, and the paired ratios b/a and c/d (median over
# rounds of the ratio within a round) against the targets (b/a >= 1.8, c/d >= 1.3).
#
# Environment (defaults in brackets): BUILD [build] (pact-engine-rails at
# $BUILD/perf/pact-engine-rails), RATE [1gbit], SLOW_RATE [RATE/4], ROUNDS [3], CHUNK [256K],
# COUNT [64], SIZE [4M], WINDOW [0 = all at once], RUN_TIMEOUT [120 s per run and side],
# DEADLINE [1200 s for the whole script: no new round starts after it], LOCK_WAIT [300 s],
# PORT [17000, the first listen port; every run takes the next].
# --keep DIR: keeps every run's output (DIR/<case>-r<round>.{rx,tx}.log) and DIR/summary.txt.
#
# Needs root and network namespaces; exits 77 with the reason when `ci/netns.sh check` says they
# are unavailable. Takes the netns suite's lock (/run/lock/pact-netns.lock) around each
# up .. down, so it never tears down a concurrent `meson test --suite netns`. The namespaces are
# always removed on exit (trap). Exit status: 0 when every run succeeded (targets missed do not
# change it), 1 when a run or a namespace step failed, 2 on bad usage, 77 when unavailable.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NETNS_SCRIPT=netns-engine-rails.sh
# shellcheck source=perf/netns-rails-lib.sh
source "$here/perf/netns-rails-lib.sh"  # NETNS, BUILD, LOCK, LOCK_WAIT, die and the rest
BIN=$BUILD/perf/pact-engine-rails
RATE=${RATE:-1gbit}
ROUNDS=${ROUNDS:-3}
CHUNK=${CHUNK:-256K}
COUNT=${COUNT:-64}
SIZE=${SIZE:-4M}
WINDOW=${WINDOW:-0}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
DEADLINE=${DEADLINE:-1200}
PORT=${PORT:-17000}
KEEP=""

netns_args --keep KEEP "$@"

[[ -n ${SLOW_RATE:-} ]] || SLOW_RATE=$(quarter_rate "$RATE") || exit 2  # RATE/4 by default
need_positive ROUNDS COUNT RUN_TIMEOUT PORT
[[ $WINDOW =~ ^[0-9]+$ ]] || die "WINDOW must be a non-negative integer, got '$WINDOW'" 2
((RUN_TIMEOUT > 15)) || die "RUN_TIMEOUT must be more than 15 s" 2
need_built "$BIN"

netns_check
# $rx_pid, $tx_pid: the receiver and the sender in flight. Kept: each run's output, the summary.
netns_work "$KEEP" "rx_pid tx_pid" '*.log' summary.txt

clean_env

failed=0
port=$PORT
app_timeout_ms=$(((RUN_TIMEOUT - 10) * 1000))  # inside the `timeout` of each side
# run_pair ROUND CASE1 PROFILE1 RAILS1 CASE2 PROFILE2 RAILS2: both cases, in an order that
# alternates with the round.
run_pair() {
  local r=$1
  if ((r % 2)); then
    run_case "$2" "$r" "$3" "$4"; run_case "$5" "$r" "$6" "$7"
  else
    run_case "$5" "$r" "$6" "$7"; run_case "$2" "$r" "$3" "$4"
  fi
}

# run_case CASE ROUND PROFILE one|two: one receiver + sender pair; RESULT lines to $work/results.
run_case() {
  local name=$1 round=$2 profile=$3 rails=$4
  local env_a=(PACT_NET_DEVICES=pa0 UCX_NET_DEVICES=pa0) env_b=(PACT_NET_DEVICES=pb0 UCX_NET_DEVICES=pb0)
  if [[ $rails == two ]]; then env_a=(PACT_NET_DEVICES=pa0,pa1); env_b=(PACT_NET_DEVICES=pb0,pb1); fi
  local rx_log=$work/$name-r$round.rx.log tx_log=$work/$name-r$round.tx.log
  local t0=$SECONDS rx_rc=0 tx_rc=0
  port=$((port + 1))
  # In the background and waited for, so that a signal to this script is handled at once.
  ip netns exec pactA env -u UCX_NET_DEVICES "${env_a[@]}" "PACT_TC_KV=$profile" \
    timeout -k 10 "$RUN_TIMEOUT" "$BIN" recv --listen "10.77.0.1:$port" --count "$COUNT" \
    --size "$SIZE" --tc KV --links pa0,pa1 --timeout-ms "$app_timeout_ms" >"$rx_log" 2>&1 &
  rx_pid=$!
  ip netns exec pactB env -u UCX_NET_DEVICES "${env_b[@]}" "PACT_TC_KV=$profile" \
    timeout -k 10 "$RUN_TIMEOUT" "$BIN" send --connect "10.77.0.1:$port" --count "$COUNT" \
    --size "$SIZE" --tc KV --window "$WINDOW" --timeout-ms "$app_timeout_ms" >"$tx_log" 2>&1 &
  tx_pid=$!
  wait "$rx_pid" || rx_rc=$?
  rx_pid=""
  # A receiver that failed leaves the sender waiting for verdicts: stop it.
  ((rx_rc == 0)) || kill -TERM "$tx_pid" 2>/dev/null || true
  wait "$tx_pid" || tx_rc=$?
  tx_pid=""
  local rx tx
  rx=$(grep -m1 '^RESULT ' "$rx_log" || true)
  tx=$(grep -m1 '^RESULT ' "$tx_log" || true)
  if ((rx_rc == 0 && tx_rc == 0)) && [[ -n $rx && -n $tx ]]; then
    echo "case=$name round=$round ${rx#RESULT } $(sed 's/^RESULT role=send //; s/\([^ ]*\)/tx_\1/g' <<<"$tx")" \
      >>"$work/results"
    printf '  round %d %s %3d s  %s\n' "$round" "$name" $((SECONDS - t0)) \
      "$(awk '{for (i = 2; i <= NF; ++i) if ($i ~ /^(gbit_s|rx_pa[01])=/) printf "%s ", $i}' <<<"$rx")"
  else
    failed=1
    echo "  round $round $name FAILED (receiver exit $rx_rc, sender exit $tx_rc;" \
         "124 = killed after $RUN_TIMEOUT s); last lines:" >&2
    tail -n 6 "$rx_log" | sed 's/^/    rx: /' >&2
    tail -n 6 "$tx_log" | sed 's/^/    tx: /' >&2
  fi
}

ordered=ordered
two="unordered,lanes=2,chunk=$CHUNK"
echo "# netns-engine-rails: RATE=$RATE SLOW_RATE=$SLOW_RATE (pair 0 in c/d) ROUNDS=$ROUNDS" \
     "CHUNK=$CHUNK COUNT=$COUNT SIZE=$SIZE WINDOW=$WINDOW; $BIN;" \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/results"
start=$SECONDS
rounds_done=0
for ((r = 1; r <= ROUNDS; r++)); do
  if past_deadline; then break; fi
  rails_up --rate "$RATE"
  run_pair "$r" a "$ordered" one b "$two,steer=adaptive" two
  rails_down
  rails_up --rate "$RATE" --slow-rate "$SLOW_RATE"
  run_pair "$r" c "$two,steer=adaptive" two d "$two,steer=roundrobin" two
  rails_down
  rounds_done=$r
done

echo "# all rounds done in $((SECONDS - start)) s; load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/results" "$RATE" "$SLOW_RATE" "$CHUNK" "$COUNT" "$SIZE" "$WINDOW" <<'EOF' |
import statistics, sys

path, rate, slow, chunk, count, size, window = sys.argv[1:8]
cases = {
    "a": f"one rail pa0, ordered, rails {rate}",
    "b": f"two rails pa0+pa1, unordered lanes=2 chunk={chunk} adaptive, rails {rate}",
    "c": f"pa0 {slow} + pa1 {rate}, unordered lanes=2 chunk={chunk} adaptive",
    "d": f"pa0 {slow} + pa1 {rate}, unordered lanes=2 chunk={chunk} roundrobin",
}
runs = {k: {} for k in cases}  # case -> round -> fields
with open(path) as f:
    for line in f:
        kv = dict(t.split("=", 1) for t in line.split())
        runs[kv["case"]][int(kv["round"])] = kv
rounds = sorted({r for v in runs.values() for r in v})

def gb(kv):
    return float(kv["gbit_s"])

def share(kv):
    a, b = int(kv.get("rx_pa0", 0)), int(kv.get("rx_pa1", 0))
    return 100.0 * a / (a + b) if a + b else float("nan")

print(f"\n{count} x {size} per run, window {window or 'all'}; Gbit/s at the receiver "
      f"(pa0 share of rx bytes); sender's view in the last column")
hdr = f"{'case':<4} " + " ".join(f"{'round ' + str(r):>15}" for r in rounds)
print(hdr + f" {'median':>8} {'tx med':>7}  what")
for k, title in cases.items():
    cells = []
    for r in rounds:
        kv = runs[k].get(r)
        cells.append(f"{gb(kv):6.3f} ({share(kv):4.1f}%)" if kv else f"{'-':>15}")
    g = [gb(kv) for kv in runs[k].values()]
    t = [float(kv["tx_gbit_s"]) for kv in runs[k].values()]
    med = f"{statistics.median(g):8.3f}" if g else f"{'-':>8}"
    tmed = f"{statistics.median(t):7.3f}" if t else f"{'-':>7}"
    print(f"{k:<4} " + " ".join(f"{c:>15}" for c in cells) + f" {med} {tmed}  {title}")

print()
for num, den, target in (("b", "a", 1.8), ("c", "d", 1.3)):
    paired = [r for r in rounds if r in runs[num] and r in runs[den]]
    if not paired:
        print(f"{num}/{den}: no paired rounds")
        continue
    rr = [gb(runs[num][r]) / gb(runs[den][r]) for r in paired]
    m = statistics.median(rr)
    verdict = "met" if m >= target else f"MISSED ({m / target:.0%} of the target)"
    print(f"{num}/{den} = {m:.2f} (per round: {' '.join(f'{x:.2f}' for x in rr)}), "
          f"target >= {target}: {verdict}")
EOF
  tee "$work/summary.txt"
((failed == 0)) || die "some runs failed (see above)"
