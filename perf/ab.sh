#!/usr/bin/env bash
# Interleaved A/B comparison of two pact builds on a noisy machine: medians over rounds, B/A.
#
# usage: perf/ab.sh [--rounds N] [--base REV | --same] [--env-b "VAR=VALUE ..."] [--quick] [--engine]
#                   [--out FILE.md]
#   A = release build of REV (default: `git merge-base HEAD origin/main`, else HEAD~1), checked
#       out with `git worktree add --detach /tmp/pact-ab/base REV` (reused, or moved to REV, when
#       present) and built in /tmp/pact-ab/base-build.
#   B = release build of this working tree (uncommitted changes included) in /tmp/pact-ab/head-build.
#   Both: meson setup -Dbuildtype=release -Dtests=false (perf stays on), then ninja.
#   --rounds N   rounds (default 6); round r runs A then B when r is even, B then A when odd
#   --same       A is this working tree's build too: the sides differ only by --env-b
#   --env-b VARS extra environment for B's runs (e.g. "PACT_METRICS_FILE=/tmp/m.prom")
#   --quick      smoke test: 2 rounds, 2000 latency iterations, 64M bandwidth budget, kv 2 s
#   --engine     the engine only: single-block transfers of 16K, 256K and 2M (pact-perf kv
#                --prefill 1 --decode 1 --blocks-per-request 1) and the 8-to-16 KV scenario
#   --out FILE   markdown report (default /tmp/pact-ab/report.md); also printed
# Each round, for each build:
#   - plugin 8 B ping-pong latency, UCX_TLS=tcp and UCX_TLS=sm: pact-perf p2p --no-bw
#     --lat-min-size 8 --lat-max-size 8 --lat-iters 20000 (one-way P50 = RTT/2, lat_p50_us)
#   - plugin bandwidth at 1M and 16M, tcp and sm, NCCL's pattern: pact-perf p2p --no-lat
#     --window 8 --buffers 0 (0 = a distinct registered buffer per outstanding slot), GB/s measured
#     at the receiver (bw_gbps)
#   - engine KV scenario: pact-perf kv --prefill 8 --decode 16 --seconds 5 (goodput_gbps and
#     p99_commit_us); kv runs under the caller's UCX_TLS (unset = UCX's choice)
# UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo always; every run has a timeout. A failed run is a warning
# and a '-' in the report. Raw JSON and logs stay in /tmp/pact-ab/runs/<time>/.
# environment: AB_DIR=/tmp/pact-ab  RUN_TIMEOUT=180 (seconds per p2p run; kv gets seconds+120)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
ab=${AB_DIR:-/tmp/pact-ab}
rounds=6 base='' quick=0 out=$ab/report.md same=0 env_b=
lat_iters=20000 budget=256M kv_seconds=5 run_timeout=${RUN_TIMEOUT:-180}
usage() { sed -n '4,17p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
engine=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=${2:?--rounds needs N}; shift 2 ;;
    --base) base=${2:?--base needs REV}; shift 2 ;;
    --quick) quick=1; shift ;;
    --engine) engine=1; shift ;;
    --same) same=1; shift ;;
    --env-b) env_b=${2:?--env-b needs VARS}; shift 2 ;;
    --out) out=${2:?--out needs FILE}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "ab.sh: unknown argument $1" >&2; usage ;;
  esac
done
if [[ $quick == 1 ]]; then rounds=2 lat_iters=2000 budget=64M kv_seconds=2; fi
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: --rounds must be a positive integer" >&2; exit 2; }
export UCX_NET_DEVICES=lo PACT_NET_DEVICES=lo

cd "$here"
if ((same)); then base=HEAD; fi
if [[ -z $base ]]; then
  if git rev-parse -q --verify origin/main >/dev/null; then base=$(git merge-base HEAD origin/main)
  else base=HEAD~1; fi
fi
sha=$(git rev-parse -q --verify "$base^{commit}") || { echo "ab.sh: bad revision $base" >&2; exit 2; }
mkdir -p "$ab"

# ---- A: a detached worktree at REV (--same: none) -------------------------------------------------
wt=$ab/base
if ((same)); then
  :
elif [[ -e $wt ]]; then
  if [[ $(git -C "$wt" rev-parse HEAD 2>/dev/null) != "$sha" ]]; then
    [[ -z $(git -C "$wt" status --porcelain) ]] || { echo "ab.sh: $wt has local changes" >&2; exit 1; }
    git -C "$wt" checkout -q --detach "$sha"
  fi
else
  git worktree add -q --detach "$wt" "$sha"
fi

srcdir_of() {  # the source dir a meson build dir was set up from
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["directories"]["source"])' \
    "$1/meson-info/meson-info.json" 2>/dev/null || true
}
build() {  # build SRC DIR; (re)configures DIR when it is missing, half set up, or from elsewhere
  if [[ ! -f $2/build.ninja || $(srcdir_of "$2") != "$(cd "$1" && pwd -P)" ]]; then
    rm -rf "$2"
    meson setup "$2" "$1" -Dbuildtype=release -Dtests=false -Dperf=true >"$ab/setup-$(basename "$2").log" ||
      { cat "$ab/setup-$(basename "$2").log" >&2; exit 1; }
  fi
  echo "== ninja -C $2" >&2
  timeout 3600 ninja -C "$2" >&2
}
((same)) || build "$wt" "$ab/base-build"
build "$here" "$ab/head-build"
declare -A dir=([A]=$ab/base-build [B]=$ab/head-build)
((same)) && dir[A]=$ab/head-build
head_desc="working tree at $(git rev-parse --short HEAD)"
[[ -z $(git status --porcelain --untracked-files=no) ]] || head_desc+=" + uncommitted changes"
a_desc="$base ($(git rev-parse --short "$sha"))"
((same)) && a_desc=$head_desc
[[ -z $env_b ]] || head_desc+=", with $env_b"
read -r -a benv <<<"$env_b"

