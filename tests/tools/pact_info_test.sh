#!/usr/bin/env bash
# pact-info: a malformed PACT_* variable prints the registry's one-line error and exits 2; a good
# configuration prints every variable and class. Usage: pact_info_test.sh PATH_TO_PACT_INFO
set -u
info=$1
fail=0
expect_error() {  # VAR VALUE EXPECTED_LINE
  out=$(env "$1=$2" "$info" --no-devices 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 2 ] || [ "$out" != "pact-info: $3" ]; then
    echo "FAIL: $1='$2': rc=$rc, stderr: $out"; echo "      expected: pact-info: $3"; fail=1
  else
    echo "ok: $1='$2' -> $3"
  fi
}
expect_error PACT_EPOCH abc "invalid PACT_EPOCH='abc': expected an unsigned 64-bit integer"
expect_error PACT_TC_1 lanes=0 "invalid PACT_TC_1='lanes=0': 'lanes=0': expected an integer from 1 to 16"
expect_error PACT_FAULT drop=2 "invalid PACT_FAULT='drop=2': 'drop=2': expected a probability from 0 to 1"
expect_error PACT_FAULT flood=1 "invalid PACT_FAULT='flood=1': 'flood=1': unknown fault; expected drop, dup, corrupt, reject, lose_remote_done, stall, delay, lane_fail, epoch_skew, kill_after or seed"
expect_error PACT_AUTH_KEY_FILE /nonexistent "invalid PACT_AUTH_KEY_FILE='/nonexistent': cannot read: No such file or directory (expected a readable file of 16 to 4096 bytes (the shared secret), or empty)"
expect_error PACT_TC_FOO rc "invalid PACT_TC_FOO='rc': 'FOO': expected a class DEFAULT, KV, A2A, CTRL, CKPT or a number from 0 to 255"

out=$(PACT_TC_7="unordered,lanes=4" PACT_FAULT="delay=lane1:5ms" "$info" --no-devices 2>&1); rc=$?
for want in "PACT_TC_7 " "order=unordered,lanes=4" "PACT_FAULT               delay=lane1:5ms,seed=1" "PACT_PEER_TIMEOUT" \
    "FAULT INJECTION ACTIVE: delay=lane1:5ms,seed=1" "authentication           off"; do
  case "$out" in *"$want"*) ;; *) echo "FAIL: good configuration: missing '$want' (rc=$rc)"; fail=1 ;; esac
done
[ $rc -eq 0 ] || { echo "FAIL: good configuration exited $rc"; fail=1; }

# Engine classes on different services resolve to different contexts (as the engine opens them).
out=$(PACT_TC_KV="service=rc" PACT_TC_A2A="service=ud" "$info" --no-probe 2>&1); rc=$?
# DEFAULT's context as the engine opens it (its eager offers whole: larger tcp segments) is
# its "engine" line; the plugin's is the "context" line.
ctx() { printf '%s\n' "$out" | awk -v c="  $1 (" -v k="${2:-context}" 'index($0, c) == 1 {f=1} f && $1 == k {print $2; exit}'; }
kv=$(ctx KV); a2a=$(ctx A2A); def=$(ctx DEFAULT engine); ctrl=$(ctx CTRL)
if [ $rc -ne 0 ] || [ -z "$kv" ] || [ "$kv" = "$a2a" ] || [ "$kv" = "$def" ] || [ "$ctrl" != "$def" ]; then
  echo "FAIL: engine class contexts: KV '$kv' A2A '$a2a' DEFAULT '$def' CTRL '$ctrl' (rc=$rc)"; fail=1
else
  echo "ok: engine class contexts: KV $kv, A2A $a2a, DEFAULT and CTRL $def"
fi

# The tcp settings pact gives UCX (docs/performance.md), and the user's own value winning.
out=$(env -u UCX_TLS PACT_NET_DEVICES=lo UCX_TCP_TX_SEG_SIZE=16K "$info" --no-probe 2>&1); rc=$?
for want in "UCX_TCP_RX_SEG_SIZE=256K" "UCX_TCP_TX_SEG_SIZE=16K (set by the user; wins over 32K)"; do
  case "$out" in *"$want"*) echo "ok: tcp settings: '$want'" ;; *) echo "FAIL: tcp settings: missing '$want' (rc=$rc)"; fail=1 ;; esac
done

# The counter registry: every scope's catalog, documented, and the process set live.
out=$("$info" --counters 2>&1); rc=$?
for want in "engine:" "committed " "credit_stall_ns" "comm:" "retransmits" "device:" "process:" \
    "live process process (pact-info): plugin_faults_injected=0" "sessions" "endpoints" "closes_abandoned"; do
  case "$out" in *"$want"*) ;; *) echo "FAIL: --counters: missing '$want' (rc=$rc)"; fail=1 ;; esac
done

# maxComms and what bounds it: tag spaces or memory, never descriptors (one per peer, not per comm).
out=$(PACT_NET_DEVICES=lo "$info" 2>&1); rc=$?
case "$out" in
  *"maxComms "*": bound by "*"descriptors bound peer processes, not comms"*) echo "ok: maxComms names its bound" ;;
  *) echo "FAIL: pact-info does not say what bounds maxComms (rc=$rc)"; fail=1 ;;
esac

# --version: pact's release, the UCX it runs on, the plugin's ABI tables, the engine's C API.
out=$("$info" --version 2>&1); rc=$?
if [ $rc -eq 0 ] && [[ $out =~ ^pact-info\ [0-9]+\.[0-9]+\.[0-9]+ ]] && [[ $out == *"UCX 1."*"(built against 1."* ]] &&
    [[ $out == *"ncclNetPlugin_v8 to ncclNetPlugin_v12"* ]] && [[ $out == *"engine C API: v"* ]]; then
  echo "ok: --version names pact, UCX, the ABIs"
else
  echo "FAIL: --version (rc=$rc): $out"; fail=1
fi

help=$("$info" --help 2>&1)
for want in PACT_NET_DEVICES PACT_EPOCH PACT_TC_DEFAULT PACT_FAULT PACT_AUTH_KEY_FILE PACT_TRACE_EVENTS "steer"; do
  case "$help" in *"$want"*) ;; *) echo "FAIL: --help does not document $want"; fail=1 ;; esac
done
[ $fail -eq 0 ] && echo "pact-info checks passed"
exit $fail
