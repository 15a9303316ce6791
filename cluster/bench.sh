#!/usr/bin/env bash
# What replication costs Herald: the same benchmarks against one PostgreSQL
# (the local server), the Patroni cluster (synchronous mode, through
# HAProxy) and the Galera cluster (through HAProxy), in one run, rounds
# alternating between the three, and the ratios to one PostgreSQL.
#
#   cluster/bench.sh [--bin PATH] [--rows N] [--duration S] [--rounds R] [--keep]
#
# Brings both clusters up (cluster/patroni.sh, cluster/galera.sh; as root),
# runs per round and per target a fresh scratch database with
#   herald bench --rows N --json                       (the drain: N inbox rows)
#   herald bench --pipeline --duration S --connections C --json   (POST /v1/triggers to delivery;
#                                           C from CONNECTIONS, 16 as in the README's figures)
# prints each figure and the medians' ratios, and stops the clusters
# (--keep leaves them up). Defaults: target/release/herald, 20000 rows,
# 15 s, 2 rounds. The local PostgreSQL is postgres://postgres@127.0.0.1:5432
# (HERALD_BENCH_LOCAL_PG to change it); the JSON of every run is kept in
# test-output/cluster-bench/.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=target/release/herald ROWS=20000 DURATION=15 ROUNDS=2 KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "$BIN not found: cargo build --release" >&2; exit 2; }
LOCAL=${HERALD_BENCH_LOCAL_PG:-postgres://postgres@127.0.0.1:5432}
OUT=test-output/cluster-bench
mkdir -p "$OUT"
rm -f "$OUT"/*.json

cleanup() {
  if [ "$KEEP" = 0 ]; then
    bash cluster/patroni.sh stop --clean >/dev/null 2>&1 || true
    bash cluster/galera.sh stop --clean >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

bash cluster/patroni.sh up
bash cluster/galera.sh up

# A fresh scratch database named $2 on target $1; prints its URL.
fresh() {
  local target=$1 db=$2
  case "$target" in
    postgres)
      psql -q "$LOCAL/postgres" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
      echo "$LOCAL/$db" ;;
    patroni)
      psql -q "postgres://postgres@127.0.0.1:5440/postgres" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
      echo "postgres://postgres@127.0.0.1:5440/$db" ;;
    galera)
      mariadb --protocol=tcp -h 127.0.0.1 -P 3310 -u herald -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
      echo "mysql://herald@127.0.0.1:3310/$db" ;;
  esac
}

drop() {
  local target=$1 db=$2
  case "$target" in
    postgres) psql -q "$LOCAL/postgres" -c "DROP DATABASE IF EXISTS $db" >/dev/null ;;
    patroni) psql -q "postgres://postgres@127.0.0.1:5440/postgres" -c "DROP DATABASE IF EXISTS $db" >/dev/null ;;
    galera) mariadb --protocol=tcp -h 127.0.0.1 -P 3310 -u herald -e "DROP DATABASE IF EXISTS $db" ;;
  esac
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  for target in postgres patroni galera; do
    url=$(fresh "$target" herald_cbench_drain)
    "$BIN" bench --rows "$ROWS" --bench-database-url "$url" --json >"$OUT/$target-drain-$round.json"
    drop "$target" herald_cbench_drain
    url=$(fresh "$target" herald_cbench_pipe)
    "$BIN" bench --pipeline --duration "$DURATION" --connections "${CONNECTIONS:-16}" --bench-database-url "$url" --json >"$OUT/$target-pipeline-$round.json"
    drop "$target" herald_cbench_pipe
    python3 - "$OUT" "$target" "$round" <<'EOF'
import json, sys
out, target, rnd = sys.argv[1:]
d = json.load(open(f"{out}/{target}-drain-{rnd}.json"))
p = json.load(open(f"{out}/{target}-pipeline-{rnd}.json"))
print(f"round {rnd} {target:9s} drain {d['drain_rows_per_sec']:8.0f} rows/s | pipeline {p['triggers_per_sec']:6.0f} triggers/s "
      f"(API p50 {p['api_latency_ms']['p50']:.1f} ms, p99 {p['api_latency_ms']['p99']:.1f} ms), "
      f"delivered {p['delivered_per_sec']:.0f}/s, trigger to delivery p50 {p['trigger_to_delivery_ms']['p50']:.0f} ms, "
      f"idle trigger p50 {p['idle_trigger_to_delivery_ms']['p50']:.0f} ms", flush=True)
EOF
  done
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def med(target, kind, f):
    return statistics.median(f(json.load(open(f"{out}/{target}-{kind}-{r}.json"))) for r in range(1, rounds + 1))
rows = [
    ("drain rows/s", "drain", lambda j: j["drain_rows_per_sec"]),
    ("pipeline triggers/s", "pipeline", lambda j: j["triggers_per_sec"]),
    ("pipeline API p50 ms", "pipeline", lambda j: j["api_latency_ms"]["p50"]),
    ("pipeline API p99 ms", "pipeline", lambda j: j["api_latency_ms"]["p99"]),
    ("idle trigger to delivery p50 ms", "pipeline", lambda j: j["idle_trigger_to_delivery_ms"]["p50"]),
]
print(f"\nmedians over {rounds} round(s); ratio to one PostgreSQL in brackets")
print(f"{'measurement':34s} {'PostgreSQL':>12s} {'Patroni (sync)':>22s} {'Galera (3 nodes)':>22s}")
for name, kind, f in rows:
    pg = med("postgres", kind, f)
    cells = [f"{med(t, kind, f):,.1f} ({med(t, kind, f) / pg:.2f}x)" for t in ("patroni", "galera")]
    print(f"{name:34s} {pg:12,.1f} {cells[0]:>22s} {cells[1]:>22s}")
EOF
