#!/usr/bin/env bash
# Installs every Debian package that pact's build, tests and tools need, then the project's own
# Python venv (<repo>/.venv) holding NVIDIA's CUDA-enabled UCX wheel, the second UCX that
# ci/test.sh builds and tests against (build-ucx122, meson -Ducx_prefix=...), and what the pact
# Python package needs to build and test in place (python/requirements-dev.txt). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ucx_wheel=libucx-cu12==1.22.0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(
  # build
  gcc g++ meson ninja-build pkg-config
  # second UCX: the libucx-cu12 wheel in a venv, found through its cmake package
  python3 python3-venv cmake
  # the pact Python package (python/): headers for its extension; nanobind etc. come from PyPI
  python3-dev
  # UCX (data path) and rdma-core (optional device facts)
  libucx-dev ucx-utils libibverbs-dev librdmacm-dev rdma-core
  # libraries used instead of hand-written ones
  libcli11-dev nlohmann-json3-dev libisal-dev libxxhash-dev libsodium-dev
  # tests
  libgtest-dev libgmock-dev clang libclang-rt-14-dev llvm
  # netns / fault harness, tools
  iproute2 nftables procps kmod
  # the Python package's discovery tests start a real etcd v3
  etcd-server
  # pact-perf coll under mpirun (the coll test launches 4 ranks with it)
  openmpi-bin
  # the metrics test scrapes PACT_METRICS_PORT with a real Prometheus
  prometheus
)
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}"

# The wheel's UCX (include/, lib/, lib/cmake/ucx) lands in .venv/lib/python3.*/site-packages/libucx.
venv=$root/.venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('${ucx_wheel%%==*}') != '${ucx_wheel##*==}')" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input "$ucx_wheel"
fi

# The Python package's build and test requirements (nanobind, pytest, numpy; pinned).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input -r python/requirements-dev.txt
