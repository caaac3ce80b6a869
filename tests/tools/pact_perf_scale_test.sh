#!/usr/bin/env bash
# pact-perf scale on loopback. (1) A short run in every close order succeeds and its JSON has
# every field, each comm was opened and closed, and the plugin holds no comm or registration
# afterwards. (2) Under a tiny descriptor limit the run still ends (no hang), reports any failed
# round with its step and the plugin's error, and goes on with the next round. No timing is
# asserted. Usage: pact_perf_scale_test.sh PACT_PERF
set -u
perf=$1
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} PACT_NET_DEVICES=${PACT_NET_DEVICES:-lo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# 32 comms: today's plugin spends 0.2-0.5 s per close when the peer has not closed yet.
"$perf" scale --comms 32 --order all --timeout-s 60 --json "$tmp/ok.json" >"$tmp/ok.out" 2>&1
rc=$?
python3 - "$tmp/ok.json" "$rc" <<'EOF_PY' || { fail=1; cat "$tmp/ok.out"; }
import json, sys
d = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
errors = []
if rc != 0: errors.append("exit status %d" % rc)
meta_keys = ["plugin_path", "plugin_name", "version", "dev", "size", "batch", "timeout_s",
             "nofile_soft", "nofile_hard", "UCX_TLS", "after_init"]
errors += ["meta lacks " + k for k in meta_keys if k not in d["meta"]]
results = d["results"]
if [(r["comms"], r["order"]) for r in results] != [(32, "both"), (32, "recv-first"), (32, "send-first")]:
    errors.append("rounds %s" % [(r["comms"], r["order"]) for r in results])
side_keys = ["ok", "failure", "comms_opened", "comms_closed", "comms_closed_in_order", "setup_s",
             "comms_per_s", "reg_s", "message_s", "dereg_s", "close_s", "close_per_comm_s",
             "leftover_close_s", "before", "after_setup", "after_close", "rss_per_comm_bytes",
             "fds_per_comm", "maps_per_comm", "plugin_resources_after_close"]
for r in results:
    name = "%d %s" % (r["comms"], r["order"])
    for k in ["ok", "failed", "message_round_s", "recv", "send"]:
        if k not in r: errors.append(name + ": lacks " + k)
    if not r.get("ok") or r.get("failed") is not None: errors.append(name + ": failed %s" % r.get("failed"))
    if not isinstance(r.get("message_round_s"), (int, float)): errors.append(name + ": no message round")
    for side in ("recv", "send"):
        s = r[side]
        errors += ["%s %s: lacks %s" % (name, side, k) for k in side_keys if k not in s]
        for when in ("before", "after_setup", "after_close"):
            snap = s.get(when) or {}
            for k in ("fds", "threads", "rss_bytes", "maps"):
                if not snap.get(k, 0) > 0: errors.append("%s %s: %s.%s = %s" % (name, side, when, k, snap.get(k)))
        if s.get("comms_opened") != 32 or s.get("comms_closed") != 32 or s.get("comms_closed_in_order") != 32:
            errors.append("%s %s: opened/closed %s/%s" % (name, side, s.get("comms_opened"), s.get("comms_closed")))
        if s.get("after_setup", {}).get("fds", 0) <= s.get("before", {}).get("fds", 0):
            errors.append("%s %s: no descriptor for 32 comms?" % (name, side))
        held = s.get("plugin_resources_after_close") or {}
        if held.get("comms") != 0 or held.get("registrations") != 0:
            errors.append("%s %s: plugin still holds %s" % (name, side, held))
if errors:
    print("FAIL: scale: " + "; ".join(errors))
    sys.exit(1)
print("ok: scale --comms 32 --order all: 3 rounds, every field, nothing held after close")
EOF_PY

# Descriptor limit 64: a round that runs out of descriptors must fail cleanly and the next run.
timeout 300 "$perf" scale --comms 2000,8 --order both --nofile 64 --timeout-s 30 \
  --json "$tmp/limit.json" >"$tmp/limit.out" 2>&1
rc=$?
python3 - "$tmp/limit.json" "$rc" <<'EOF_PY' || { fail=1; cat "$tmp/limit.out"; }
import json, sys
d = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
errors = []
results = d["results"]
if [r["comms"] for r in results] != [2000, 8]: errors.append("rounds %s (a hang or a crash?)" % [r["comms"] for r in results])
if rc not in (0, 1): errors.append("exit status %d" % rc)
if (rc == 0) != all(r["ok"] for r in results): errors.append("exit status %d does not match the rounds" % rc)
for r in results:
    f = r.get("failed")
    if r["ok"]: continue
    if not f or not f.get("step") or not f.get("error") or f.get("side") not in ("recv", "send"):
        errors.append("%d: failure not described: %s" % (r["comms"], f))
if errors:
    print("FAIL: scale under --nofile 64: " + "; ".join(errors))
    sys.exit(1)
print("ok: scale under --nofile 64: " + ", ".join(
    "%d %s" % (r["comms"], "ok" if r["ok"] else "failed at %s (%s)" % (r["failed"]["step"], r["failed"]["error"][:80]))
    for r in results))
EOF_PY

[ $fail -eq 0 ] && echo "pact-perf scale checks passed"
exit $fail
