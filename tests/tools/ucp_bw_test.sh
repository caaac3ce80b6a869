#!/usr/bin/env bash
# pact-ucp-bw (the raw-UCP baseline of perf/compare-ucx.sh): in both buffer patterns and both
# error modes it prints one row per size with a positive bandwidth and writes the JSON file;
# bad arguments are refused with a message. Usage: ucp_bw_test.sh PATH_TO_PACT_UCP_BW
set -u
bin=$1
fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for args in "--buffers 0" "--buffers 1" "--buffers 0 --peer-errors"; do
  # shellcheck disable=SC2086  # $args: separate words on purpose
  out=$(UCX_TLS=tcp timeout 60 "$bin" --min-size 64K --max-size 256K --budget 4M --timeout 30 $args \
        --json "$tmp/r.json" 2>&1); rc=$?
  rows=$(printf '%s\n' "$out" | awk '$1 ~ /^(64K|128K|256K)$/ && $2 > 0 {n++} END {print n + 0}')
  if [ $rc -ne 0 ] || [ "$rows" != 3 ] || ! grep -q '"bw_gbps"' "$tmp/r.json"; then
    echo "FAIL: pact-ucp-bw $args: rc=$rc rows=$rows"; printf '%s\n' "$out"; fail=1
  else
    echo "ok: pact-ucp-bw $args: $rows sizes"
  fi
  rm -f "$tmp/r.json"
done
# Every sub-check ends in a verdict: refused (nonzero) naming the option, or FAIL.
out=$(timeout 30 "$bin" --window 0 2>&1); rc=$?
if [ $rc -ne 0 ] && [[ $out == *"--window must be >= 1"* ]]; then
  echo "ok: --window 0 refused"
else
  echo "FAIL: --window 0: rc=$rc (want nonzero and '--window must be >= 1'): $out"; fail=1
fi
[ $fail -eq 0 ] && echo "ok: pact-ucp-bw"
exit $fail
