#!/usr/bin/env bash
# pact-perf scale on loopback. (1) 5,000 comms in every close order over tcp and over shared
# memory: every JSON field, each comm opened and closed, the plugin holds nothing afterwards, and
# the counts of issue "Scale" (descriptors, mappings, threads per comm; bytes per idle comm; the
# state after close). (2) Under a tiny descriptor limit the run still ends (no hang), reports any
# failed round with its step and the plugin's error, and goes on with the next round. No timing
# is asserted. Usage: pact_perf_scale_test.sh PACT_PERF
set -u
perf=$1
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} PACT_NET_DEVICES=${PACT_NET_DEVICES:-lo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# 16 then twice 5,000 comms in each close order, over tcp and over shared memory (the 16-comm
# rounds open the device contexts, so the 5,000-comm rounds start from a warm process). Counts
# only: no descriptor, mapping or thread per comm, at most 8 KiB per idle comm, and after close
# descriptors, mappings, threads and RSS back within 5% of where the round began, the first burst
# of 5,000 too (UCX's request for each operation lives in pact's request slab, hash tables and
# registries shrink as they empty, the receive tag spaces' bitmap exists from the first comm on).
for tls in tcp sm; do
  UCX_TLS=$tls "$perf" scale --comms 16,5000,5000 --order all --timeout-s 60 --json "$tmp/$tls.json" \
    >"$tmp/$tls.out" 2>&1
  rc=$?
  python3 - "$tmp/$tls.json" "$rc" "$tls" <<'EOF_PY' || { fail=1; cat "$tmp/$tls.out"; }
import json, sys
d = json.load(open(sys.argv[1]))
rc, tls = int(sys.argv[2]), sys.argv[3]
errors = []
if rc != 0: errors.append("exit status %d" % rc)
meta_keys = ["plugin_path", "plugin_name", "version", "dev", "size", "batch", "timeout_s",
             "nofile_soft", "nofile_hard", "UCX_TLS", "after_init"]
errors += ["meta lacks " + k for k in meta_keys if k not in d["meta"]]
results = d["results"]
want = [(n, o) for n in (16, 5000, 5000) for o in ("both", "recv-first", "send-first")]
if [(r["comms"], r["order"]) for r in results] != want:
    errors.append("rounds %s" % [(r["comms"], r["order"]) for r in results])
side_keys = ["ok", "failure", "comms_opened", "comms_closed", "comms_closed_in_order", "setup_s",
             "comms_per_s", "reg_s", "message_s", "dereg_s", "close_s", "close_per_comm_s",
             "leftover_close_s", "before", "after_setup", "after_close", "rss_per_comm_bytes",
             "fds_per_comm", "maps_per_comm", "plugin_resources_after_close"]
for i, r in enumerate(results):
    n = r["comms"]
    burst = 3 <= i < 6  # the first 5,000-comm rounds
    name = "%s %d %s%s" % (tls, n, r["order"], " (first burst)" if burst else "")
    if not r.get("ok") or r.get("failed") is not None: errors.append(name + ": failed %s" % r.get("failed"))
    if not isinstance(r.get("message_round_s"), (int, float)): errors.append(name + ": no message round")
    for side in ("recv", "send"):
        s = r[side]
        errors += ["%s %s: lacks %s" % (name, side, k) for k in side_keys if k not in s]
        if s.get("comms_opened") != n or s.get("comms_closed") != n or s.get("comms_closed_in_order") != n:
            errors.append("%s %s: opened/closed %s/%s" % (name, side, s.get("comms_opened"), s.get("comms_closed")))
        held = s.get("plugin_resources_after_close") or {}
        if held != {"comms": 0, "registrations": 0, "orphaned_requests": 0}:
            errors.append("%s %s: plugin still holds %s" % (name, side, held))
        if n < 5000: continue
        b, up, c = s["before"], s["after_setup"], s["after_close"]
        if up["fds"] - b["fds"] > 8: errors.append("%s %s: %d descriptors for %d comms" % (name, side, up["fds"] - b["fds"], n))
        if up["maps"] - b["maps"] > 16: errors.append("%s %s: %d mappings for %d comms" % (name, side, up["maps"] - b["maps"], n))
        if up["threads"] - b["threads"] > 1: errors.append("%s %s: %d threads more" % (name, side, up["threads"] - b["threads"]))
        if s["rss_per_comm_bytes"] > 8192: errors.append("%s %s: %d bytes per idle comm" % (name, side, s["rss_per_comm_bytes"]))
        for k in ("fds", "maps", "threads", "rss_bytes"):
            slack = 1 if k != "rss_bytes" else 0
            if c[k] > b[k] * 1.05 + slack:
                errors.append("%s %s: %s after close %d, before %d" % (name, side, k, c[k], b[k]))
if errors:
    print("FAIL: scale over %s: %s" % (tls, "; ".join(errors)))
    sys.exit(1)
print("ok: scale over %s, 16 and 2 x 5,000 comms in every close order: per-comm costs and the "
      "state after close within bounds" % tls)
EOF_PY
done

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
