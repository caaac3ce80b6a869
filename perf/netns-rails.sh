#!/usr/bin/env bash
# perf/netns-rails.sh: the multi-rail benchmark of pact's traffic classes over the veth rails that
# ci/netns.sh builds (namespaces pactA / pactB, pairs pa<i>/pb<i>, tbf rate limits).
#
# Usage: perf/netns-rails.sh [--json DIR]
#
# Cases (pact-perf p2p --tc $TC, rank 0 in pactA sends, rank 1 in pactB receives, UCX_TLS=tcp):
#   equal rails (ci/netns.sh up --pairs 2 --rate $RATE):
#     a  one      PACT_TC_<TC>=ordered, PACT_NET_DEVICES=pa0 / pb0            device 0 = pa0 / pb0
#     b  two      PACT_TC_<TC>=unordered,lanes=2,chunk=$CHUNK,steer=adaptive  vdevice of pa0+pa1
#   pair 0 slowed (ci/netns.sh up --pairs 2 --rate $RATE --slow-rate $SLOW_RATE):
#     c  adaptive   unordered,lanes=2,chunk=$CHUNK,steer=adaptive            vdevice of pa0+pa1
#     d  roundrobin unordered,lanes=2,chunk=$CHUNK,steer=roundrobin          vdevice of pa0+pa1
# Each round builds the equal rails and runs a and b, then the slowed rails and runs c and d; the
# order inside each pair alternates between rounds. Every case runs a bandwidth sweep
# ($MIN_SIZE..$MAX_SIZE, factor 2) and a ping-pong latency sweep ($LAT_MIN..$LAT_MAX, factor
# $LAT_FACTOR). Printed: a table per case (median over rounds of Gbit/s, of the bandwidth
# completion-gap P99, of the share of each size's bytes the send comm gave to lane 0 = rail pa0
# (pact_comm_stats), and of the one-way latency P50/P99 per size), then
# the paired ratios b/a and c/d (per size: the median over rounds of the ratio within a round)
# against the targets (b/a >= 1.7, c/d >= 1.3).
#
# Environment (defaults in brackets): BUILD [build] (pact-perf at $BUILD/perf/pact-perf, the
# plugin at $BUILD/plugin/libnccl-net-pact.so unless PLUGIN is set), RATE [1gbit], SLOW_RATE
# [RATE/4], ROUNDS [3], TC [1], CHUNK [256K], MIN_SIZE [1M], MAX_SIZE [16M], BUDGET [128M, bytes
# per bandwidth size], WINDOW [16], LAT_MIN [4K], LAT_MAX [1M], LAT_FACTOR [16],
# RUN_TIMEOUT [180 s per pact-perf run], DEADLINE [1800 s for the whole script: no new round
# starts after it], LOCK_WAIT [300 s].
# --json DIR: keeps every run's pact-perf JSON (DIR/<case>-r<round>.json) and DIR/summary.json.
#
# Needs root and network namespaces; exits 77 with the reason when `ci/netns.sh check` says they
# are unavailable. Takes the netns suite's lock (/run/lock/pact-netns.lock) around each
# up .. down, so it never tears down a concurrent `meson test --suite netns`. The namespaces are
# always removed on exit (trap). Exit status: 0 when every run succeeded (targets missed do not
# change it), 1 when a run or a namespace step failed, 2 on bad usage, 77 when unavailable.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NETNS_SCRIPT=netns-rails.sh
# shellcheck source=perf/netns-rails-lib.sh
source "$here/perf/netns-rails-lib.sh"  # NETNS, BUILD, LOCK, LOCK_WAIT, die and the rest
PERF=$BUILD/perf/pact-perf
PLUGIN=${PLUGIN:-$BUILD/plugin/libnccl-net-pact.so}
RATE=${RATE:-1gbit}
ROUNDS=${ROUNDS:-3}
TC=${TC:-1}
CHUNK=${CHUNK:-256K}
MIN_SIZE=${MIN_SIZE:-1M}
MAX_SIZE=${MAX_SIZE:-16M}
BUDGET=${BUDGET:-128M}
WINDOW=${WINDOW:-16}
LAT_MIN=${LAT_MIN:-4K}
LAT_MAX=${LAT_MAX:-1M}
LAT_FACTOR=${LAT_FACTOR:-16}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
DEADLINE=${DEADLINE:-1800}
JSON_DIR=""

netns_args --json JSON_DIR "$@"

[[ -n ${SLOW_RATE:-} ]] || SLOW_RATE=$(quarter_rate "$RATE") || exit 2  # RATE/4 by default
need_positive ROUNDS
need_built "$PERF" "$PLUGIN"

