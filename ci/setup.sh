#!/usr/bin/env bash
# Installs every Debian package that pact's build, tests and tools need. Idempotent.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(
  # build
  gcc g++ meson ninja-build pkg-config
  # UCX (data path) and rdma-core (optional device facts)
  libucx-dev ucx-utils libibverbs-dev librdmacm-dev rdma-core
  # libraries used instead of hand-written ones
  libcli11-dev nlohmann-json3-dev libisal-dev libxxhash-dev libsodium-dev
  # tests
  libgtest-dev libgmock-dev clang libclang-rt-14-dev llvm
  # netns / fault harness, tools
  iproute2 nftables procps kmod
)
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}"
