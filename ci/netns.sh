#!/usr/bin/env bash
# ci/netns.sh: two network namespaces joined by veth pairs, with optional rate limits and random
# loss, for tests that need real (if virtual) network links between two processes on one machine.
#
# Usage:
#   ci/netns.sh up [--pairs N] [--rate RATE] [--slow-rate RATE] [--loss PCT]
#       Removes any leftovers of an earlier run (see `down`), then builds:
#         namespaces  pactA and pactB, loopback up in both;
#         veth pairs  pair i (0 <= i < N): pa<i> in pactA with 10.77.<i>.1/24,
#                     pb<i> in pactB with 10.77.<i>.2/24, both up.
#       --pairs N        number of veth pairs, 1..16 (default 1).
#       --rate RATE      tbf rate limit on the egress of BOTH ends of every pair (each direction is
#                        limited separately). RATE is a number with a unit: bit, kbit, mbit, gbit
#                        (decimal, as tc reads them), e.g. 200mbit or 1gbit; at least 8kbit.
#                        Bucket: max(5 ms of traffic, 128 KiB); queue: 100 ms. Default: no limit.
#       --slow-rate RATE tbf rate on both ends of pair 0 only (overrides --rate there), so that
#                        pair 0 is slower than the others. Default: none.
#       --loss PCT       random loss on pair 0, both directions, PCT percent of packets (skbs, which
#                        are GSO-sized on veth) dropped: 0 < PCT <= 100, up to two decimals
#                        (--loss 1 = 1%, --loss 0.5 = 0.5%). Done with an nftables rule on the input
#                        hook of each namespace (iifname pa0 / pb0, `numgen random`), so the drop
#                        happens at the receiver as on a lossy wire: the sender's TCP only sees
#                        missing ACKs. (netem does not exist on this kernel.) Default: no loss.
#       On any error during `up`, everything built so far is removed again and the exit status is 1.
#   ci/netns.sh down
#       Deletes the namespaces pactA and pactB, which destroys every veth, qdisc and nftables rule
#       in them (`up` creates each veth end directly inside its namespace, so nothing is ever left
#       in the caller's namespace). Idempotent: succeeds when nothing is there.
#   ci/netns.sh link IDX up|down
#       Sets pa<IDX> (in pactA) and pb<IDX> (in pactB) down or up: a cut cable, seen by both ends
#       (carrier off). `up` waits (bounded, 5 s) until both ends are operationally UP again and puts
#       back any address or connected route of the pair that is missing, so that the pair carries
#       traffic as after `up`; its rate limit (tbf) survives the down. Idempotent.
#   ci/netns.sh blackhole IDX on|off
#       `on` drops every packet that arrives on pa<IDX> or pb<IDX>, in both namespaces, so nothing
#       crosses pair IDX in either direction while both links stay UP with carrier: a black hole,
#       not a cut. Done with nftables (table inet pact_hole, chain in<IDX>, input hook) at the
#       receiving end only, as the --loss rule does: a drop on the output hook would hand the
#       sender EPERM, which no real black hole does. ARP is not filtered (it is not inet), so the
#       neighbours stay resolved and only the packets vanish. `off` removes the pair's rule (and
#       the table once it is empty). Both are idempotent.
#   ci/netns.sh run A|B CMD [ARGS...]
#       Runs CMD inside pactA or pactB (ip netns exec: own /sys view of that namespace) and exits
#       with its status.
#   ci/netns.sh check
#       Exits 0 when namespaces can be used here: root, `ip` and `tc` present, and a probe
#       namespace (pactprobe<pid>) with a veth pair inside can be created and deleted. Otherwise
#       prints the reason on stderr and exits 77 (the "skipped" status of meson/automake).
#   ci/netns.sh status
#       Prints the namespaces, their links, addresses, qdiscs and nftables rules (diagnostics).
#
# Everything this script creates carries the names above (pactA, pactB, pa<i>, pb<i>,
# pactprobe<pid>, nftables tables `pact_loss` and `pact_hole` inside the namespaces); it never touches the host's
# own interfaces, addresses or routes. Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN), iproute2
# (ip, tc) and, for --loss and blackhole, nft.
set -Eeuo pipefail

