#!/usr/bin/env bash
# perf/ucx-versions.sh [RUNS]: where the CUDA-enabled UCX 1.22 (build-ucx122, the libucx-cu12
# wheel in .venv) behaves differently from Debian's UCX 1.13 (build), on the three points
# docs/plugin.md records for 1.13. Run after ci/test.sh has built both. Prints one line per probe
# and build; the figures go to the closing notes and docs/plugin.md.
#   1. tcp, a peer SIGKILLed under zero-copy rendezvous sends: the abi suite's peer-failure cases
#      over tcp with UCX's default zero-copy threshold (UCX_ZCOPY_THRESH=auto: pact itself turns
#      zero-copy off under 1.13, docs/plugin.md), RUNS runs per build;
#      counts runs that failed and those where the survivor aborted in UCX (an assertion).
#   2. shared memory: whether the transports offer the peer-failure error mode (pact logs "ucx
#      transports lack peer-failure handling" when they do not).
#   3. tcp put against tag bandwidth, 1 MiB, with each UCX's own ucx_perftest (RUNS rounds,
#      interleaved, medians).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
export UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo
wheel=$(.venv/bin/python -c 'import libucx, os; print(os.path.dirname(libucx.__file__))' 2> /dev/null) || wheel=""
[ -d build-ucx122 ] && [ -n "$wheel" ] || { echo "ucx-versions: build-ucx122 or the wheel is missing (ci/test.sh)"; exit 1; }

for b in build build-ucx122; do
  failed=0 aborted=0
  for ((i = 0; i < runs; ++i)); do
    log=$(UCX_TLS=tcp UCX_ZCOPY_THRESH=auto PACT_PLUGIN_PATH=$PWD/$b/plugin/libnccl-net-pact.so timeout 300 \
      "$b/tests/abi/abi_test" --gtest_filter='*PeerFailure*' 2>&1)
    rc=$?
    [ $rc = 0 ] || failed=$((failed + 1))
    grep -q 'Assertion' <<< "$log" && aborted=$((aborted + 1))
  done
  echo "1. $b tcp peer death, default zcopy: $failed of $runs runs failed, $aborted with a UCX assertion"
done

for b in build build-ucx122; do
  log=$(UCX_TLS=sm PACT_LOG_LEVEL=info PACT_TEST_VERBOSE=1 PACT_PLUGIN_PATH=$PWD/$b/plugin/libnccl-net-pact.so timeout 120 \
    "$b/tests/abi/abi_test" --gtest_filter='Versions/Transfer.*/v12' 2>&1)
  if grep -q 'lack peer-failure handling' <<< "$log"; then
    echo "2. $b shared memory: no peer-failure error mode (the session alone detects peer death)"
  else
    echo "2. $b shared memory: peer-failure error mode available"
  fi
done

# ucx_perftest: server in the background, client against it; prints MB/s (MiB/s) of the final line.
perftest() {  # perftest BIN LIBDIR TEST
  local bin=$1 libdir=$2 test=$3 port=$((20000 + RANDOM % 20000))
  LD_LIBRARY_PATH=$libdir UCX_TLS=tcp "$bin" -p "$port" > /dev/null 2>&1 &
  local server=$!
  local out
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    out=$(LD_LIBRARY_PATH=$libdir UCX_TLS=tcp timeout 60 "$bin" 127.0.0.1 -p "$port" -t "$test" -s 1048576 -n 2000 2>&1) && break
    out=""
    sleep 0.2  # the server is not listening yet
  done
  kill "$server" 2> /dev/null
  wait "$server" 2> /dev/null
  awk '/Final:/ { print $(NF-2) }' <<< "$out"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : "n/a") }'; }
for pair in "1.13:$(command -v ucx_perftest):" "1.22:$wheel/bin/ucx_perftest:$wheel/lib"; do
  IFS=: read -r name bin libdir <<< "$pair"
  put=() tag=()
  for ((i = 0; i < runs; ++i)); do
    put+=("$(perftest "$bin" "$libdir" ucp_put_bw)")
    tag+=("$(perftest "$bin" "$libdir" tag_bw)")
  done
  echo "3. ucx $name tcp 1 MiB: put $(printf '%s\n' "${put[@]}" | median) MB/s, tag $(printf '%s\n' "${tag[@]}" | median) MB/s (medians of $runs)"
done
