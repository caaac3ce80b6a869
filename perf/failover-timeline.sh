#!/usr/bin/env bash
# perf/failover-timeline.sh: throughput over time around a rail failover (docs/reliability.md,
# "Rail failover"; issue #31's plot). Two veth rails fused into one device (ci/netns.sh up --pairs
# 2, each limited to RATE), engine KV transfers streamed from pactB to pactA through the Python
# package (perf/failover_timeline.py); rail 1 is cut FAULT_AT seconds in and brought back
# REPAIR_AFTER seconds later. Writes DIR/failover-timeline.{json,svg} and prints the figures: rate
# before (two rails) and after (one), longest gap between commits, the rate over the 200 ms after
# the fault and over the next 200 ms (target: one rail's rate within 2x PACT_RAIL_TIMEOUT).
#
# Usage: perf/failover-timeline.sh [--out DIR]   (default: failover-timeline/)
# Environment: BUILD [build], RATE [1gbit], SECONDS_ [6], FAULT_AT [1.5], REPAIR_AFTER [2.5],
# SIZE [1M], WINDOW [8], LOCK_WAIT [300 s]. Needs root, network namespaces (exits 77 when
# `ci/netns.sh check` says they are unavailable) and the Python package built (build/python).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NETNS_SCRIPT=failover-timeline.sh
# shellcheck source=perf/netns-rails-lib.sh
source "$here/perf/netns-rails-lib.sh"
OUT=failover-timeline
netns_args --out OUT "$@"
RATE=${RATE:-1gbit}
need_rate "$RATE"
[[ -d $BUILD/python/pact ]] || die "the Python package is not built in $BUILD/python (ci/build.sh)"
PY=${PY:-$here/.venv/bin/python}
[[ -x $PY ]] || PY=python3
netns_check
netns_work "$OUT" child "failover-timeline.*"
clean_env
rails_up --rate "$RATE"
PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH} timeout -k 10 180 "$PY" "$here/perf/failover_timeline.py" \
  --netns-script "$NETNS" --out "$work" --seconds "${SECONDS_:-6}" --fault-at "${FAULT_AT:-1.5}" \
  --repair-after "${REPAIR_AFTER:-2.5}" --size "${SIZE:-1M}" --window "${WINDOW:-8}" &
child=$!
wait "$child"
child=""
rails_down
echo "written: $OUT/failover-timeline.json, $OUT/failover-timeline.svg"