netns_check
# $child: the pact-perf run in flight. Kept: the JSON files and each run's output.
netns_work "$JSON_DIR" child '*.json' '*.log'

clean_env

failed=0
# run_case CASE ROUND PROFILE DEVICE-ARGS...: one pact-perf run; JSON in $work/CASE-rROUND.json.
run_case() {
  local name=$1 round=$2 profile=$3; shift 3
  local devs_a=pa0 devs_b=pb0
  if [[ $1 == --vdevice ]]; then devs_a=pa0,pa1; devs_b=pb0,pb1; fi
  local json=$work/$name-r$round.json log=$work/$name-r$round.log
  local t0=$SECONDS rc=0
  # In the background and waited for, so that a signal to this script is handled at once.
  env "PACT_TC_$TC=$profile" timeout -k 10 "$RUN_TIMEOUT" "$PERF" p2p --plugin "$PLUGIN" \
    --netns pactA,pactB --env-a "PACT_NET_DEVICES=$devs_a" --env-b "PACT_NET_DEVICES=$devs_b" \
    --tc "$TC" "$@" --window "$WINDOW" --min-size "$MIN_SIZE" --max-size "$MAX_SIZE" \
    --budget "$BUDGET" --lat-min-size "$LAT_MIN" --lat-max-size "$LAT_MAX" \
    --lat-factor "$LAT_FACTOR" --timeout 60 --lane-stats --json "$json" >"$log" 2>&1 &
  child=$!
  wait "$child" || rc=$?
  child=""
  if ((rc == 0)); then
    printf '  round %d %-10s %3d s  %s\n' "$round" "$name" $((SECONDS - t0)) \
      "$(grep -m1 '^# send comm' "$log" | sed 's/^# send comm after the bandwidth sweep: //')"
  else
    run_failed "$round" "$name" "$rc" "$log" "$json"
  fi
}

ordered=ordered
two="unordered,lanes=2,chunk=$CHUNK"
echo "# netns-rails: RATE=$RATE SLOW_RATE=$SLOW_RATE (pair 0 in c/d) ROUNDS=$ROUNDS TC=$TC" \
     "CHUNK=$CHUNK sizes $MIN_SIZE..$MAX_SIZE budget $BUDGET window $WINDOW" \
     "latency $LAT_MIN..$LAT_MAX x$LAT_FACTOR; plugin $PLUGIN;" \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$SECONDS
rounds_done=0
for ((r = 1; r <= ROUNDS; r++)); do
  if past_deadline; then break; fi
  rails_up --rate "$RATE"
  if ((r % 2)); then
    run_case a "$r" "$ordered" --dev 0
    run_case b "$r" "$two,steer=adaptive" --vdevice 0,1
  else
    run_case b "$r" "$two,steer=adaptive" --vdevice 0,1
    run_case a "$r" "$ordered" --dev 0
  fi
  rails_down
  rails_up --rate "$RATE" --slow-rate "$SLOW_RATE"
  if ((r % 2)); then
    run_case c "$r" "$two,steer=adaptive" --vdevice 0,1
    run_case d "$r" "$two,steer=roundrobin" --vdevice 0,1
  else
    run_case d "$r" "$two,steer=roundrobin" --vdevice 0,1
    run_case c "$r" "$two,steer=adaptive" --vdevice 0,1
  fi
  rails_down
  rounds_done=$r
done

echo "# all rounds done in $((SECONDS - start)) s; load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "$RATE" "$SLOW_RATE" "$CHUNK" <<'EOF'
import glob, json, os, re, statistics, sys

work, rate, slow, chunk = sys.argv[1:5]
cases = {
    "a": f"one rail (pa0), ordered, rails {rate}",
    "b": f"two rails (vdevice pa0+pa1), unordered lanes=2 chunk={chunk} steer=adaptive, "
         f"rails {rate}",
    "c": f"pa0 at {slow}, pa1 at {rate}: unordered lanes=2 steer=adaptive",
    "d": f"pa0 at {slow}, pa1 at {rate}: unordered lanes=2 steer=roundrobin",
}
runs = {k: {} for k in cases}  # case -> round -> doc
for path in glob.glob(os.path.join(work, "*-r*.json")):
    m = re.match(r"([abcd])-r(\d+)\.json$", os.path.basename(path))
    if m:
        with open(path) as f:
            runs[m.group(1)][int(m.group(2))] = json.load(f)

def fmt_size(z):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if z >= 1 << shift and z % (1 << shift) == 0:
            return f"{z >> shift}{unit}"
    return str(z)

def med(v):
    return statistics.median(v) if v else None

def f(v, spec):
    return format("-", ">" + re.match(r"\d*", spec).group()) if v is None else format(v, spec)

