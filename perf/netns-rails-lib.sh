# Shared by perf/netns-rails.sh, perf/netns-engine-rails.sh and perf/netns-mix.sh (sourced):
# what every one of them starts with (where ci/netns.sh and the build are, the netns suite's lock,
# die(), the checks of its settings, the gate of `ci/netns.sh check`, the work directory and the
# trap that cleans up), building and removing the veth rails (two pairs unless told) under that
# lock, and a clean environment for the cases.
# Set before sourcing: here (the source tree) and NETNS_SCRIPT (the script's name, e.g.
# netns-mix.sh: it begins every message). netns_work sets work, built, lockfd and the variables
# that hold the pids of the runs in flight; rails_up / rails_down keep built and lockfd.

# shellcheck disable=SC2154  # here: set by the caller
NETNS=$here/ci/netns.sh
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$here/$BUILD
LOCK=/run/lock/pact-netns.lock
LOCK_WAIT=${LOCK_WAIT:-300}

die() { echo "$NETNS_SCRIPT: $1" >&2; exit "${2:-1}"; }

# need_positive VAR...: each a positive integer, or exit 2.
need_positive() {
  local v
  for v in "$@"; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'" 2
  done
}

# need_built BIN [PLUGIN]: the built program (and the plugin it runs), and python3 for the
# summary, or exit 2.
need_built() {
  [[ -x $1 ]] || die "no $1 (build first: meson setup $BUILD && ninja -C $BUILD)" 2
  [[ -z ${2:-} || -r $2 ]] || die "no plugin $2" 2
  command -v python3 >/dev/null || die "python3 is needed for the summary" 2
}

# Exits 77 with the reason when `ci/netns.sh check` says that namespaces are unavailable.
# netns_args FLAG VAR ARGS...: the script's one option (FLAG DIR, into the variable VAR) and
# -h/--help (the script's header comment, up to `set -Eeuo`); anything else exits 2.
netns_args() {
  local flag=$1 var=$2
  shift 2
  while (($#)); do
    case $1 in
      "$flag") printf -v "$var" '%s' "${2:?$flag needs a directory}"; shift 2 ;;
      -h|--help) sed -n '2,/^set -Eeuo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument '$1' (see --help)" 2 ;;
    esac
  done
}

netns_check() {
  local why
  if ! why=$(timeout 60 "$NETNS" check 2>&1); then
    echo "$NETNS_SCRIPT: cannot run: ${why:-ci/netns.sh check failed}" >&2
    exit 77
  fi
}

# netns_work KEEP PID_VARS FILE...: the work directory $work (/tmp/pact-<script>.XXXXXX) and the
# EXIT / INT / TERM trap that, whatever ends the script, stops the runs in flight (the pids held
# by the variables named in PID_VARS, space-separated: each run's `timeout` passes the signal on),
# removes the namespaces when built, releases the lock, copies the FILEs (globs in $work) into
# the directory KEEP unless it is empty, removes $work and exits with the script's status (130 on
# INT, 143 on TERM).
netns_work() {
  netns_keep=$1 netns_pid_vars=$2
  shift 2
  netns_files=("$@")
  work=$(mktemp -d "/tmp/pact-${NETNS_SCRIPT%.sh}.XXXXXX")
  built=0
  lockfd=""
  local v
  for v in $netns_pid_vars; do printf -v "$v" '%s' ""; done
  trap netns_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}
netns_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local v p pids=() files=()
  for v in $netns_pid_vars; do [[ -z ${!v} ]] || pids+=("${!v}"); done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if ((built)); then
    timeout 60 "$NETNS" down >/dev/null 2>&1 || echo "$NETNS_SCRIPT: ci/netns.sh down failed" >&2
  fi
  [[ -n $lockfd ]] && exec {lockfd}>&-
  if [[ -n $netns_keep && -d $work ]]; then
    # shellcheck disable=SC2206  # $p: a glob, expanded in $work
    for p in "${netns_files[@]}"; do files+=("$work"/$p); done
    mkdir -p "$netns_keep" && cp "${files[@]}" "$netns_keep"/ 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$rc"
}

# At the start of a round: whether DEADLINE s have passed since $start; then it says so (after
# $rounds_done rounds) and sets failed=1.
past_deadline() {
  ((SECONDS - start > DEADLINE)) || return 1
  echo "$NETNS_SCRIPT: DEADLINE ($DEADLINE s) passed; stopping after $rounds_done round(s)" >&2
  failed=1
}

# run_failed ROUND NAME RC LOG JSON: a pact-perf run that exited RC (124: killed by its timeout
# after RUN_TIMEOUT s): failed=1, its JSON removed, why and the last lines of its output on stderr.
run_failed() {
  local round=$1 name=$2 rc=$3 log=$4 json=$5
  failed=1
  rm -f "$json"
  local why="exit $rc"
  ((rc != 124)) || why="killed after $RUN_TIMEOUT s"
  echo "  round $round $name FAILED ($why); last lines:" >&2
  tail -n 8 "$log" | sed 's/^/    /' >&2
}

# up [--pairs N] OPTIONS... under the suite's lock (two pairs unless told); down releases it.
rails_up() {
  local pairs=2
  if [[ ${1:-} == --pairs ]]; then pairs=${2:?--pairs needs a value}; shift 2; fi
  exec {lockfd}>"$LOCK"
  flock -w "$LOCK_WAIT" "$lockfd" || die "$LOCK is held by another run for more than $LOCK_WAIT s"
  built=1
  local out
  out=$(timeout 60 "$NETNS" up --pairs "$pairs" "$@" 2>&1) || die "ci/netns.sh up --pairs $pairs $*: $out"
}
rails_down() {
  local out
  out=$(timeout 60 "$NETNS" down 2>&1) || die "ci/netns.sh down: $out"
  built=0
  exec {lockfd}>&-
  lockfd=""
}

# Only what the cases set: no PACT_* / UCX_* from the caller's environment.
clean_env() {
  while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(PACT|UCX)_' || true)
  export UCX_TLS=tcp
}

# need_rate RATE: tc's rate syntax (1gbit, 400mbit), or exit 2; BASH_REMATCH holds the number
# ([1]) and the unit ([3]).
need_rate() {
  [[ $1 =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit)$ ]] || die "bad RATE '$1' (e.g. 1gbit, 400mbit)" 2
}

# RATE/4 in the same unit (1gbit -> 250000kbit): the default SLOW_RATE.
quarter_rate() {
  need_rate "$1"
  awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" 'BEGIN {
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9
    printf "%dkbit\n", n * m[u] / 4 / 1000 }'
}
