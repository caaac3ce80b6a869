#!/usr/bin/env bash
# ci/gpu-bundle.sh [BUILD_DIR]: packs an already built plugin and every shared library it needs
# (apart from glibc) into .gpu-bundle/, an ignored folder small enough to be carried to a GPU
# machine that has no UCX (see docs/gpu-check.md and ci/gpu-check.sh). Builds nothing.
#
# Layout:
#   .gpu-bundle/lib/libnccl-net-pact.so   the plugin (debug info stripped, symbol table kept)
#   .gpu-bundle/bin/pact-gpu-memory-check the GPU memory check (tests/gpu/gpu_memory_check.cpp)
#   .gpu-bundle/bin/{pact-perf,pact-ucp-bw,pact-info,ucx_perftest}  the benchmarks and facts
#                                         ci/device-perf.sh uses on a machine with more cores (when
#                                         the build has perf/; ucx_perftest is the one of the UCX
#                                         the plugin links)
#   .gpu-bundle/lib/<soname>              UCX (libucp, libuct, libucs, libucm), libsodium, libnuma...
#   .gpu-bundle/lib/ucx/lib{uct,ucm}_<m>.so.0  UCX's loadable modules for TCP, shared memory and
#                                         CUDA (tcp, posix and sysv live inside libuct in most
#                                         builds; the ones that exist as modules, e.g. cma, and
#                                         the cuda ones of a CUDA-enabled UCX, are copied)
#   .gpu-bundle/lib/compat/               libstdc++.so.6 and libgcc_s.so.1 of this machine, only
#                                         used by ci/gpu-check.sh when the target's are too old
#   .gpu-bundle/MANIFEST                  where everything came from, versions needed, checksums
#
# Every file is a plain copy named by its soname (no symbolic links), so the folder survives any
# copy. Environment: PACT_UCX_MODULE_SRC overrides the UCX module folder to copy from (default:
# the ucx/ folder beside the libucs the plugin links). For the GPU memory check, bundle the build
# against the CUDA-enabled UCX (ci/gpu-bundle.sh build-ucx122): Debian's UCX 1.13 has no CUDA.
# The CUDA driver's own libraries (libcuda.so.1, libnvidia-ml.so.1) come from the target.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
plugin=$build/plugin/libnccl-net-pact.so
bundle=.gpu-bundle
check_bin=$build/tests/gpu/pact-gpu-memory-check
# UCX modules worth carrying: TCP, shared memory and CUDA (no ib, rdmacm, rocm, gdrcopy).
ucx_modules=(tcp posix sysv cma xpmem knem cuda)
# Provided by the GPU machine's driver, never carried.
driver_re='^(libcuda|libnvidia-ml)\.so'
# glibc itself comes from the target (the plugin needs at most the GLIBC_ version shown below).
glibc_re='^(linux-vdso|linux-gate|ld-linux[^/]*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libmvec)\.so'
# The C++ runtime goes to lib/compat: the target's own copy is normally newer and must win.
compat_re='^(libstdc\+\+|libgcc_s)\.so'

die() { echo "gpu-bundle: $*" >&2; exit 1; }

[ -f "$plugin" ] || die "$plugin is missing: build it first (meson compile -C $build)"
[ -f "$check_bin" ] || die "$check_bin is missing: build it first (meson compile -C $build)"
ucx_src=${PACT_UCX_MODULE_SRC:-$(dirname "$(ldd "$plugin" | awk '$1 == "libucs.so.0" { print $3 }')")/ucx}
for tool in ldd strip objdump sha256sum; do
  command -v "$tool" > /dev/null || die "$tool not found"
