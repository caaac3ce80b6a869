#!/usr/bin/env bash
# perf/failover-cost.sh: what rail failover costs when nothing fails (docs/reliability.md, "Rail
# failover"). The same build, two rails fused into one device (ci/netns.sh up --pairs 2), the class
# unordered,lanes=2,chunk=256K, pact-perf p2p as NCCL drives the plugin (a window of sends in
# flight, each in its own buffer, counted at the receiver):
#   off  PACT_RAIL_TIMEOUT=0ms on both sides: no probes, no acknowledgements, each piece received on
#        its lanes' rails: the data path as it was before failover
#   on   the default (100ms): probes, every message acknowledged over UDP, receives on every rail
# Each round runs both, in alternating order. Sizes: bandwidth at 1 MiB and 16 MiB, one-way latency
# (ping-pong) at 8 B and 8 KiB. Printed: per case the median over rounds, then the paired ratio
# on/off (the median of the ratios within a round) against the target (within 3%).
#
# Usage: perf/failover-cost.sh [--json DIR]
# Environment: BUILD [build], RATE [unlimited; e.g. 1gbit puts a tbf limit on both rails], ROUNDS
# [5], BUDGET [256M bytes per bandwidth size], WINDOW [8], RUN_TIMEOUT [180 s per run], LOCK_WAIT
# [300 s]. Needs root and network namespaces (exits 77 when `ci/netns.sh check` says they are
# unavailable); takes the netns suite's lock around up .. down.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NETNS_SCRIPT=failover-cost.sh
# shellcheck source=perf/netns-rails-lib.sh
source "$here/perf/netns-rails-lib.sh"
PERF=$BUILD/perf/pact-perf
PLUGIN=${PLUGIN:-$BUILD/plugin/libnccl-net-pact.so}
RATE=${RATE:-}
ROUNDS=${ROUNDS:-5}
BUDGET=${BUDGET:-256M}
WINDOW=${WINDOW:-8}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
JSON_DIR=""
netns_args --json JSON_DIR "$@"
need_positive ROUNDS WINDOW RUN_TIMEOUT
[[ -z $RATE ]] || need_rate "$RATE"
need_built "$PERF" "$PLUGIN"
netns_check
netns_work "$JSON_DIR" child "*.json"
clean_env

failed=0
# run_case CASE ROUND TIMEOUT: one pact-perf run over both rails; JSON in $work/CASE-rROUND.json.
run_case() {
  local name=$1 round=$2 timeout=$3
  local json=$work/$name-r$round.json log=$work/$name-r$round.log rc=0
  env PACT_TC_1=unordered,lanes=2,chunk=256K timeout -k 10 "$RUN_TIMEOUT" "$PERF" p2p --plugin "$PLUGIN" \
    --netns pactA,pactB --env-a "PACT_NET_DEVICES=pa0,pa1" --env-b "PACT_NET_DEVICES=pb0,pb1" \
    --env-a "PACT_RAIL_TIMEOUT=$timeout" --env-b "PACT_RAIL_TIMEOUT=$timeout" \
    --tc 1 --vdevice 0 1 --window "$WINDOW" --min-size 1M --max-size 16M --factor 16 \
    --budget "$BUDGET" --lat-min-size 8 --lat-max-size 8K --lat-factor 1024 --timeout 60 \
    --json "$json" >"$log" 2>&1 &
  child=$!
  wait "$child" || rc=$?
  child=""
  if ((rc == 0)); then printf '  round %d %-3s done\n' "$round" "$name"; else run_failed "$round" "$name" "$rc" "$log" "$json"; fi
}

rate_args=()
[[ -z $RATE ]] || rate_args=(--rate "$RATE")
echo "# failover-cost: ROUNDS=$ROUNDS RATE=${RATE:-unlimited} WINDOW=$WINDOW BUDGET=$BUDGET; load $(cut -d' ' -f1-3 /proc/loadavg)"
rails_up "${rate_args[@]}"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then run_case off "$r" 0ms; run_case on "$r" 100ms; else run_case on "$r" 100ms; run_case off "$r" 0ms; fi
done
rails_down

python3 - "$work" <<'EOF'
import glob, json, os, re, statistics, sys
work = sys.argv[1]
runs = {"off": {}, "on": {}}
for path in glob.glob(os.path.join(work, "*-r*.json")):
    m = re.match(r"(off|on)-r(\d+)\.json$", os.path.basename(path))
    if m:
        with open(path) as f:
            runs[m.group(1)][int(m.group(2))] = json.load(f)
def rows(doc, key):
    return {r["size"]: r[key] for r in doc["results"] if r.get(key) is not None}
med = lambda v: statistics.median(v) if v else float("nan")
metrics = [("bw_gbps", 1 << 20, "Gbit/s at 1M", 8), ("bw_gbps", 16 << 20, "Gbit/s at 16M", 8),
           ("lat_p50_us", 8, "latency P50 at 8B (us)", 1), ("lat_p50_us", 8 << 10, "latency P50 at 8K (us)", 1)]
print(f"{'':26} {'off':>9} {'on':>9} {'on/off':>8}  (median over rounds; ratio: median of per-round ratios)")
summary = {}
for key, size, label, scale in metrics:
    vals = {c: [rows(d, key).get(size) for d in runs[c].values()] for c in runs}
    ratios = [runs["on"][r] and rows(runs["on"][r], key).get(size) / rows(runs["off"][r], key).get(size)
              for r in runs["on"] if r in runs["off"] and rows(runs["off"][r], key).get(size)]
    off = med([v * scale for v in vals["off"] if v is not None])
    on = med([v * scale for v in vals["on"] if v is not None])
    ratio = med([x for x in ratios if x])
    summary[label] = {"off": off, "on": on, "ratio": ratio}
    print(f"{label:26} {off:9.3f} {on:9.3f} {ratio:8.3f}")
print("target: bandwidth ratio >= 0.97, latency ratio <= 1.03")
with open(os.path.join(work, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
EOF
exit "$failed"
