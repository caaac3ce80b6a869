#!/usr/bin/env bash
# perf/netns-mix.sh: class isolation on the NCCL face where the network, not the CPU, is the
# bottleneck: `pact-perf mix --face nccl` between the two namespaces of ci/netns.sh, joined by one
# veth pair rate-limited with tbf ($RATE, 1gbit: two cores are not the limit there).
#
# Usage: perf/netns-mix.sh [--json DIR]
#
# Topology: ci/netns.sh up --pairs 1 --rate $RATE (pactA: pa0 10.77.0.1, pactB: pb0 10.77.0.2).
# Every run: pact-perf mix --face nccl --netns pactA,pactB (rank 0 sends from pactA, rank 1
# receives in pactB), UCX_TLS=tcp, PACT_NET_DEVICES=UCX_NET_DEVICES=pa0 / pb0; class A (bulk,
# --bulk-tc $BULK_TC): $BULK_BYTES messages, window $BULK_WINDOW; class B (latency, --latency-tc
# $LATENCY_TC): $LATENCY_BYTES messages one at a time; phases alone (B only), bulk (A only) and
# mixed (both), $PHASE_SECONDS s each, fresh comms per phase. Two configurations per round, in an
# order that alternates between rounds:
#   test     PACT_TC_<BULK_TC>=$PACT_TC_A, PACT_TC_<LATENCY_TC>=$PACT_TC_B (under test)
#   control  the same, but class B at class A's priority: $CONTROL_TC_B (by default PACT_TC_B with
#            its priority= replaced by PACT_TC_A's, 0 when it names none)
# Printed: each run's line as it ends, then per configuration the median over rounds of B's
# latency (P50/P99, alone and mixed), A's goodput (bulk and mixed), and the two targets judged on
# the medians: B's P99 mixed / alone <= 1.5 (the median of the per-round ratios) and A's goodput
# in `bulk` / RATE >= 0.9; then test against control, round by round (B's P99 mixed).
#
# Environment (defaults in brackets): BUILD [build] (pact-perf at $BUILD/perf/pact-perf, the
# plugin at $BUILD/plugin/libnccl-net-pact.so unless PLUGIN is set), RATE [1gbit], ROUNDS [3],
# PHASE_SECONDS [15], PACT_TC_A [unordered,chunk=64K,priority=0], PACT_TC_B [priority=1],
# CONTROL_TC_B [see above], BULK_TC [1], LATENCY_TC [2], BULK_BYTES [16M], BULK_WINDOW [8],
# LATENCY_BYTES [256K], RUN_TIMEOUT [240 s per pact-perf run], DEADLINE [900 s for the whole
# script: no new round starts after it], LOCK_WAIT [300 s]. An empty PACT_TC_A or PACT_TC_B leaves
# that class on PACT_TC_DEFAULT's profile. Nothing else of the caller's PACT_* / UCX_* is passed on.
# A default run takes about 6 minutes.
# --json DIR: keeps every run's pact-perf JSON, output and the sender's TCP loss-recovery counters
# (DIR/<test|control>-r<round>.json, .log, .tcp),
# DIR/summary.json, and DIR/netns-mix.svg (pact-plot: the first round's test and control, B's
# percentiles as bars and A's goodput beside them).
#
# Needs root and network namespaces; exits 77 with the reason when `ci/netns.sh check` says they
# are unavailable. Takes the netns suite's lock (/run/lock/pact-netns.lock) from up to down, so it
# never tears down a concurrent `meson test --suite netns`. The namespaces are always removed on
# exit (trap). Exit status: 0 when every run succeeded (targets missed do not change it), 1 when a
# run or a namespace step failed, 2 on bad usage, 77 when unavailable.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NETNS_SCRIPT=netns-mix.sh
# shellcheck source=perf/netns-rails-lib.sh
source "$here/perf/netns-rails-lib.sh"  # NETNS, BUILD, LOCK, LOCK_WAIT, die and the rest
PERF=$BUILD/perf/pact-perf
PLOT=$BUILD/perf/pact-plot
PLUGIN=${PLUGIN:-$BUILD/plugin/libnccl-net-pact.so}
RATE=${RATE:-1gbit}
ROUNDS=${ROUNDS:-3}
PHASE_SECONDS=${PHASE_SECONDS:-15}
TC_A=${PACT_TC_A-unordered,chunk=64K,priority=0}
TC_B=${PACT_TC_B-priority=1}
BULK_TC=${BULK_TC:-1}
LATENCY_TC=${LATENCY_TC:-2}
BULK_BYTES=${BULK_BYTES:-16M}
BULK_WINDOW=${BULK_WINDOW:-8}
LATENCY_BYTES=${LATENCY_BYTES:-256K}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
DEADLINE=${DEADLINE:-900}
JSON_DIR=""