NS_A=pactA
NS_B=pactB
MAX_PAIRS=16

die() { echo "netns.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -Eeuo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

# Rate with a tc unit -> bits per second (integer). Rejects anything else.
rate_bits() {
  local r=$1
  [[ $r =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit)$ ]] ||
    die "bad rate '$r': expected a number with unit bit, kbit, mbit or gbit (e.g. 200mbit)"
  local mult
  case ${BASH_REMATCH[3]} in
    bit) mult=1 ;; kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;;
  esac
  local bits
  bits=$(awk -v n="${BASH_REMATCH[1]}" -v m="$mult" 'BEGIN { printf "%d\n", n * m }')
  ((bits >= 8000)) || die "rate '$r' is below 8kbit"
  echo "$bits"
}

# tbf on one link's egress. The bucket holds max(5 ms of traffic, 128 KiB): at least two full
# 64 KiB GSO skbs (smaller buckets make tbf split them), small enough that the long-run rate is
# the configured one. Queue: 100 ms of traffic.
add_tbf() {
  local ns=$1 dev=$2 rate=$3 bits burst
  bits=$(rate_bits "$rate")
  burst=$(( bits / 8 / 200 ))
  (( burst < 131072 )) && burst=131072
  ip -n "$ns" link show "$dev" >/dev/null
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
}

cmd_down() {
  local ns
  for ns in "$NS_A" "$NS_B"; do
    if ns_exists "$ns"; then
      ip netns del "$ns" || die "could not delete namespace $ns"
    fi
  done
  # The names are free at once; a namespace that a leftover process still holds lives on
  # unnamed, with its veths, and cannot clash with the next `up`.
  if ns_exists "$NS_A" || ns_exists "$NS_B"; then die "namespaces still present after delete"; fi
}

cmd_up() {
  local pairs=1 rate="" slow="" loss=""
  while (($#)); do
    case $1 in
      --pairs) pairs=${2:?--pairs needs a value}; shift 2 ;;
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --slow-rate) slow=${2:?--slow-rate needs a value}; shift 2 ;;
      --loss) loss=${2:?--loss needs a value}; shift 2 ;;
      -h|--help) usage ;;
      *) die "unknown option '$1' for up (see the top of $0)" ;;
    esac
  done
  if ! [[ $pairs =~ ^[0-9]+$ ]] || ((pairs < 1 || pairs > MAX_PAIRS)); then
    die "--pairs must be 1..$MAX_PAIRS, got '$pairs'"
  fi
  [[ -z $rate ]] || rate_bits "$rate" >/dev/null
  [[ -z $slow ]] || rate_bits "$slow" >/dev/null
  if [[ -n $loss ]]; then
    if ! [[ $loss =~ ^[0-9]+(\.[0-9]{1,2})?$ ]] ||
       ! awk -v p="$loss" 'BEGIN { exit !(p > 0 && p <= 100) }'; then
      die "--loss must be a percentage in (0, 100] with up to two decimals, got '$loss'"
    fi
    command -v nft >/dev/null || die "--loss needs nft (nftables)"
  fi

  cmd_down
  trap 'echo "netns.sh: up failed at line $LINENO, removing what was built" >&2; trap - ERR; cmd_down || true; exit 1' ERR

  ip netns add "$NS_A"
  ip netns add "$NS_B"
  ip -n "$NS_A" link set lo up
  ip -n "$NS_B" link set lo up
  local i
  for ((i = 0; i < pairs; i++)); do
    # Created directly inside the namespaces: nothing ever appears in the caller's namespace.
    ip link add "pa$i" netns "$NS_A" type veth peer name "pb$i" netns "$NS_B"
    ip -n "$NS_A" addr add "10.77.$i.1/24" dev "pa$i"
    ip -n "$NS_B" addr add "10.77.$i.2/24" dev "pb$i"
    ip -n "$NS_A" link set "pa$i" up
    ip -n "$NS_B" link set "pb$i" up
    local r=$rate
    ((i == 0)) && [[ -n $slow ]] && r=$slow
    if [[ -n $r ]]; then
      add_tbf "$NS_A" "pa$i" "$r"
      add_tbf "$NS_B" "pb$i" "$r"
    fi
  done
  # Carrier and operstate of a new veth become UP asynchronously (the kernel's linkwatch batches
  # them, up to about a second); UCX lists only running interfaces, so wait for that, bounded.
  for ((i = 0; i < pairs; i++)); do
    wait_oper_up "$NS_A" "pa$i"
    wait_oper_up "$NS_B" "pb$i"
  done
  if [[ -n $loss ]]; then
    add_loss_in "$NS_A" pa0 "$loss"
    add_loss_in "$NS_B" pb0 "$loss"
  fi
  trap - ERR
}

