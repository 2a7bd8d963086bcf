#!/usr/bin/env bash
# A 3-member etcd cluster on this machine (Debian 12's etcd-server 3.4), for
# tests and the docs (docs/etcd.md).
#
#   scripts/etcd_local.sh start [--dir DIR] [--ports C0,C1,C2,P0,P1,P2] [--tls]
#       installs etcd-server and etcd-client when missing, starts members
#       e0, e1, e2 on 127.0.0.1 and waits until all three answer; prints the
#       --rendezvous value (etcd://127.0.0.1:C0,127.0.0.1:C1,127.0.0.1:C2).
#       --tls: a CA, a server and a client certificate in DIR/tls; clients
#       must present a certificate signed by that CA.
#   scripts/etcd_local.sh leader [--dir DIR]   # prints the leader's name (e0..e2)
#   scripts/etcd_local.sh kill NAME [--dir DIR] # SIGKILLs member NAME
#   scripts/etcd_local.sh stop [--dir DIR]      # stops every member, removes DIR
#
# Defaults: DIR /tmp/cohort-etcd, client ports 23790-23792, peer ports
# 23800-23802. Members listen on loopback only. `start` on a running cluster
# in DIR only reports; `stop` on a stopped one does nothing. DIR holds the
# members' data and logs (eN.log), their pids (eN.pid) and `endpoints`.
set -euo pipefail

DIR=/tmp/cohort-etcd
PORTS=23790,23791,23792,23800,23801,23802
TLS=0
DEADLINE_S="${ETCD_LOCAL_TIMEOUT:-30}"

log() { echo "etcd_local: $*" >&2; }
die() { echo "etcd_local: error: $*" >&2; exit 1; }

cmd="${1:-}"
[ -n "$cmd" ] || die "usage: $0 start|leader|kill NAME|stop [--dir DIR] [--ports C0,C1,C2,P0,P1,P2] [--tls]"
shift
name_arg=""
if [ "$cmd" = kill ]; then
  name_arg="${1:-}"
  [[ "$name_arg" =~ ^e[012]$ ]] || die "kill needs a member name, e0, e1 or e2 (got '${name_arg}')"
  shift
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --ports) PORTS="$2"; shift 2 ;;
    --tls) TLS=1; shift ;;
    *) die "unknown argument '$1'" ;;
  esac
done
IFS=, read -r -a P <<< "$PORTS"
[ "${#P[@]}" -eq 6 ] || die "--ports needs six ports (three client, three peer), got '$PORTS'"

scheme=http
[ -f "$DIR/tls/ca.pem" ] && scheme=https
[ "$TLS" = 1 ] && scheme=https

endpoints() { echo "127.0.0.1:${P[0]},127.0.0.1:${P[1]},127.0.0.1:${P[2]}"; }

