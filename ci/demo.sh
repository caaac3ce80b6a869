#!/usr/bin/env bash
# The main job: installs, builds, then runs a two-process loopback transfer through the plugin's
# NCCL ABI (pact-perf p2p drives libnccl-net-pact.so exactly as NCCL's proxy would) and prints a
# bandwidth / latency table, once over TCP and once over shared memory.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${PACTCI_SKIP_SETUP:-0}" != 1 ]; then
  ci/setup.sh > /tmp/pact-setup.log 2>&1 || { cat /tmp/pact-setup.log; exit 1; }
fi
ci/build.sh build > /tmp/pact-build.log 2>&1 || { cat /tmp/pact-build.log; exit 1; }
export UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo
build/perf/pact-info
for tls in tcp sm; do
  echo
  echo "== UCX_TLS=$tls: two processes, NCCL net ABI v12, loopback =="
  UCX_TLS=$tls build/perf/pact-perf p2p --plugin build/plugin/libnccl-net-pact.so \
    -b 8 -e 64M -f 8 --budget 128M --lat-max-size 1M
done