wait_oper_up() {
  local ns=$1 dev=$2 t state
  for ((t = 0; t < 100; t++)); do
    state=$(ip -n "$ns" -br link show dev "$dev" | awk '{print $2}')
    [[ $state == UP ]] && return 0
    sleep 0.05
  done
  echo "netns.sh: $dev in $ns is still '$state' 5 s after being set up" >&2
  return 1
}

add_loss_in() {
  local ns=$1 dev=$2 pct=$3 per10k
  per10k=$(awk -v p="$pct" 'BEGIN { printf "%d\n", p * 100 + 0.5 }')
  ip netns exec "$ns" nft -f - <<EOF
table inet pact_loss {
  chain in {
    type filter hook input priority 0; policy accept;
    iifname "$dev" numgen random mod 10000 < $per10k counter drop
  }
}
EOF
}

# IDX of link/blackhole: a pair that `up` built (pa<IDX> in pactA and pb<IDX> in pactB).
check_pair() {
  local what=$1 idx=$2
  if ! [[ $idx =~ ^[0-9]+$ ]] || ((idx >= MAX_PAIRS)); then
    die "$what: IDX must be 0..$((MAX_PAIRS - 1)), got '$idx'"
  fi
  if ! ns_exists "$NS_A" || ! ns_exists "$NS_B"; then
    die "$what: namespaces absent (run '$0 up' first)"
  fi
  if ! ip -n "$NS_A" link show "pa$idx" >/dev/null 2>&1 ||
     ! ip -n "$NS_B" link show "pb$idx" >/dev/null 2>&1; then
    die "$what: pair $idx does not exist (built with fewer --pairs?)"
  fi
}

# The address `up` gave one end of pair idx, and its connected route, if missing. The kernel keeps
# addresses across down/up and adds the prefix route back on up, so this is normally a no-op; it
# keeps `link up` correct should something have removed them while the link was down.
ensure_addr() {
  local ns=$1 dev=$2 addr=$3 idx=$4
  if ! ip -n "$ns" -4 -o addr show dev "$dev" | grep -q " $addr/24 "; then
    ip -n "$ns" addr add "$addr/24" dev "$dev"
  fi
  if ! ip -n "$ns" -4 route show dev "$dev" | grep -q "^10\.77\.$idx\.0/24 "; then
    ip -n "$ns" route replace "10.77.$idx.0/24" dev "$dev" src "$addr"
  fi
}

