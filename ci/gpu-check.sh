#!/usr/bin/env bash
# ci/gpu-check.sh: the one-shot GPU check of the NCCL net plugin (docs/gpu-check.md). Run from the
# repository root on the GPU machine, with .gpu-bundle/ (made by ci/gpu-bundle.sh) carried along:
#   1. facts about the machine: GPU, driver, glibc, python, torch and its NCCL;
#   2. load the bundled plugin with ctypes (adding lib/compat only if the system's C++ runtime is
#      too old for it), ldd it against the bundle alone, and bring it up once over UCX;
#   3. bin/pact-gpu-memory-check under `timeout 120` (tests/gpu/gpu_memory_check.cpp): real device
#      memory, its dmabuf exported by the driver, registered through the plugin ABI (regMrDmaBuf),
#      a transfer into it with iflush, the bytes copied back from the device and compared;
#   4. tests/gpu/nccl_allreduce.py under `timeout 240`: two NCCL ranks on the one GPU, all their
#      traffic through the plugin.
# Everything printed goes to $OUT/gpu-check.log too; the ranks' NCCL logs and results.jsonl land
# in $OUT as well (4 files). OUT defaults to /tmp/gpu-out; PACT_GPU_BUNDLE to .gpu-bundle.
# Exit: 0 pass, 77 skipped (no CUDA device), anything else failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-/tmp/gpu-out}
bundle=${PACT_GPU_BUNDLE:-.gpu-bundle}
mkdir -p "$OUT" || { echo "gpu-check: cannot create OUT=$OUT" >&2; exit 1; }
rm -f "$OUT/gpu-check.log" "$OUT/nccl-rank0.log" "$OUT/nccl-rank1.log" "$OUT/results.jsonl"

section() { echo; echo "== $* =="; }
have() { command -v "$1" > /dev/null 2>&1; }
# Loads the plugin with LD_LIBRARY_PATH=$1 exactly, in a fresh python (the dynamic loader reads
# the variable once, at start).
load_with() {
  env LD_LIBRARY_PATH="$1" UCX_MODULE_DIR="$lib/ucx" timeout 60 \
    python3 -c 'import ctypes; ctypes.CDLL("libnccl-net-pact.so")'
}

main() {
  echo "pact GPU check: $(date -u +%Y-%m-%dT%H:%M:%SZ), OUT=$OUT"
  if [ ! -f "$bundle/lib/libnccl-net-pact.so" ]; then
    echo "GPU-CHECK FAIL: $bundle/lib/libnccl-net-pact.so missing: run ci/gpu-bundle.sh BUILD_DIR on" \
      "the build machine and carry $bundle along"
    return 1
  fi
  lib=$(cd "$bundle/lib" && pwd -P)
  [ -f "$bundle/MANIFEST" ] && sed -n '/^sha256:/q; s/^/  /p' "$bundle/MANIFEST"

  section "machine"
  uname -srm
  ldd --version 2>&1 | head -1
  if have nvidia-smi; then
    timeout 30 nvidia-smi -L
    timeout 30 nvidia-smi --query-gpu=name,driver_version,compute_mode,memory.total,memory.used \
      --format=csv
  else
    echo "nvidia-smi: not installed"
  fi
  local ifs=(/sys/class/net/*)
  echo "network interfaces: ${ifs[*]##*/}"
  echo "/dev/shm: $(df -h /dev/shm 2> /dev/null | awk 'NR == 2 { print $2 " total, " $4 " free" }')"
  echo "ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2> /dev/null || echo n/a)"
  local stdcxx
  stdcxx=$( (ldconfig -p 2> /dev/null || true) | awk '/libstdc\+\+\.so\.6 .*x86-64/ { print $NF; exit }')
  if [ -n "$stdcxx" ]; then
    echo "system libstdc++: $stdcxx, newest $(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$stdcxx" | sort -uV | tail -1)"
  else
    echo "system libstdc++: not in the ldconfig cache"
  fi

  section "python, torch, NCCL"
  have python3 || { echo "GPU-CHECK FAIL: python3 not found"; return 1; }
  python3 --version
  timeout 120 python3 - << 'EOF'
try:
    import torch
except ImportError as e:
    print(f"torch: not importable ({e})")
