#!/usr/bin/env bash
# PostgreSQL 15 under Patroni on this machine: one etcd, two Patroni-managed
# PostgreSQL nodes in synchronous mode (or asynchronous, to show what that
# costs: HERALD_PATRONI_SYNC=off or `up --async`), and HAProxy sending connections to
# whichever node Patroni's REST API says is the primary. For trying Herald
# on Patroni and for its cluster tests. Everything listens on 127.0.0.1 and
# lives under $HERALD_PATRONI_DIR (default /tmp/herald-cluster/patroni).
#
#   cluster/patroni.sh up [--async]    etcd, pg1 (leader), pg2 (sync standby), HAProxy
#   cluster/patroni.sh state           patronictl list, and where HAProxy points
#   cluster/patroni.sh kill leader|pgN SIGKILL a node's Patroni and postmaster
#   cluster/patroni.sh start pgN       start a node's Patroni again (it rejoins)
#   cluster/patroni.sh stop [--clean]  stop everything (--clean: remove the data)
#   cluster/patroni.sh lag on|off      hold (SIGSTOP) or release the primary's WAL
#                                      senders: the standby falls behind, as on a
#                                      slow link (asynchronous mode only; in
#                                      synchronous mode commits would wait)
#
# Ports: etcd 2379/2380; PostgreSQL 5441 (pg1), 5442 (pg2); Patroni REST
# 8011, 8012; HAProxy 5440 (the primary), stats on 7440. Herald's URL:
# postgres://postgres@127.0.0.1:5440/herald.
#
# Facts this script is built on: Patroni refuses to run as root, so it runs
# as user postgres with data directories that user owns; HAProxy treats a
# server as up until its checks say otherwise, so it is started after
# Patroni has a leader (and `herald migrate` waits for a primary anyway).
set -euo pipefail

DIR="${HERALD_PATRONI_DIR:-/tmp/herald-cluster/patroni}"
PGBIN="${HERALD_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)}"
HAPROXY_PORT=5440
RUN_AS=postgres
# Asynchronous replication: a standby may be behind when it is promoted, so
# a failover can lose commits the old primary acknowledged. Patroni then
# promotes a standby however far behind (maximum_lag_on_failover 1 GiB)
# rather than waiting for the old primary to return.
SYNC="${HERALD_PATRONI_SYNC:-on}"

