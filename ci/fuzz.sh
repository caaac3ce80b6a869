#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan), writes each target's seed
# corpus with the real encoders, and runs each for a bounded time. Any crash, leak or sanitizer
# report fails. Usage: ci/fuzz.sh [SECONDS_PER_TARGET] (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
out=build-fuzz
mkdir -p "$out"
CXX=${CXX_FUZZ:-clang++}
flags=(-std=c++20 -O1 -g -I. -Isrc -Wall -Wextra -Werror)
common=(src/common/status.cpp src/common/log.cpp)
libs=(-lsodium)  # auth.cpp (PACT_AUTH_KEY_FILE)
declare -A srcs=(
  [wire_fuzz]="src/transport/wire.cpp src/transport/seal.cpp"
  [control_fuzz]="src/engine/control.cpp src/transport/wire.cpp src/transport/seal.cpp"
  [params_fuzz]="src/transport/params.cpp src/transport/profile.cpp src/common/parse.cpp src/common/fault.cpp src/common/auth.cpp"
)
status=0
for t in wire_fuzz control_fuzz params_fuzz; do
  # shellcheck disable=SC2086
  $CXX "${flags[@]}" -DPACT_FUZZ_SEEDS "tests/fuzz/$t.cpp" ${srcs[$t]} "${common[@]}" "${libs[@]}" -o "$out/$t-seeds"
  # shellcheck disable=SC2086
  $CXX "${flags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    "tests/fuzz/$t.cpp" ${srcs[$t]} "${common[@]}" "${libs[@]}" -o "$out/$t"
  rm -rf "$out/corpus-$t" && mkdir -p "$out/corpus-$t"
  "$out/$t-seeds" "$out/corpus-$t"
  if "$out/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      "$out/corpus-$t" > "$out/$t.log" 2>&1; then
    echo "fuzz $t: ok ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t.log" | grep -o '[0-9]*$') runs in ${secs}s)"
  else
    echo "fuzz $t: FAILED"; tail -40 "$out/$t.log"; status=1
  fi
done
exit $status
