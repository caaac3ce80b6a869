#!/usr/bin/env bash
# pact-perf kv and a2a (transfer-engine scenarios) on loopback: each run writes every required
# JSON key, commits something, and never miscommits or leaks a registration; an epoch switch
# mid-run aborts (or retries) transfers without a miscommit. Usage: pact_perf_kv_test.sh PACT_PERF
set -u
perf=$1
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} PACT_NET_DEVICES=${PACT_NET_DEVICES:-lo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# run NAME ARGS...: runs pact-perf with --json $tmp/NAME.json; a nonzero exit fails the test.
run() {
  local name=$1; shift
  if ! "$perf" "$@" --json "$tmp/$name.json" >"$tmp/$name.out" 2>&1; then
    echo "FAIL: $name: pact-perf $* exited nonzero"; cat "$tmp/$name.out"; fail=1; return 1
  fi
  echo "ok: $name ran"
}

# check NAME EXTRA_PYTHON_CONDITION: the JSON has every key, committed > 0, no miscommit or leak.
check() {
  python3 - "$tmp/$1.json" "$1" "$2" <<'EOF' || fail=1
import json, sys
path, name, extra = sys.argv[1], sys.argv[2], sys.argv[3]
d = json.load(open(path))
required = ["committed", "aborted", "retried", "duplicates_dropped", "stale_rejected",
            "miscommits", "leaked_registrations", "p50_commit_us", "p95_commit_us",
            "p99_commit_us", "goodput_gbps", "credit_stall_ms", "peak_staged_bytes",
            "credit_budget_bytes"]
missing = [k for k in required if k not in d]
errors = []
if missing: errors.append("missing keys %s" % missing)
if d.get("miscommits") != 0: errors.append("miscommits = %s" % d.get("miscommits"))
if d.get("leaked_registrations") != 0:
    errors.append("leaked_registrations = %s" % d.get("leaked_registrations"))
if not d.get("committed", 0) > 0: errors.append("committed = %s" % d.get("committed"))
if extra and not eval(extra, {}, d): errors.append("condition failed: " + extra)
if errors:
    print("FAIL: %s: %s" % (name, "; ".join(errors)))
    sys.exit(1)
print("ok: %s: committed %s, aborted %s, retried %s, p99 %.0f us" %
      (name, d["committed"], d["aborted"], d["retried"], d["p99_commit_us"]))
EOF
}

run kv kv --prefill 2 --decode 3 --seconds 2 && check kv ""
run a2a a2a --ranks 3 --seconds 2 && check a2a "steps_per_s > 0"
run kv_epoch kv --prefill 2 --decode 3 --seconds 2 --epoch-switch-after 50 &&
  check kv_epoch "aborted + retried + rerouted > 0"

[ $fail -eq 0 ] && echo "pact-perf kv/a2a checks passed"
exit $fail