def rows(doc, key):
    return {r["size"]: r[key] for r in doc["results"] if r.get(key) is not None}

summary = {"rate": rate, "slow_rate": slow, "chunk": chunk, "cases": {}, "ratios": {}}
for k, title in cases.items():
    rs = runs[k]
    print(f"\n== ({k}) {title}: {len(rs)} run(s)")
    if not rs:
        continue
    bw_sizes = sorted({z for d in rs.values() for z in rows(d, "bw_gbps")})
    lat_sizes = sorted({z for d in rs.values() for z in rows(d, "lat_p99_us")})
    print(f"{'size':>6} {'Gbit/s':>8} {'min':>7} {'max':>7} {'bw_p99_us':>10} {'lane0_%':>8}")
    case = {"bw": {}, "lat": {}, "runs": len(rs)}
    for z in bw_sizes:
        g = [rows(d, "bw_gbps")[z] * 8 for d in rs.values() if z in rows(d, "bw_gbps")]
        p = [rows(d, "bw_p99_us")[z] for d in rs.values() if z in rows(d, "bw_p99_us")]
        # Share of this size's bytes (warmup included) that the send comm gave to lane 0 (pa0).
        sh = []
        for d in rs.values():
            per = ((d["meta"].get("send_comm_stats") or {}).get("lane_bytes_per_size") or {})
            lb = per.get(fmt_size(z))
            if lb and len(lb) > 1 and sum(lb) > 0:
                sh.append(100.0 * lb[0] / sum(lb))
        case["bw"][z] = {"gbit_s": med(g), "min": min(g), "max": max(g), "bw_p99_us": med(p),
                         "lane0_share_pct": sh}
        print(f"{fmt_size(z):>6} {med(g):8.3f} {min(g):7.3f} {max(g):7.3f} {f(med(p), '10.0f')}"
              f" {f(med(sh), '8.1f')}")
    print(f"{'size':>6} {'lat_p50_us':>11} {'lat_p99_us':>11}  (one-way, ping-pong)")
    for z in lat_sizes:
        p50 = med([rows(d, "lat_p50_us")[z] for d in rs.values() if z in rows(d, "lat_p50_us")])
        p99 = med([rows(d, "lat_p99_us")[z] for d in rs.values() if z in rows(d, "lat_p99_us")])
        case["lat"][z] = {"p50_us": p50, "p99_us": p99}
        print(f"{fmt_size(z):>6} {f(p50, '11.1f')} {f(p99, '11.1f')}")
    shares = []
    for d in rs.values():
        st = d["meta"].get("send_comm_stats")
        if st and sum(st["lane_bytes"]) > 0 and len(st["lane_bytes"]) > 1:
            shares.append(100.0 * st["lane_bytes"][0] / sum(st["lane_bytes"]))
    if shares:
        case["lane0_share_pct"] = shares
        print("lane 0 (rail pa0) share of the bytes sent in the bandwidth sweep: " +
              ", ".join(f"{s:.1f}%" for s in shares))
    summary["cases"][k] = case

for num, den, target in (("b", "a", 1.7), ("c", "d", 1.3)):
    rounds = sorted(set(runs[num]) & set(runs[den]))
    name = f"{num}/{den}"
    print(f"\n== {name} (target >= {target}): paired by round, {len(rounds)} pair(s)")
    if not rounds:
        continue
    per_size, allr = {}, []
    for z in sorted(rows(runs[num][rounds[0]], "bw_gbps")):
        rr = []
        for r in rounds:
            x, y = rows(runs[num][r], "bw_gbps").get(z), rows(runs[den][r], "bw_gbps").get(z)
            if x and y:
                rr.append(x / y)
        if rr:
            per_size[z] = rr
            allr += rr
    print(f"{'size':>6} {'median':>7}  per round")
    for z, rr in per_size.items():
        print(f"{fmt_size(z):>6} {med(rr):7.2f}  " + " ".join(f"{x:.2f}" for x in rr))
    overall = med(allr)
    met = sum(1 for rr in per_size.values() if med(rr) >= target)
    verdict = "met" if overall >= target else \
        f"MISSED by {target - overall:.2f} ({overall / target:.0%} of the target)"
    print(f"overall median {overall:.2f} over {len(allr)} size-rounds; {met}/{len(per_size)} sizes"
          f" at or above {target}: target {verdict}")
    summary["ratios"][name] = {"target": target, "overall_median": overall,
                               "per_size": {str(z): rr for z, rr in per_size.items()}}

out = os.path.join(work, "summary.json")
with open(out, "w") as fh:
    json.dump(summary, fh, indent=2)
EOF
((failed == 0)) || die "some runs failed (see above)"