netns_args --json JSON_DIR "$@"

# The value of the last priority= token of a profile (0 when none), and the profile without them.
priority_of() {
  local p=0 t toks
  IFS=',' read -ra toks <<<"$1"
  for t in "${toks[@]}"; do t=${t// /}; [[ $t == priority=* ]] && p=${t#priority=}; done
  echo "$p"
}
without_priority() {
  local out="" t toks
  IFS=',' read -ra toks <<<"$1"
  for t in "${toks[@]}"; do [[ ${t// /} == priority=* ]] || out+=${out:+,}$t; done
  echo "$out"
}
if [[ -z ${CONTROL_TC_B+set} ]]; then
  rest=$(without_priority "$TC_B")
  CONTROL_TC_B="${rest:+$rest,}priority=$(priority_of "$TC_A")"
fi

need_positive ROUNDS
[[ $PHASE_SECONDS =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "PHASE_SECONDS must be a number, got '$PHASE_SECONDS'" 2
need_rate "$RATE"
[[ $BULK_TC =~ ^[0-9]+$ && $LATENCY_TC =~ ^[0-9]+$ && $BULK_TC != "$LATENCY_TC" ]] ||
  die "BULK_TC and LATENCY_TC must be two different classes 0..255 (got $BULK_TC, $LATENCY_TC)" 2
need_built "$PERF" "$PLUGIN"

netns_check
# $child: the pact-perf run in flight. Kept: the JSON files, each run's output, the plot.
netns_work "$JSON_DIR" child '*.json' '*.log' '*.tcp' '*.svg'

clean_env  # UCX_TLS=tcp and nothing else of the caller's PACT_* / UCX_*

failed=0
# The sender's TCP loss recovery during a run (pactA's counters: nstat with a history file of its
# own): spurious tail loss probes (TLP, 10 ms at the least) and RACK timers stall a latency message
# by 4 or 12 ms here even with nothing else on the link, which a figure should be read with.
tcp_mark() {
  ip netns exec pactA env NSTAT_HISTORY="$work/nstat.pactA" nstat -n >/dev/null 2>&1 || true
}
tcp_read() {
  ip netns exec pactA env NSTAT_HISTORY="$work/nstat.pactA" nstat -z TcpExtTCPLossProbes \
    TcpRetransSegs TcpExtTCPDSACKRecv 2>/dev/null |
    awk '$1 == "TcpExtTCPLossProbes" {p = $2} $1 == "TcpRetransSegs" {r = $2}
         $1 == "TcpExtTCPDSACKRecv" {d = $2} END {printf "%d %d %d\n", p, r, d}'
}
# run_case NAME ROUND PROFILE_A PROFILE_B: one pact-perf run; JSON in $work/NAME-rROUND.json, the
# sender's TCP counters in $work/NAME-rROUND.tcp (loss probes, retransmitted segments, DSACKs).
run_case() {
  local name=$1 round=$2 prof_a=$3 prof_b=$4
  local json=$work/$name-r$round.json log=$work/$name-r$round.log
  local t0=$SECONDS rc=0 profiles=()
  [[ -z $prof_a ]] || profiles+=("PACT_TC_$BULK_TC=$prof_a")
  [[ -z $prof_b ]] || profiles+=("PACT_TC_$LATENCY_TC=$prof_b")
  tcp_mark
  # In the background and waited for, so that a signal to this script is handled at once.
  env "${profiles[@]}" timeout -k 10 "$RUN_TIMEOUT" "$PERF" mix --face nccl --plugin "$PLUGIN" \
    --netns pactA,pactB \
    --env-a PACT_NET_DEVICES=pa0 --env-a UCX_NET_DEVICES=pa0 \
    --env-b PACT_NET_DEVICES=pb0 --env-b UCX_NET_DEVICES=pb0 \
    --bulk-tc "$BULK_TC" --latency-tc "$LATENCY_TC" --bulk-bytes "$BULK_BYTES" \
    --bulk-window "$BULK_WINDOW" --latency-bytes "$LATENCY_BYTES" --seconds "$PHASE_SECONDS" \
    --link-rate "$RATE" --timeout 60 --json "$json" >"$log" 2>&1 &
  child=$!
  wait "$child" || rc=$?
  child=""
  local tcp
  tcp=$(tcp_read)
  echo "$tcp" >"$work/$name-r$round.tcp"
  if ((rc == 0)); then
    # shellcheck disable=SC2086  # $tcp: three numbers, one argument each
    printf '  round %d %-8s %3d s  %s\n' "$round" "$name" $((SECONDS - t0)) "$(python3 - "$json" $tcp <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
r = {(x["phase"], x["stream"]): x for x in d["results"]}
f = lambda k, key, spec: format(r[k][key], spec) if k in r and r[k][key] is not None else "-"
print("B P99 alone %s ms, mixed %s ms; A %s Gbit/s bulk, %s mixed; sender TCP: %s loss probes, "
      "%s retransmits, %s DSACKs" % (
    f(("alone", "latency"), "p99_ms", ".2f"), f(("mixed", "latency"), "p99_ms", ".2f"),
    f(("bulk", "bulk"), "goodput_gbit_s", ".3f"), f(("mixed", "bulk"), "goodput_gbit_s", ".3f"),
    *sys.argv[2:5]))
EOF
)"
  else
    run_failed "$round" "$name" "$rc" "$log" "$json"
  fi
}

echo "# netns-mix: RATE=$RATE ROUNDS=$ROUNDS PHASE_SECONDS=$PHASE_SECONDS;" \
     "A: class $BULK_TC, $BULK_BYTES x window $BULK_WINDOW; B: class $LATENCY_TC, $LATENCY_BYTES;" \
     "plugin $PLUGIN; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# test:    PACT_TC_$BULK_TC=\"$TC_A\" PACT_TC_$LATENCY_TC=\"$TC_B\""
echo "# control: PACT_TC_$BULK_TC=\"$TC_A\" PACT_TC_$LATENCY_TC=\"$CONTROL_TC_B\""
rails_up --pairs 1 --rate "$RATE"
start=$SECONDS
rounds_done=0
for ((r = 1; r <= ROUNDS; r++)); do
  if past_deadline; then break; fi
  if ((r % 2)); then
    run_case test "$r" "$TC_A" "$TC_B"
    run_case control "$r" "$TC_A" "$CONTROL_TC_B"
  else
    run_case control "$r" "$TC_A" "$CONTROL_TC_B"
    run_case test "$r" "$TC_A" "$TC_B"
  fi
  rounds_done=$r
done
rails_down

echo "# all rounds done in $((SECONDS - start)) s; load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "$RATE" <<'EOF'
import glob, json, os, re, statistics, sys

work, rate = sys.argv[1:3]
runs = {"test": {}, "control": {}}  # config -> round -> doc
for path in glob.glob(os.path.join(work, "*-r*.json")):
    m = re.match(r"(test|control)-r(\d+)\.json$", os.path.basename(path))
    if m:
        with open(path) as fh:
            runs[m.group(1)][int(m.group(2))] = json.load(fh)

def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None

def f(v, spec=".2f"):
    return "-" if v is None else format(v, spec)

def row(doc, phase, stream, key):
    for r in doc["results"]:
        if r["phase"] == phase and r["stream"] == stream:
            return r[key]
    return None

def tcp(c, r):
    """The sender's TCP loss probes, retransmitted segments and DSACKs during a run."""
    try:
        with open(os.path.join(work, "%s-r%d.tcp" % (c, r))) as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return [None, None, None]

for c in runs:
    for r, d in runs[c].items():
        d["tcp"] = tcp(c, r)

metrics = [  # (name, function of one run's document, format)
    ("B latency alone P50 ms", lambda d: row(d, "alone", "latency", "p50_ms"), ".3f"),
    ("B latency alone P99 ms", lambda d: row(d, "alone", "latency", "p99_ms"), ".3f"),
    ("B latency mixed P50 ms", lambda d: row(d, "mixed", "latency", "p50_ms"), ".3f"),
    ("B latency mixed P99 ms", lambda d: row(d, "mixed", "latency", "p99_ms"), ".3f"),
    ("B latency mixed max ms", lambda d: row(d, "mixed", "latency", "max_ms"), ".3f"),
    ("B messages alone", lambda d: row(d, "alone", "latency", "count"), ".0f"),
    ("B messages mixed", lambda d: row(d, "mixed", "latency", "count"), ".0f"),
    ("B P99 mixed / alone", lambda d: d["ratios"].get("latency_p99_mixed_over_alone"), ".2f"),
    ("A goodput bulk Gbit/s", lambda d: row(d, "bulk", "bulk", "goodput_gbit_s"), ".3f"),
    ("A goodput bulk / link", lambda d: d["ratios"].get("bulk_goodput_over_link"), ".3f"),
    ("A goodput mixed Gbit/s", lambda d: row(d, "mixed", "bulk", "goodput_gbit_s"), ".3f"),
    ("sender TCP loss probes", lambda d: d["tcp"][0], ".0f"),
    ("sender TCP DSACKs", lambda d: d["tcp"][2], ".0f"),
]
summary = {"rate": rate, "configs": {}, "test_over_control": {}}
names = [c for c in ("test", "control") if runs[c]]
for c in names:
    d0 = next(iter(runs[c].values()))["meta"]
    print("== %s: %s=%s %s=%s, %d round(s)" % (c, d0["bulk_profile_var"], json.dumps(d0["bulk_profile"]),
                                               d0["latency_profile_var"], json.dumps(d0["latency_profile"]),
                                               len(runs[c])))
print("%-26s" % "median over rounds" + "".join("%12s" % c for c in names))
for name, fn, spec in metrics:
    cells = []
    for c in names:
        vals = [fn(d) for d in runs[c].values()]
        v = med(vals)
        summary["configs"].setdefault(c, {})[name] = {"median": v, "per_round": vals}
        cells.append(f(v, spec))
    print("%-26s" % name + "".join("%12s" % x for x in cells))
for key, op, limit in (("B P99 mixed / alone", "<=", 1.5), ("A goodput bulk / link", ">=", 0.9)):
    verdicts = []
    for c in names:
        v = summary["configs"][c][key]["median"]
        ok = v is not None and (v <= limit if op == "<=" else v >= limit)
        verdicts.append("%s %s (%s)" % (c, "met" if ok else "MISSED", f(v)))
        summary["configs"][c].setdefault("targets", {})[key] = {"op": op, "limit": limit, "median": v, "met": ok}
    print("target %s %s %.1f: %s" % (key, op, limit, ", ".join(verdicts)))
rounds = sorted(set(runs["test"]) & set(runs["control"]))
pairs = []
for r in rounds:
    t, c = row(runs["test"][r], "mixed", "latency", "p99_ms"), row(runs["control"][r], "mixed", "latency", "p99_ms")
    if t and c:
        pairs.append(t / c)
if pairs:
    print("B P99 mixed, test / control, per round: %s; median %.2f (below 1: the test configuration "
          "protects B better)" % (" ".join("%.2f" % x for x in pairs), med(pairs)))
    summary["test_over_control"]["latency_p99_mixed"] = {"per_round": pairs, "median": med(pairs)}
with open(os.path.join(work, "summary.json"), "w") as fh:
    json.dump(summary, fh, indent=2)
EOF
if [[ -n $JSON_DIR && -f $work/test-r1.json && -f $work/control-r1.json ]]; then
  python3 "$PLOT" "$work/netns-mix.svg" "$work/test-r1.json=test" "$work/control-r1.json=control" \
    --title "netns-mix round 1: B latency percentiles ($RATE link)" >/dev/null ||
    echo "netns-mix.sh: pact-plot could not draw the round's plot" >&2
fi
((failed == 0)) || die "some runs failed (see above)"
