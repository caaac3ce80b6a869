#!/usr/bin/env bash
# perf/peer-death.sh [ROUNDS] [RUNS]: a peer's death never kills a survivor, at stress scale, on
# both UCX builds (run after ci/test.sh has built them). Three parts per build:
#   1. engine groups: tests/fault/group_death_test with ROUNDS rounds (default 300), each four
#      engine processes stepping an all-to-all group with one rank SIGKILLed, over tcp and over
#      shared memory; and engine connections: tests/fault/connect_death_test with ROUNDS rounds,
#      one side of a connect leaving or SIGKILLed right after it, or while it is made;
#   2. plugin comms: the abi suite's peer-death cases (ten sender/receiver-dies shapes per NCCL
#      version) RUNS times (default 50) over tcp, with UCX's settings as a user has them.
# Prints one line per part and build: rounds or runs, failures, and how many of them were a
# survivor aborting inside UCX (an assertion or signal 6). The figures go to docs/plugin.md and
# the closing notes.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-300}
runs=${2:-50}
export UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for b in build build-ucx122; do
  [ -x "$b/tests/fault/group_death_test" ] || { echo "peer-death: $b is not built (ci/test.sh)"; exit 1; }
  for tls in tcp sm; do
    UCX_TLS=$tls GROUP_DEATH_ROUNDS=$rounds timeout 3600 "$b/tests/fault/group_death_test" > "$log" 2>&1
    failed=$(grep -c '^\[  FAILED  \] Rounds/.* ms)$' "$log")
    aborted=$(grep -c 'killed by signal 6' "$log")  # one line per survivor that aborted
    echo "1. $b engine group, $tls: $rounds rounds, $failed failed, $aborted survivor aborts in UCX"
    UCX_TLS=$tls CONNECT_DEATH_ROUNDS=$rounds timeout 3600 "$b/tests/fault/connect_death_test" > "$log" 2>&1
    failed=$(grep -c '^\[  FAILED  \] Rounds/.* ms)$' "$log")
    aborted=$(grep -c 'killed by signal 6' "$log")  # one line per survivor that aborted
    echo "1. $b engine connect, $tls: $rounds rounds, $failed failed, $aborted survivor aborts in UCX"
  done
  failed=0 aborted=0
  for ((i = 0; i < runs; ++i)); do
    UCX_TLS=tcp PACT_PLUGIN_PATH=$PWD/$b/plugin/libnccl-net-pact.so timeout 300 \
      "$b/tests/abi/abi_test" --gtest_filter='*PeerFailure*' > "$log" 2>&1 || failed=$((failed + 1))
    grep -q 'Assertion' "$log" && aborted=$((aborted + 1))
  done
  echo "2. $b plugin comms, tcp: $runs runs of the peer-death cases, $failed failed, $aborted with a UCX assertion"
done
