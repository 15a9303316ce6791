#!/usr/bin/env bash
# A 3-node MariaDB Galera cluster on this machine, with HAProxy in front,
# for trying Herald on Galera and for its cluster tests. Everything listens
# on 127.0.0.1 and lives under $HERALD_GALERA_DIR (default
# /tmp/herald-cluster/galera).
#
#   cluster/galera.sh up            start 3 nodes (node 1 bootstraps) + HAProxy
#   cluster/galera.sh state         each node's wsrep state, and HAProxy's
#   cluster/galera.sh kill N        SIGKILL node N (1-3)
#   cluster/galera.sh start N       start node N again (it rejoins by IST/SST)
#   cluster/galera.sh stop [--clean] stop everything (--clean: remove the data)
#
# Nodes: MariaDB on 3311-3313 (user herald, no password, database herald),
# Galera replication on 4561-4563, IST 4571-4573, SST 4581-4583. HAProxy
# on 3310 spreads connections over the nodes that answer. URLs to give
# Herald: mysql://herald@127.0.0.1:3311/herald (one per node) or
# mysql://herald@127.0.0.1:3310/herald (through HAProxy).
#
# Facts this script is built on: mariadbd must run as user mysql with a
# datadir that user owns (an rsync state transfer started as root cannot
# write a root-owned datadir); HAProxy treats a server as up until its
# checks say otherwise.
set -euo pipefail

DIR="${HERALD_GALERA_DIR:-/tmp/herald-cluster/galera}"
NODES=(1 2 3)
PROVIDER=/usr/lib/galera/libgalera_smm.so
HAPROXY_PORT=3310

port() { echo $((3310 + $1)); }
gport() { echo $((4560 + $1)); }

need() {
  local missing=()
  [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
  [ -f "$PROVIDER" ] || missing+=(galera-4)
  command -v haproxy >/dev/null || missing+=(haproxy)
  command -v rsync >/dev/null || missing+=(rsync)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "missing packages: ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 3
  fi
}

config() {
  local n=$1 d="$DIR/node$1"
  local peers="127.0.0.1:$(gport 1),127.0.0.1:$(gport 2),127.0.0.1:$(gport 3)"
  cat >"$d/my.cnf" <<EOF
[mysqld]
user=mysql
datadir=$d/data
socket=$d/mysqld.sock
pid-file=$d/mysqld.pid
log-error=$d/error.log
port=$(port "$n")
bind-address=127.0.0.1
skip-name-resolve
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=64M
innodb_log_file_size=32M
max_connections=300
wsrep_on=ON
wsrep_provider=$PROVIDER
wsrep_cluster_name=herald
wsrep_cluster_address=gcomm://$peers
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$(gport "$n")
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$(gport "$n");ist.recv_addr=127.0.0.1:$((4570 + n));gcache.size=64M"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$((4580 + n))
EOF
}

sql() { mariadb --socket="$DIR/node$1/mysqld.sock" -uroot -N -B -e "$2"; }

wait_synced() {
  local n=$1
  for _ in $(seq 1 120); do
    if [ "$(sql "$n" "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | awk '{print $2}')" = Synced ]; then
      return 0
    fi
    sleep 0.5
  done
  echo "node $n did not reach Synced; see $DIR/node$n/error.log" >&2
  tail -20 "$DIR/node$n/error.log" >&2 || true
  return 1
}

start_node() {
  local n=$1 extra=${2:-}
  local d="$DIR/node$n"
  mkdir -p "$d"
  config "$n"
  if [ ! -d "$d/data/mysql" ]; then
    mkdir -p "$d/data"
    chown -R mysql:mysql "$d"
    if [ "$extra" = --wsrep-new-cluster ]; then
      mariadb-install-db --defaults-file="$d/my.cnf" --user=mysql --auth-root-authentication-method=socket >"$d/install.log" 2>&1
    fi
  fi
  chown -R mysql:mysql "$d"
  # As user mysql, from a directory it can read: the SST script runs as
  # the server's user and writes into the datadir.
  (cd "$d" && exec /usr/sbin/mariadbd --defaults-file="$d/my.cnf" $extra </dev/null >>"$d/stdout.log" 2>&1 &)
  wait_synced "$n"
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
listen galera
  bind 127.0.0.1:$HAPROXY_PORT
  balance leastconn
  option mysql-check user haproxy
  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
EOF
  for n in "${NODES[@]}"; do
    echo "  server node$n 127.0.0.1:$(port "$n") check" >>"$DIR/haproxy.cfg"
  done
  haproxy -D -f "$DIR/haproxy.cfg" </dev/null >>"$DIR/haproxy.log" 2>&1
}

up() {
  need
  mkdir -p "$DIR"
  if [ -f "$DIR/node1/mysqld.pid" ] && kill -0 "$(cat "$DIR/node1/mysqld.pid")" 2>/dev/null; then
    echo "already up; cluster/galera.sh state" >&2
    exit 0
  fi
  start_node 1 --wsrep-new-cluster
  sql 1 "CREATE DATABASE IF NOT EXISTS herald;
         CREATE USER IF NOT EXISTS 'herald'@'127.0.0.1';
         GRANT ALL ON *.* TO 'herald'@'127.0.0.1';
         CREATE USER IF NOT EXISTS 'haproxy'@'127.0.0.1';"
  start_node 2
  start_node 3
  haproxy_up
  echo "galera up: nodes mysql://herald@127.0.0.1:{3311,3312,3313}/herald, HAProxy mysql://herald@127.0.0.1:$HAPROXY_PORT/herald"
}

node_pid() { cat "$DIR/node$1/mysqld.pid" 2>/dev/null || true; }

kill_node() {
  local n=$1 pid
  pid=$(node_pid "$n")
  [ -n "$pid" ] || { echo "node $n is not running" >&2; exit 1; }
  kill -KILL "$pid"
  rm -f "$DIR/node$n/mysqld.pid"
  echo "node $n (pid $pid) SIGKILLed"
}

state() {
  for n in "${NODES[@]}"; do
    local s
    s=$(sql "$n" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN
                  ('wsrep_local_state_comment','wsrep_cluster_size','wsrep_cluster_status') ORDER BY VARIABLE_NAME" 2>/dev/null | tr '\n' ' ') || true
    echo "node$n port $(port "$n") pid $(node_pid "$n"): ${s:-down} (cluster_size status state)"
  done
  if [ -S "$DIR/haproxy.sock" ]; then
    echo "show stat" | socat - "unix-connect:$DIR/haproxy.sock" | awk -F, '/^galera,node/ {print "haproxy " $2 ": " $18}'
  fi
}

stop() {
  if [ -f "$DIR/haproxy.pid" ]; then kill "$(cat "$DIR/haproxy.pid")" 2>/dev/null || true; rm -f "$DIR/haproxy.pid"; fi
  for n in 3 2 1; do
    local pid
    pid=$(node_pid "$n")
    if [ -n "$pid" ]; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  if [ "${1:-}" = --clean ]; then rm -rf "$DIR"; fi
  echo "galera stopped"
}

case "${1:-}" in
  up) up ;;
  state) state ;;
  kill) kill_node "${2:?node number 1-3}" ;;
  start) need; start_node "${2:?node number 1-3}" ;;
  stop) stop "${2:-}" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
