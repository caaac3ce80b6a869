#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, runs every meson suite, then the
# Address/UndefinedBehavior sanitizer run of the unit and abi suites. Ends with one line
# "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "${PACTCI_SKIP_SETUP:-0}" != 1 ]; then
  ci/setup.sh > /tmp/pact-setup.log 2>&1 || { cat /tmp/pact-setup.log; echo "0 passed, 1 failed"; exit 1; }
fi
ci/build.sh build || { echo "0 passed, 1 failed"; exit 1; }

# Hermetic: loopback only, whatever the host's interfaces.
export UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo

status=0
meson test -C build --print-errorlogs --num-processes 1 || status=1

if [ "${PACTCI_SKIP_ASAN:-0}" != 1 ]; then
  ci/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
    || { echo "0 passed, 1 failed"; exit 1; }
  meson test -C build-asan --setup asan --suite unit --suite abi --suite integration --suite fault \
    --print-errorlogs --num-processes 1 \
    || status=1
fi

# libFuzzer targets of every wire codec, bounded time each (clang from Debian).
fuzz_passed=0 fuzz_failed=0
if [ "${PACTCI_SKIP_FUZZ:-0}" != 1 ]; then
  while read -r line; do
    echo "$line"
    case "$line" in
      "fuzz "*": ok"*) fuzz_passed=$((fuzz_passed + 1)) ;;
      "fuzz "*": FAILED"*) fuzz_failed=$((fuzz_failed + 1)); status=1 ;;
    esac
  done < <(ci/fuzz.sh "${PACTCI_FUZZ_SECONDS:-20}" 2>&1 || true)
  [ $((fuzz_passed + fuzz_failed)) -eq 3 ] || { echo "fuzz: build failed"; fuzz_failed=$((fuzz_failed + 1)); status=1; }
fi

EXTRA_PASSED=$fuzz_passed EXTRA_FAILED=$fuzz_failed python3 "$root/ci/summary.py" build/meson-logs/testlog.json \
  $( [ "${PACTCI_SKIP_ASAN:-0}" != 1 ] && echo build-asan/meson-logs/testlog-asan.json )
exit $status
