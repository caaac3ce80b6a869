# Shared by perf/netns-rails.sh and perf/netns-engine-rails.sh (sourced): building and removing
# the two-pair veth rails under the netns suite's lock, and a clean environment for the cases.
# Uses the caller's NETNS, LOCK, LOCK_WAIT, die(), and its lockfd / built variables.

# up OPTIONS... under the suite's lock; down releases it.
rails_up() {
  exec {lockfd}>"$LOCK"
  flock -w "$LOCK_WAIT" "$lockfd" || die "$LOCK is held by another run for more than $LOCK_WAIT s"
  built=1
  local out
  out=$(timeout 60 "$NETNS" up --pairs 2 "$@" 2>&1) || die "ci/netns.sh up --pairs 2 $*: $out"
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
