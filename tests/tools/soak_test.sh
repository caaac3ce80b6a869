#!/usr/bin/env bash
# A short soak (CI): plugin and engine traffic with every piece-level fault on; the run must pass
# (no miscommit, no plugin data error, no leaked registration or transfer) and say so in its JSON.
# Usage: soak_test.sh PATH_TO_PACT_PERF
set -u
perf=$1
json=$(mktemp /tmp/pact-soak-XXXXXX.json)
trap 'rm -f "$json"' EXIT
"$perf" soak --seconds 15 --interval 5 --json "$json" \
  --fault 'drop=0.01,dup=0.01,corrupt=0.01,reject=0.01,lose_remote_done=0.01,seed=5'
rc=$?
python3 - "$json" "$rc" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
bad = [k for k in ("miscommits", "plugin_errors", "leaked_registrations", "open_transfers") if d[k] != 0]
checks = {"exit status 0": rc == 0, "pass": d["pass"], "zero counters": not bad,
          "engine traffic": d["committed"] > 0, "plugin traffic": d["plugin_messages"] > 0,
          "faults injected": d["faults_injected"] > 0}
for name, ok in checks.items():
    print(("ok: " if ok else "FAIL: ") + name + ("" if ok or name != "zero counters" else " " + str(bad)))
sys.exit(0 if all(checks.values()) else 1)
PY