ctl() {
  local args=(--endpoints "$(echo "$(endpoints)" | sed "s|127|$scheme://127|g")" --dial-timeout 2s --command-timeout 3s)
  if [ "$scheme" = https ]; then
    args+=(--cacert "$DIR/tls/ca.pem" --cert "$DIR/tls/client.pem" --key "$DIR/tls/client-key.pem")
  fi
  ETCDCTL_API=3 etcdctl "${args[@]}" "$@"
}

running() { # member name
  local f="$DIR/$1.pid"
  [ -f "$f" ] || return 1
  # A killed member whose parent is gone may linger as a zombie: not running.
  local state
  state="$(ps -o stat= -p "$(cat "$f")" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "${state:0:1}" != Z ]
}

make_tls() {
  local t="$DIR/tls"
  mkdir -p "$t"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=cohort etcd_local CA" -keyout "$t/ca-key.pem" -out "$t/ca.pem" 2>/dev/null
  local who
  for who in server client; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -subj "/CN=cohort etcd_local $who" -keyout "$t/$who-key.pem" -out "$t/$who.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' > "$t/$who.ext"
    openssl x509 -req -in "$t/$who.csr" -CA "$t/ca.pem" -CAkey "$t/ca-key.pem" -CAcreateserial \
      -days 2 -extfile "$t/$who.ext" -out "$t/$who.pem" 2>/dev/null
  done
  chmod 600 "$t"/*-key.pem
}

start() {
  if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    log "installing etcd-server etcd-client"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      etcd-server etcd-client >/dev/null || {
      $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
        --no-install-recommends etcd-server etcd-client >/dev/null; }
  fi
  mkdir -p "$DIR"
  if running e0 && running e1 && running e2; then
    log "already running in $DIR"
    echo "etcd://$(endpoints)"
    return
  fi
  [ "$TLS" = 1 ] && [ ! -f "$DIR/tls/ca.pem" ] && make_tls
  local cluster="e0=http://127.0.0.1:${P[3]},e1=http://127.0.0.1:${P[4]},e2=http://127.0.0.1:${P[5]}"
  local i
  for i in 0 1 2; do
    running "e$i" && continue
    local state=new
    [ -d "$DIR/e$i/member" ] && state=existing
    local tls_args=()
    if [ "$scheme" = https ]; then
      tls_args=(--cert-file "$DIR/tls/server.pem" --key-file "$DIR/tls/server-key.pem"
                --trusted-ca-file "$DIR/tls/ca.pem" --client-cert-auth)
    fi
    # setsid: the members outlive this script and a test's process group.
    setsid etcd --name "e$i" --data-dir "$DIR/e$i" \
      --listen-client-urls "$scheme://127.0.0.1:${P[$i]}" \
      --advertise-client-urls "$scheme://127.0.0.1:${P[$i]}" \
      --listen-peer-urls "http://127.0.0.1:${P[$((i + 3))]}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${P[$((i + 3))]}" \
      --initial-cluster "$cluster" --initial-cluster-token "cohort-$(basename "$DIR")" \
      --initial-cluster-state "$state" \
      "${tls_args[@]}" >"$DIR/e$i.log" 2>&1 < /dev/null &
    echo $! > "$DIR/e$i.pid"
  done
  echo "$(endpoints)" > "$DIR/endpoints"
  local deadline=$((SECONDS + DEADLINE_S))
  until ctl endpoint health >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      for i in 0 1 2; do log "e$i.log:"; tail -n 5 "$DIR/e$i.log" >&2 || true; done
      # No half-started cluster left behind: the members that did start go.
      for i in 0 1 2; do
        if running "e$i"; then kill -9 "$(cat "$DIR/e$i.pid")" 2>/dev/null || true; fi
      done
      die "the 3 members in $DIR did not all answer within ${DEADLINE_S}s (ports $PORTS); see $DIR/e*.log"
    fi
    sleep 0.2
  done
  log "3 members up in $DIR"
  echo "etcd://$(endpoints)"
}

leader() {
  local i
  for i in 0 1 2; do
    running "e$i" || continue
    local args=(--endpoints "$scheme://127.0.0.1:${P[$i]}" --dial-timeout 2s --command-timeout 3s)
    [ "$scheme" = https ] && args+=(--cacert "$DIR/tls/ca.pem" --cert "$DIR/tls/client.pem" --key "$DIR/tls/client-key.pem")
    local fields member lead
    fields="$(ETCDCTL_API=3 etcdctl "${args[@]}" endpoint status -w fields 2>/dev/null)" || continue
    member="$(sed -n 's/^"MemberID" : //p' <<< "$fields")"
    lead="$(sed -n 's/^"Leader" : //p' <<< "$fields")"
    if [ -n "$member" ] && [ "$member" = "$lead" ]; then
      echo "e$i"
      return
    fi
  done
  die "no member in $DIR says it leads (is the cluster up? $0 start)"
}

stop() {
  local i
  # SIGKILL: the data directory goes next, so a clean shutdown buys nothing.
  for i in 0 1 2; do
    if running "e$i"; then kill -9 "$(cat "$DIR/e$i.pid")" 2>/dev/null || true; fi
  done
  for i in 0 1 2; do
    local n=0
    while running "e$i" && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
  done
  # Only a directory this script made: it holds pid files or member data.
  if [ -d "$DIR" ] && { ls "$DIR"/e?.pid >/dev/null 2>&1 || [ -d "$DIR/e0" ]; }; then
    rm -rf "$DIR"
  fi
}

case "$cmd" in
  start) start ;;
  leader) leader ;;
  kill)
    running "$name_arg" || die "member $name_arg in $DIR is not running"
    kill -9 "$(cat "$DIR/$name_arg.pid")"
    ;;
  stop) stop ;;
  *) die "unknown command '$cmd' (start, leader, kill NAME, stop)" ;;
esac
