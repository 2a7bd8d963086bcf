#!/usr/bin/env bash
# The multi-host lab: hosts made of Linux network namespaces on this machine
# (docs/lab.md). Each host has its own network stack, one address on a
# private test subnet and one link to a switch, so traffic between hosts
# crosses a real link (with an optional bandwidth cap) that can be cut
# silently.
#
#   scripts/lab.sh up N [--rate RATE]   hosts cohort-h0..h(N-1), 10.77.0.1..N
#   scripts/lab.sh down                 removes every namespace the lab made
#                                       (and SIGKILLs what still runs in them)
#   scripts/lab.sh exec HOST -- CMD...  runs CMD inside HOST (h0, 0, cohort-h0)
#   scripts/lab.sh addr HOST            prints HOST's address
#   scripts/lab.sh partition HOST       cuts HOST's link at the switch: its
#                                       packets vanish, both ends stay up
#   scripts/lab.sh heal HOST            restores the link
#   scripts/lab.sh kill HOST            the host dies: its link is cut and
#                                       every process in it gets SIGKILL
#   scripts/lab.sh bytes HOST           bytes received and sent on HOST's link
#   scripts/lab.sh check                exit 0 when the lab can be made here,
#                                       else 77 with the reason on stderr
#
# The switch is a bridge inside its own namespace (cohort-lab-sw), so the
# machine's own network is never touched; each host's eth0 is one end of a
# veth pair whose other end is a port of that bridge. A partition disables
# the bridge port (STP state disabled): no carrier change, no error to
# either side, exactly a silent network. `--rate` caps each host's egress
# with tbf (netem is not available on every kernel; tbf is).
#
# Idempotent: `up` first removes a lab left behind; `down` removes only the
# namespaces named cohort-lab-sw and cohort-h*, which the lab made. Needs root
# (CAP_NET_ADMIN) and iproute2.
set -euo pipefail

SWITCH=cohort-lab-sw
PREFIX=cohort-h
SUBNET=10.77.0

die() { echo "lab.sh: $*" >&2; exit 1; }

host_ns() {
  local h="$1"
  case "$h" in
    "$PREFIX"[0-9]*) echo "$h" ;;
    h[0-9]*) echo "$PREFIX${h#h}" ;;
    [0-9]*) echo "$PREFIX$h" ;;
    *) die "unknown host '$h': name it h0, 0 or ${PREFIX}0" ;;
  esac
}

host_index() { local ns; ns="$(host_ns "$1")"; echo "${ns#"$PREFIX"}"; }

require_host() {
  local ns; ns="$(host_ns "$1")"
  ip netns list | awk '{print $1}' | grep -qx "$ns" ||
    die "host $1 ($ns) is not up; run: scripts/lab.sh up N"
  echo "$ns"
}

check() {
  if [[ "$(id -u)" != 0 ]]; then
    echo "lab.sh: the lab needs root (network namespaces); running as uid $(id -u)" >&2
    return 77
  fi
  command -v ip >/dev/null || { echo "lab.sh: iproute2 (ip) is not installed" >&2; return 77; }
  local probe="cohort-lab-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "lab.sh: cannot create a network namespace here (no CAP_NET_ADMIN, or a container without netns)" >&2
    return 77
  fi
  ip netns del "$probe"
  return 0
}

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}'); do
    case "$ns" in
      "$SWITCH"|"$PREFIX"[0-9]*)
        # What still runs in a host dies with it (a deleted namespace would
        # leave its processes running, cut off).
        ip netns pids "$ns" | xargs -r kill -9
        ip netns del "$ns" ;;
    esac
  done
}

up() {
  local n="${1:-}"; shift || true
  [[ "$n" =~ ^[0-9]+$ ]] && (( n >= 1 && n <= 32 )) ||
    die "up N: N must be a number of hosts from 1 to 32, got '${n}'"
  local rate=""
  while (( $# )); do
    case "$1" in
      --rate) rate="${2:-}"; [[ -n "$rate" ]] || die "--rate needs a value (e.g. 5gbit)"; shift 2 ;;
      *) die "up: unknown argument '$1' (usage: up N [--rate RATE])" ;;
    esac
  done
  down
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link set lo up
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  local i ns
  for (( i = 0; i < n; i++ )); do
    ns="$PREFIX$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Made inside the switch, one end moved to the host as eth0.
    ip -n "$SWITCH" link add "port$i" type veth peer name eth0 netns "$ns"
    ip -n "$SWITCH" link set "port$i" master br0
    ip -n "$SWITCH" link set "port$i" up
    ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [[ -n "$rate" ]]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" \
        burst 256kb latency 50ms
    fi
  done
  echo "lab: $n host(s) ${PREFIX}0..$((n - 1)) at $SUBNET.1..$n${rate:+, egress capped at $rate}"
}

case "${1:-}" in
  check) check ;;
  up) shift; check || exit $?; up "$@" ;;
  down) down ;;
  addr) [[ $# -eq 2 ]] || die "usage: addr HOST"; require_host "$2" >/dev/null
        echo "$SUBNET.$(( $(host_index "$2") + 1 ))" ;;
  exec)
    [[ $# -ge 4 && "$3" == "--" ]] || die "usage: exec HOST -- CMD..."
    ns="$(require_host "$2")"; shift 3
    exec ip netns exec "$ns" "$@" ;;
  partition|heal)
    [[ $# -eq 2 ]] || die "usage: $1 HOST"
    require_host "$2" >/dev/null
    # STP port states: 0 disabled (frames dropped), 3 forwarding.
    ip netns exec "$SWITCH" bridge link set dev "port$(host_index "$2")" \
      state "$([[ "$1" == partition ]] && echo 0 || echo 3)" ;;
  kill)
    [[ $# -eq 2 ]] || die "usage: kill HOST"
    ns="$(require_host "$2")"
    ip netns exec "$SWITCH" bridge link set dev "port$(host_index "$2")" state 0
    # Every process whose network namespace is the host's (what it ran
    # through `exec`, and their children).
    ip netns pids "$ns" | xargs -r kill -9 ;;
  bytes)
    [[ $# -eq 2 ]] || die "usage: bytes HOST"
    ns="$(require_host "$2")"
    echo "rx $(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes)" \
         "tx $(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes)" ;;
  *) die "usage: up N [--rate RATE] | down | exec HOST -- CMD | addr HOST | partition HOST | heal HOST | kill HOST | bytes HOST | check" ;;
esac