# ---- interleaved rounds -------------------------------------------------------------------------
raw=$ab/runs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$raw"
run() {  # run TAG TIMEOUT CMD...: writes $raw/TAG.json (via --json) and $raw/TAG.log
  local tag=$1 t=$2; shift 2
  local rc=0
  timeout "$t" "$@" --json "$raw/$tag.json" >"$raw/$tag.log" 2>&1 || rc=$?
  if ((rc)); then
    echo "warning: $tag failed (rc $rc), see $raw/$tag.log" >&2
    rm -f "$raw/$tag.json"
  fi
}
for ((r = 0; r < rounds; r++)); do
  order="A B"; ((r % 2 == 0)) || order="B A"
  for x in $order; do
    echo "== round $((r + 1))/$rounds: $x" >&2
    perf=${dir[$x]}/perf/pact-perf plugin=${dir[$x]}/plugin/libnccl-net-pact.so
    xenv=(); [[ $x == B ]] && xenv=("${benv[@]}")
    for tls in tcp sm; do
      ((engine)) && break
      run "r${r}_${x}_lat_$tls" "$run_timeout" env "${xenv[@]}" UCX_TLS=$tls "$perf" p2p --plugin "$plugin" \
        --no-bw --lat-min-size 8 --lat-max-size 8 --lat-iters "$lat_iters"
      run "r${r}_${x}_bw_$tls" "$run_timeout" env "${xenv[@]}" UCX_TLS=$tls "$perf" p2p --plugin "$plugin" \
        --no-lat --window 8 --buffers 0 --min-size 1M --max-size 16M --factor 16 --budget "$budget"
    done
    run "r${r}_${x}_kv" $((kv_seconds + 120)) env "${xenv[@]}" "$perf" kv --prefill 8 --decode 16 --seconds "$kv_seconds"
    if ((engine)); then
      for size in 16K 256K 2M; do
        run "r${r}_${x}_kv1_$size" $((kv_seconds + 120)) env "${xenv[@]}" "$perf" kv --prefill 1 --decode 1 \
          --blocks-per-request 1 --block-size "$size" --seconds "$kv_seconds"
      done
    fi
  done
done

# ---- report -------------------------------------------------------------------------------------
mkdir -p "$(dirname "$out")"
python3 - "$raw" "$rounds" "$a_desc" "$head_desc" "$quick" "$engine" >"$out" <<'EOF'
import json, os, statistics, sys
raw, rounds, a_desc, b_desc, quick, engine = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]

def load(tag):
    try:
        with open(os.path.join(raw, tag + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def p2p(test, size, key):
    def get(doc):
        for row in doc.get("results", []):
            if row.get("size") == size and row.get(key) is not None:
                return row[key]
    return test, get

kv = lambda key, test="kv": (test, lambda doc: doc.get(key))
metrics = [] if engine == "1" else [  # name, better, (file, extractor)
    ("plugin lat 8B tcp P50 (us)", "lower", p2p("lat_tcp", 8, "lat_p50_us")),
    ("plugin lat 8B sm P50 (us)", "lower", p2p("lat_sm", 8, "lat_p50_us")),
    ("plugin bw 1M tcp (GB/s)", "higher", p2p("bw_tcp", 1 << 20, "bw_gbps")),
    ("plugin bw 16M tcp (GB/s)", "higher", p2p("bw_tcp", 16 << 20, "bw_gbps")),
    ("plugin bw 1M sm (GB/s)", "higher", p2p("bw_sm", 1 << 20, "bw_gbps")),
    ("plugin bw 16M sm (GB/s)", "higher", p2p("bw_sm", 16 << 20, "bw_gbps")),
]
metrics += [
    ("kv goodput (GB/s)", "higher", kv("goodput_gbps")),
    ("kv P99 commit (us)", "lower", kv("p99_commit_us")),
]
if engine == "1":
    for size in ("16K", "256K", "2M"):
        metrics += [(f"engine 1 block {size} goodput (GB/s)", "higher", kv("goodput_gbps", "kv1_" + size)),
                    (f"engine 1 block {size} P50 commit (us)", "lower", kv("p50_commit_us", "kv1_" + size))]
fmt = lambda v: "-" if v is None else (f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}")
print(f"# pact A/B{' (quick)' if quick == '1' else ''}\n")
print(f"- A: {a_desc}\n- B: {b_desc}\n- rounds: {rounds} (A first on even rounds); raw: {raw}\n")
print("| metric | better | A median | B median | B/A | A per round | B per round |")
print("|---|---|---:|---:|---:|---|---|")
for name, better, (test, get) in metrics:
    vals, meds = {}, {}
    for x in "AB":
        vals[x] = [None if (d := load(f"r{r}_{x}_{test}")) is None else get(d) for r in range(rounds)]
        got = [v for v in vals[x] if v is not None]
        meds[x] = statistics.median(got) if got else None
    ratio = f"{meds['B'] / meds['A']:.3f}" if meds["A"] and meds["B"] is not None else "-"
    per = {x: ", ".join(fmt(v) for v in vals[x]) for x in "AB"}
    print(f"| {name} | {better} | {fmt(meds['A'])} | {fmt(meds['B'])} | {ratio} | {per['A']} | {per['B']} |")
EOF
cat "$out"