done
newer=$(find src plugin include -newer "$plugin" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.def' -o -name '*.map' \) 2> /dev/null | head -5)
if [ -n "$newer" ]; then
  echo "gpu-bundle: WARNING: sources newer than $plugin (rebuild before bundling?):" >&2
  while read -r f; do echo "  $f"; done <<< "$newer" >&2
fi

rm -rf "$bundle"
mkdir -p "$bundle/lib/ucx" "$bundle/lib/compat" "$bundle/bin"

# Copies $1 (dereferenced) to $2 and strips the copy.
put() {
  local src=$1 dst=$2 how=${3:---strip-unneeded}
  cp -L "$src" "$dst"
  chmod u+w,a+r "$dst"
  strip "$how" "$dst" 2> /dev/null || echo "gpu-bundle: note: could not strip $dst (kept as is)" >&2
}

# "soname path" lines for every library ldd resolves for the given files; dies on "not found".
deps() {
  local f out
  for f in "$@"; do
    out=$(ldd "$f" | grep -Ev '^\s*(libcuda|libnvidia-ml)\.so[.0-9]* => not found') || die "ldd $f failed"
    if grep -q 'not found' <<< "$out"; then
      die "ldd $f: $(grep 'not found' <<< "$out" | tr -s ' \t' ' ' | paste -sd ';')"
    fi
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<< "$out"
  done
}

# The plugin: debug info goes (it is most of the file), the symbol table stays for backtraces.
put "$plugin" "$bundle/lib/libnccl-net-pact.so" --strip-debug
put "$check_bin" "$bundle/bin/pact-gpu-memory-check"

# The benchmarks, where this build has them (-Dperf=true), with the UCX's own ucx_perftest.
tools=()
perftest=$(dirname "$ucx_src")/../bin/ucx_perftest
[ -x "$perftest" ] || perftest=$(command -v ucx_perftest || true)
for t in "$build/perf/pact-perf" "$build/perf/pact-ucp-bw" "$build/perf/pact-info" "$perftest"; do
  [ -n "$t" ] && [ -x "$t" ] || continue
  put "$t" "$bundle/bin/$(basename "$t")"
  tools+=("$t")
done

modules=()
for m in "${ucx_modules[@]}"; do
  for kind in uct ucm; do
    f=$ucx_src/lib${kind}_$m.so.0
    [ -e "$f" ] || continue
    put "$f" "$bundle/lib/ucx/lib${kind}_$m.so.0"
    modules+=("$f")
  done
done

# First resolution wins: the plugin's own (its rpath names the UCX it was built with), then the
# check's, then the modules' (a CUDA module's build-machine rpath may resolve another UCX).
deplist=$(deps "$plugin" "$check_bin" "${tools[@]}" "${modules[@]}" | awk '!seen[$1]++') || exit 1
declare -A copied=()
while read -r soname path; do
  [ -n "$soname" ] || continue
  [[ -v "copied[$soname]" ]] && continue
  if [[ $soname =~ $glibc_re || $soname =~ $driver_re ]]; then
    continue
  elif [[ $soname =~ $compat_re ]]; then
    put "$path" "$bundle/lib/compat/$soname"
    copied[$soname]="$path -> lib/compat/"
  else
    put "$path" "$bundle/lib/$soname"
    copied[$soname]="$path -> lib/"
  fi
done <<< "$deplist"

for need in libucp.so.0 libuct.so.0 libucs.so.0 libucm.so.0; do
  [ -f "$bundle/lib/$need" ] || die "$need did not end up in the bundle (ldd did not list it)"
done

# What the target must provide itself: the highest version each kind of reference asks for
# (objdump's "Version References"), over everything shipped outside lib/compat.
max_version() {  # max_version PREFIX FILE...
  local f
  for f in "${@:2}"; do
    objdump -p "$f" | awk '/^Version References:/ { on = 1; next } on && /^[^ ]/ { on = 0 } on { print $NF }'
  done 2> /dev/null | grep -E "^$1_[0-9][0-9.]*$" | sort -uV | tail -1
}
mapfile -t shipped < <(find "$bundle/lib" -path "$bundle/lib/compat" -prune -o -type f -name '*.so*' -print | sort)
glibc_need=$(max_version GLIBC "${shipped[@]}")
glibcxx_need=$(max_version GLIBCXX "${shipped[@]}")
cxxabi_need=$(max_version CXXABI "${shipped[@]}")

{
  echo "pact GPU bundle"
  echo "created:  $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
  echo "commit:   $(git rev-parse HEAD 2> /dev/null || echo unknown)$(git diff --quiet HEAD -- src plugin include meson.build 2> /dev/null || echo ' (+ uncommitted changes)')"
  echo "plugin:   $plugin ($(stat -c %y "$plugin"))"
  echo "ucx:      $(ldd "$plugin" | awk '$1 == "libucp.so.0" { print $3 }') (modules from $ucx_src)"
  echo "target must provide: glibc >= ${glibc_need#GLIBC_}; libstdc++ with ${glibcxx_need:-none} and ${cxxabi_need:-none} (else lib/compat is used)"
  echo "ucx modules: ${modules[*]:-none (tcp, posix, sysv are built into libuct)}"
  echo "copied (glibc left to the target):"
  for s in "${!copied[@]}"; do echo "  $s <= ${copied[$s]}"; done | sort
  echo "sha256:"
  (cd "$bundle" && find lib -type f | sort | xargs sha256sum | sed 's/^/  /')
} > "$bundle/MANIFEST"

# Self-sufficiency: with only the bundle on the search path, nothing may be missing.
check=$(env -i LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle/lib/libnccl-net-pact.so" "$bundle"/bin/* \
  "$bundle"/lib/ucx/*.so.0 2>&1 | grep -Ev '^\s*(libcuda|libnvidia-ml)\.so[.0-9]* => not found' || true)
if grep -q 'not found' <<< "$check"; then
  echo "$check" >&2
  die "the bundle is not self-sufficient (see 'not found' above)"
fi

size_kib=$(du -sk "$bundle" | cut -f1)
limit_kib=$((60 * 1024))
(cd "$bundle" && find . -type f | sort | xargs ls -l | awk '{ printf "  %9d  %s\n", $5, $9 }')
echo "gpu-bundle: $bundle is $((size_kib / 1024)).$(((size_kib % 1024) * 10 / 1024)) MiB ($size_kib KiB) from $plugin"
echo "gpu-bundle: target needs glibc >= ${glibc_need#GLIBC_}, ${glibcxx_need:-no GLIBCXX}, ${cxxabi_need:-no CXXABI}"
[ "$size_kib" -lt "$limit_kib" ] || die "bundle too large (limit 60 MiB)"