pgport() { echo $((5440 + ${1#pg})); }
restport() { echo $((8010 + ${1#pg})); }

need() {
  local missing=()
  command -v patroni >/dev/null || missing+=(patroni)
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v haproxy >/dev/null || missing+=(haproxy)
  [ -x "$PGBIN/postgres" ] || missing+=(postgresql)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "missing packages: ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 3
  fi
}

as_pg() { setpriv --reuid="$RUN_AS" --regid="$RUN_AS" --init-groups -- "$@"; }

start_etcd() {
  mkdir -p "$DIR/etcd"
  chown -R "$RUN_AS:" "$DIR/etcd"
  (cd "$DIR" && exec setpriv --reuid="$RUN_AS" --regid="$RUN_AS" --init-groups -- etcd --name herald-etcd --data-dir "$DIR/etcd/data" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster herald-etcd=http://127.0.0.1:2380 --enable-v2=true \
    </dev/null >>"$DIR/etcd/etcd.log" 2>&1 & echo $! >"$DIR/etcd/pid")
  for _ in $(seq 1 60); do
    curl -fsS http://127.0.0.1:2379/health >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "etcd did not start; see $DIR/etcd/etcd.log" >&2
  return 1
}

config() {
  local n=$1 d="$DIR/$1"
  mkdir -p "$d"
  cat >"$d/patroni.yml" <<EOF
scope: herald
name: $n
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$(restport "$n")
  connect_address: 127.0.0.1:$(restport "$n")
etcd3:
  hosts: 127.0.0.1:2379
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 2
    retry_timeout: 5
    maximum_lag_on_failover: $([ "$SYNC" = off ] && echo 1073741824 || echo 1048576)
    synchronous_mode: $([ "$SYNC" = off ] && echo false || echo true)
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
        max_connections: 300
  initdb:
    - encoding: UTF8
    - data-checksums
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$(pgport "$n")
  connect_address: 127.0.0.1:$(pgport "$n")
  data_dir: $d/data
  bin_dir: $PGBIN
  pgpass: $d/pgpass
  authentication:
    replication:
      username: replicator
      password: replicator
    superuser:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: $d
EOF
  chown -R "$RUN_AS:" "$d"
}

start_node() {
  local n=$1 d="$DIR/$1"
  config "$n"
  (cd "$d" && exec setpriv --reuid="$RUN_AS" --regid="$RUN_AS" --init-groups -- patroni "$d/patroni.yml" </dev/null >>"$d/patroni.log" 2>&1 & echo $! >"$d/patroni.pid")
}

# Waits until node $1's REST API answers $2 (primary, replica, sync) with 200.
wait_role() {
  local n=$1 role=$2
  for _ in $(seq 1 240); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(restport "$n")/$role")" = 200 ] && return 0
    sleep 0.5
  done
  echo "$n did not become $role; see $DIR/$n/patroni.log" >&2
  tail -20 "$DIR/$n/patroni.log" >&2 || true
  return 1
}

haproxy_up() {
  cat >"$DIR/haproxy.cfg" <<EOF
global
  maxconn 2000
  pidfile $DIR/haproxy.pid
  stats socket $DIR/haproxy.sock mode 600 level admin
defaults
  mode tcp
  timeout connect 2s
  timeout client 1h
  timeout server 1h
listen stats
  mode http
  bind 127.0.0.1:7440
  stats enable
  stats uri /
listen primary
  bind 127.0.0.1:$HAPROXY_PORT
  option httpchk OPTIONS /primary
  http-check expect status 200
  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
  server pg1 127.0.0.1:$(pgport pg1) maxconn 300 check port $(restport pg1)
  server pg2 127.0.0.1:$(pgport pg2) maxconn 300 check port $(restport pg2)
EOF
  haproxy -D -f "$DIR/haproxy.cfg" </dev/null >>"$DIR/haproxy.log" 2>&1
}

up() {
  need
  mkdir -p "$DIR"
  if [ -f "$DIR/etcd/pid" ] && kill -0 "$(cat "$DIR/etcd/pid")" 2>/dev/null; then
    echo "already up; cluster/patroni.sh state" >&2
    exit 0
  fi
  start_etcd
  start_node pg1
  wait_role pg1 primary
  start_node pg2
  if [ "$SYNC" = off ]; then wait_role pg2 replica; else wait_role pg2 sync; fi
  haproxy_up
  # On the leader itself: through HAProxy the first connections can still
  # reach the standby (up until its checks fail).
  psql -h 127.0.0.1 -p "$(pgport pg1)" -U postgres -qc "CREATE DATABASE herald" postgres
  for _ in $(seq 1 40); do
    echo "show stat" | socat - "unix-connect:$DIR/haproxy.sock" | grep -q '^primary,pg2,.*,DOWN,' && break
    sleep 0.5
  done
  echo "patroni up ($([ "$SYNC" = off ] && echo asynchronous || echo synchronous) replication): postgres://postgres@127.0.0.1:$HAPROXY_PORT/herald (pg1 :$(pgport pg1), pg2 :$(pgport pg2))"
}

leader() {
  for n in pg1 pg2; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(restport "$n")/primary")" = 200 ] && { echo "$n"; return 0; }
  done
  return 1
}

kill_node() {
  local n=$1
  [ "$n" = leader ] && n=$(leader)
  local d="$DIR/$n"
  local ppid pmpid children
  ppid=$(cat "$d/patroni.pid" 2>/dev/null || true)
  pmpid=$(head -n1 "$d/data/postmaster.pid" 2>/dev/null || true)
  # The whole node, as when its machine dies: the postmaster's children
  # too (backends and WAL senders would otherwise linger a moment).
  children=$( [ -n "$pmpid" ] && pgrep -P "$pmpid" | tr '\n' ' ' || true)
  [ -n "$ppid" ] && kill -KILL "$ppid" 2>/dev/null || true
  [ -n "$pmpid" ] && kill -KILL "$pmpid" 2>/dev/null || true
  for pid in $children; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -f "$d/patroni.pid"
  echo "$n: Patroni ($ppid), postmaster ($pmpid) and its processes SIGKILLed"
}

# SIGSTOP (on) or SIGCONT (off) the primary's WAL senders: the standbys
# keep what reached them and fall behind, as behind a slow or broken link.
# (Holding a standby's WAL receiver instead is not the same: what the
# sender already wrote waits in the socket and arrives after the kill.)
lag() {
  local sig
  case "$1" in on) sig=STOP ;; off) sig=CONT ;; *) echo "lag on|off" >&2; exit 2 ;; esac
  local n pm pid found=0
  for n in pg1 pg2; do
    pm=$(head -n1 "$DIR/$n/data/postmaster.pid" 2>/dev/null || true)
    [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null || continue
    for pid in $(pgrep -P "$pm" -f walsender || true); do
      kill -"$sig" "$pid" && found=1 && echo "$n: WAL sender $pid SIG$sig"
    done
  done
  [ "$found" = 1 ] || [ "$sig" = CONT ] || { echo "no WAL sender running" >&2; exit 1; }
}

state() {
  patronictl -c "$DIR/pg1/patroni.yml" list 2>/dev/null || echo "patronictl: no answer (is etcd up?)"
  if [ -S "$DIR/haproxy.sock" ]; then
    echo "show stat" | socat - "unix-connect:$DIR/haproxy.sock" | awk -F, '/^primary,pg/ {print "haproxy " $2 ": " $18}'
  fi
}

stop() {
  if [ -f "$DIR/haproxy.pid" ]; then kill "$(cat "$DIR/haproxy.pid")" 2>/dev/null || true; rm -f "$DIR/haproxy.pid"; fi
  for n in pg2 pg1; do
    local pid
    pid=$(cat "$DIR/$n/patroni.pid" 2>/dev/null || true)
    if [ -n "$pid" ]; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$pid" 2>/dev/null || true
      rm -f "$DIR/$n/patroni.pid"
    fi
    # A postmaster whose Patroni was SIGKILLed is still running.
    local pm
    pm=$(head -n1 "$DIR/$n/data/postmaster.pid" 2>/dev/null || true)
    if [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null; then
      as_pg "$PGBIN/pg_ctl" -D "$DIR/$n/data" stop -m fast >/dev/null 2>&1 || kill -KILL "$pm" 2>/dev/null || true
    fi
  done
  if [ -f "$DIR/etcd/pid" ]; then
    kill -TERM "$(cat "$DIR/etcd/pid")" 2>/dev/null || true
    rm -f "$DIR/etcd/pid"
  fi
  if [ "${1:-}" = --clean ]; then rm -rf "$DIR" 2>/dev/null || { sleep 2; rm -rf "$DIR"; }; fi
  echo "patroni stopped"
}

case "${1:-}" in
  up) [ "${2:-}" = --async ] && SYNC=off; up ;;
  state) state ;;
  lag) lag "${2:?on or off}" ;;
  kill) kill_node "${2:?leader or pg1/pg2}" ;;
  start) need; start_node "${2:?pg1 or pg2}"; echo "started ${2}" ;;
  stop) stop "${2:-}" ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