else:
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuda available: {torch.cuda.is_available()}")
    try:
        v = torch.cuda.nccl.version()
        print("NCCL (torch.cuda.nccl.version()):", ".".join(map(str, v)) if isinstance(v, tuple) else v)
    except Exception as e:  # noqa: BLE001
        print(f"NCCL version: unavailable ({e})")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            print(f"cuda:{i}: {torch.cuda.get_device_name(i)}")
EOF
  echo "(torch probe exit code $?)"

  section "plugin load (ctypes, bundle only)"
  local use
  if load_with "$lib"; then
    use=$lib
    echo "loaded with LD_LIBRARY_PATH=$lib"
  else
    echo "-- not loadable with the bundle alone; trying with $lib/compat (this machine's C++ runtime is older)"
    if load_with "$lib:$lib/compat"; then
      use=$lib:$lib/compat
      echo "loaded with LD_LIBRARY_PATH=$use"
    else
      echo "GPU-CHECK FAIL: libnccl-net-pact.so does not load, not even with lib/compat"
      return 1
    fi
  fi
  local deps
  deps=$(env -i LD_LIBRARY_PATH="$use" ldd "$lib/libnccl-net-pact.so" 2>&1)
  echo "$deps"
  if grep -q 'not found' <<< "$deps"; then
    echo "GPU-CHECK FAIL: ldd reports missing libraries"
    return 1
  fi

  export LD_LIBRARY_PATH="$use${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$lib/ucx"
  export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} PACT_NET_DEVICES=${PACT_NET_DEVICES:-lo}
  echo "UCX_MODULE_DIR=$UCX_MODULE_DIR UCX_NET_DEVICES=$UCX_NET_DEVICES" \
    "PACT_NET_DEVICES=$PACT_NET_DEVICES UCX_TLS=${UCX_TLS:-<UCX chooses>}"

  section "plugin smoke (init + devices, no NCCL)"
  timeout 60 python3 tests/gpu/nccl_allreduce.py --plugin-smoke --bundle-lib "$lib"
  local smoke=$?
  [ "$smoke" = 0 ] || echo "-- plugin smoke exit code $smoke (going on: the NCCL run shows more)"

  section "GPU memory through the plugin ABI (real driver, real device memory)"
  local gpumem=1
  if [ -x "$bundle/bin/pact-gpu-memory-check" ]; then
    timeout -k 5 120 "$bundle/bin/pact-gpu-memory-check" "$lib/libnccl-net-pact.so"
    gpumem=$?
    case $gpumem in
      0) ;;
      77) echo "-- GPU memory check skipped (no usable driver or GPU)" ;;
      *) echo "-- GPU memory check exit code $gpumem" ;;
    esac
  else
    echo "-- $bundle/bin/pact-gpu-memory-check missing (an older bundle?)"
  fi

  section "NCCL: two ranks on one GPU through the plugin"
  timeout -k 10 240 python3 tests/gpu/nccl_allreduce.py --out "$OUT" --bundle-lib "$lib"
  local rc=$?
  echo
  # The GPU memory check counts: a pass needs both (a skip of it only where NCCL skipped too).
  if [ "$rc" = 0 ] && [ "$gpumem" != 0 ]; then
    echo "GPU-CHECK FAIL: NCCL passed but the GPU memory check did not (exit $gpumem)"
    return 1
  fi
  case $rc in
    0) echo "GPU-CHECK PASS" ;;
    77) echo "GPU-CHECK SKIP: no CUDA device" ;;
    124 | 137) echo "GPU-CHECK FAIL: the NCCL check overran 240 s and was killed" ;;
    *) echo "GPU-CHECK FAIL: the NCCL check exited with $rc" ;;
  esac
  [ "$smoke" = 0 ] || [ "$rc" != 0 ] || echo "GPU-CHECK note: the plugin smoke failed although NCCL passed"
  case $rc in 0 | 77) return "$rc" ;; *) return 1 ;; esac
}

main "$@" 2>&1 | tee "$OUT/gpu-check.log"
rc=${PIPESTATUS[0]}
files=("$OUT"/*)
echo "gpu-check: files in $OUT: ${files[*]##*/}"
exit "$rc"
