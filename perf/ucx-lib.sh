# Shared by perf/compare-ucx.sh and perf/coll-baseline.sh (sourced): the transport and binaries
# they compare, their work directory, and ucx_perftest on loopback. The caller defines die().

# perf_env TLS: exports UCX_TLS (TLS, else $UCX_TLS, else tcp) and the loopback device variables,
# and sets tls, here (the tree), BUILD, PACT_PERF, UCP_BW and PLUGIN (each overridable from outside).
perf_env() {
  tls=${1:-${UCX_TLS:-tcp}}
  export UCX_TLS=$tls
  export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
  export PACT_NET_DEVICES=${PACT_NET_DEVICES:-lo}
  BUILD=${BUILD:-$here/build}
  PACT_PERF=${PACT_PERF:-$BUILD/perf/pact-perf}
  UCP_BW=${UCP_BW:-$BUILD/perf/pact-ucp-bw}
  PLUGIN=${PLUGIN:-$BUILD/plugin/libnccl-net-pact.so}
}

# perf_workdir: out = $OUT (kept) or a temporary directory (removed at exit); a started
# ucx_perftest server is killed at exit.
perf_workdir() {
  if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT"; out=$OUT; else out=$(mktemp -d); fi
  server_pid=
  trap perf_cleanup EXIT
  trap 'exit 130' INT TERM
}
perf_cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  [[ -n ${OUT:-} ]] || rm -rf "$out"
}

# listening PORT: true while a TCP socket listens on PORT (ss where installed, else /proc/net/tcp*,
# whose states are hex: 0A is LISTEN; a lent machine may have no iproute2).
listening() {
  if command -v ss >/dev/null; then
    ss -ltn "sport = :$1" | grep -q LISTEN
  else
    awk -v p="$(printf '%04X' "$1")" 'FNR > 1 && $4 == "0A" && $2 ~ (":" p "$") { found = 1 } END { exit !found }' \
      /proc/net/tcp /proc/net/tcp6 2>/dev/null
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ucx_perftest_pair BATCH SERVER_LOG RESULT TIMEOUT: an ucx_perftest server and a client over
# 127.0.0.1 running the batch file's tests; the client's full report (-f -v) goes to RESULT.
ucx_perftest_pair() {
  local batch=$1 log=$2 result=$3 limit=$4 port tries=0
  port=$(free_port)
  ucx_perftest -p "$port" -b "$batch" > "$log" 2>&1 &
  server_pid=$!
  # Wait for the server's listening socket without connecting to it (it serves one client).
  until listening "$port"; do
    (( ++tries > 100 )) && die "ucx_perftest server did not start (see $log)"
    kill -0 "$server_pid" 2>/dev/null || die "ucx_perftest server exited: $(tail -3 "$log")"
    sleep 0.1
  done
  timeout "$limit" ucx_perftest 127.0.0.1 -p "$port" -b "$batch" -f -v > "$result" 2> "$result.err" ||
    die "ucx_perftest client failed: $(tail -3 "$result.err")"
  wait "$server_pid" || true
  server_pid=
}
