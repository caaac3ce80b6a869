# Shared by perf/netns-rails.sh, perf/netns-engine-rails.sh and perf/netns-mix.sh (sourced):
# building and removing the veth rails (two pairs unless told) under the netns suite's lock, and a
# clean environment for the cases.
# Uses the caller's NETNS, LOCK, LOCK_WAIT, die(), and its lockfd / built variables.

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

# RATE/4 in the same unit (1gbit -> 250000kbit): the default SLOW_RATE.
quarter_rate() {
  [[ $1 =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit)$ ]] || die "bad RATE '$1' (e.g. 1gbit, 400mbit)" 2
  awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" 'BEGIN {
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9
    printf "%dkbit\n", n * m[u] / 4 / 1000 }'
}
