#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, checks the docs (ci/docs_check.py), runs
# every meson suite (against Debian's UCX 1.13 in build/, then against the libucx-cu12 wheel's
# UCX 1.22 in build-ucx122/), then the Address/UndefinedBehavior sanitizer run of the unit and abi
# suites. Ends with one line "N passed, N failed". PACTCI_SKIP_{SETUP,UCX122,ASAN,FUZZ}=1 leave a
# part out; PACTCI_UCX122_TEST_ARGS narrows the UCX 1.22 run (meson test arguments, e.g.
# "--suite abi").
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# Each part's wall time is printed ("time: PART N s") so that the 45-minute budget can be
# watched part by part.
mark=$SECONDS
took() { echo "time: $1 $((SECONDS - mark)) s"; mark=$SECONDS; }

if [ "${PACTCI_SKIP_SETUP:-0}" != 1 ]; then
  ci/setup.sh > /tmp/pact-setup.log 2>&1 || { cat /tmp/pact-setup.log; echo "0 passed, 1 failed"; exit 1; }
  took setup
fi
# Compile time is most of this script's run on a 2-core machine, so the two UCX builds are made
# without debug info (-O2; test code -Og, tests/meson.build) and the sanitizer build without the
# benchmark tools its suites do not run; only that build keeps -g (for its reports). A developer
# wanting -g back: meson configure build -Ddebug=true. All three are unity builds (-Dunity=on:
# a target's files compiled four to a translation unit, a quarter less compile time; the plugin,
# pact-perf and the abi and netns test binaries opt out, their files repeat local names). Two
# files of one target that clash as one unit fail here first: -Dunity=on reproduces it.
# The main build also builds the pact Python package for the venv's interpreter (suite "python").
ci/build.sh build -Dunity=on -Ddebug=false -Dpython=enabled -Dpython_exe="$root/.venv/bin/python" || { echo "0 passed, 1 failed"; exit 1; }
took "build (UCX 1.13)"
status=0

# The docs check (seconds): every relative link and #anchor of the Markdown resolves, every
# Markdown file named in the text exists, no line names one machine's path, and every
# pact-info/pact-perf command in a fenced block uses only options the built tools list. It counts
# as one check; with the tools built, a problem fails it (never a skip).
docs_passed=0 docs_failed=0
if python3 ci/docs_check.py --build build --require-build; then
  docs_passed=1
else
  echo "docs check: FAILED"
  docs_failed=1 status=1
fi

# Hermetic: loopback only, whatever the host's interfaces.
export UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo

meson test -C build --print-errorlogs --num-processes 1 || status=1
took "tests (UCX 1.13)"

# The same suites against NVIDIA's CUDA-enabled UCX 1.22 (the libucx-cu12 wheel that ci/setup.sh
# installs into .venv), taken through its cmake package and an rpath (meson -Ducx_prefix).
ucx122_logs=() ucx122_failed=0 ucx122_skipped=0
if [ "${PACTCI_SKIP_UCX122:-0}" != 1 ]; then
  ucx122_prefix=$("$root/.venv/bin/python" -c 'import libucx, os; print(os.path.dirname(libucx.__file__))' 2>/dev/null) \
    || ucx122_prefix=""
  if [ -n "$ucx122_prefix" ] && [ -f "$ucx122_prefix/lib/cmake/ucx/ucx-config.cmake" ]; then
    # The Python package too: its suite runs against this UCX as well.
    if ci/build.sh build-ucx122 -Dunity=on -Ddebug=false -Ducx_prefix="$ucx122_prefix" -Dpython=enabled \
         -Dpython_exe="$root/.venv/bin/python"; then
      took "build (UCX 1.22)"
      rm -f build-ucx122/meson-logs/testlog.json build-ucx122/python/pytest.xml  # no stale results
      # shellcheck disable=SC2086  # PACTCI_UCX122_TEST_ARGS: extra meson test words, e.g. "--suite abi"
      meson test -C build-ucx122 --print-errorlogs --num-processes 1 ${PACTCI_UCX122_TEST_ARGS:-} || status=1
      took "tests (UCX 1.22)"
      ucx122_logs=(build-ucx122/meson-logs/testlog.json)
      [ -f build-ucx122/python/pytest.xml ] && ucx122_logs+=(build-ucx122/python/pytest.xml)
    else
      echo "ucx 1.22: build failed"
      ucx122_failed=1 status=1
    fi
  else
    echo "ucx 1.22: skipped (no libucx-cu12 wheel in $root/.venv; ci/setup.sh installs it)"
    ucx122_skipped=1
  fi
fi

if [ "${PACTCI_SKIP_ASAN:-0}" != 1 ]; then
  ci/build.sh build-asan -Dunity=on -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Dperf=false \
    || { echo "0 passed, 1 failed"; exit 1; }
  took "build (sanitizers)"
  meson test -C build-asan --setup asan --suite unit --suite abi --suite integration --suite fault \
    --print-errorlogs --num-processes 1 \
    || status=1
  took "tests (sanitizers)"
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
  took fuzz
fi
echo "time: total $SECONDS s"

EXTRA_PASSED=$((fuzz_passed + docs_passed)) EXTRA_FAILED=$((fuzz_failed + ucx122_failed + docs_failed)) EXTRA_SKIPPED=$ucx122_skipped python3 "$root/ci/summary.py" \
  build/meson-logs/testlog.json build/python/pytest.xml "${ucx122_logs[@]}" \
  $( [ "${PACTCI_SKIP_ASAN:-0}" != 1 ] && echo build-asan/meson-logs/testlog-asan.json )
exit $status