cmd_link() {
  (($# == 2)) || die "link takes IDX and up|down, got: ${*:-nothing}"
  local idx=$1 state=$2
  [[ $state == up || $state == down ]] || die "link: state must be up or down, got '$state'"
  check_pair link "$idx"
  ip -n "$NS_A" link set "pa$idx" "$state"
  ip -n "$NS_B" link set "pb$idx" "$state"
  if [[ $state == up ]]; then
    wait_oper_up "$NS_A" "pa$idx"
    wait_oper_up "$NS_B" "pb$idx"
    ensure_addr "$NS_A" "pa$idx" "10.77.$idx.1" "$idx"
    ensure_addr "$NS_B" "pb$idx" "10.77.$idx.2" "$idx"
  fi
}

# One base chain per pair, so that on/off of one pair never touches another pair's rule. The
# chain is declared, flushed and filled in one nft transaction: `on` twice leaves one rule.
hole_on() {
  local ns=$1 dev=$2 idx=$3
  ip netns exec "$ns" nft -f - <<EOF
table inet pact_hole {
  chain in$idx { type filter hook input priority -10; policy accept; }
}
flush chain inet pact_hole in$idx
add rule inet pact_hole in$idx iifname "$dev" counter drop
EOF
}

hole_off() {
  local ns=$1 idx=$2
  if ip netns exec "$ns" nft list chain inet pact_hole "in$idx" >/dev/null 2>&1; then
    # A chain must be empty before it can be deleted.
    ip netns exec "$ns" nft -f - <<EOF
flush chain inet pact_hole in$idx
delete chain inet pact_hole in$idx
EOF
  fi
  if ip netns exec "$ns" nft list table inet pact_hole >/dev/null 2>&1 &&
     ! ip netns exec "$ns" nft list table inet pact_hole | grep -q '^[[:space:]]*chain '; then
    ip netns exec "$ns" nft delete table inet pact_hole
  fi
}

cmd_blackhole() {
  (($# == 2)) || die "blackhole takes IDX and on|off, got: ${*:-nothing}"
  local idx=$1 state=$2
  [[ $state == on || $state == off ]] || die "blackhole: state must be on or off, got '$state'"
  command -v nft >/dev/null || die "blackhole needs nft (nftables)"
  check_pair blackhole "$idx"
  if [[ $state == on ]]; then
    hole_on "$NS_A" "pa$idx" "$idx"
    hole_on "$NS_B" "pb$idx" "$idx"
  else
    hole_off "$NS_A" "$idx"
    hole_off "$NS_B" "$idx"
  fi
}

cmd_run() {
  local which=${1:-}
  shift || true
  local ns
  case $which in
    A) ns=$NS_A ;; B) ns=$NS_B ;;
    *) die "run: first argument must be A or B, got '$which'" ;;
  esac
  (($#)) || die "run: no command given"
  ns_exists "$ns" || die "run: namespace $ns does not exist (run '$0 up' first)"
  exec ip netns exec "$ns" "$@"
}

cmd_check() {
  local why=""
  if [[ $(id -u) != 0 ]]; then
    why="not root (uid $(id -u)): network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN"
  elif ! command -v ip >/dev/null; then
    why="'ip' (iproute2) is not installed"
  elif ! command -v tc >/dev/null; then
    why="'tc' (iproute2) is not installed"
  else
    local probe="pactprobe$$" out
    if ! out=$(ip netns add "$probe" 2>&1); then
      why="'ip netns add' failed: $out"
    else
      if ! out=$(ip -n "$probe" link add pactprobe0 type veth peer name pactprobe1 2>&1); then
        why="veth pairs cannot be created in a namespace: $out"
      fi
      ip netns del "$probe" 2>/dev/null || true
    fi
  fi
  if [[ -n $why ]]; then
    echo "netns.sh check: network namespaces unavailable: $why" >&2
    exit 77
  fi
  echo "netns.sh check: network namespaces available"
}

cmd_status() {
  local ns
  for ns in "$NS_A" "$NS_B"; do
    if ! ns_exists "$ns"; then echo "$ns: absent"; continue; fi
    echo "== $ns"
    ip -n "$ns" -br addr
    tc -n "$ns" qdisc show | grep -v 'noqueue' || true
    ip netns exec "$ns" nft list ruleset 2>/dev/null || true
  done
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) shift; (($# == 0)) || die "down takes no arguments"; cmd_down ;;
  link) shift; cmd_link "$@" ;;
  blackhole) shift; cmd_blackhole "$@" ;;
  run) shift; cmd_run "$@" ;;
  check) shift; cmd_check ;;
  status) shift; cmd_status ;;
  -h|--help|help) usage ;;
  *) echo "netns.sh: unknown or missing command '${1:-}'" >&2; usage ;;
esac
