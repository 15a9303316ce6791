#!/usr/bin/env bash
# Load test of the trigger API: wrk posts triggers to `herald serve` on
# loopback for a bounded time while the same process's worker drains the
# outbox through the inbox channel. Reports triggers/s accepted, errors by
# status, latency percentiles, drain rows/s, and the server's RSS every
# second; fails if a request got a 5xx, if the drain does not finish in
# time, or if the outbox does not end with exactly one sent row per
# trigger the server took (an acknowledged trigger lost, or a message
# planned or sent twice). wrk stops with up to --connections requests in
# flight, which the server still completes but wrk does not count, so the
# server may hold up to that many more triggers than wrk saw answered.
#
#   bench/load.sh [--duration SECS] [--connections N] [--threads N]
#                 [--database-url URL] [--bin PATH] [--drain-timeout SECS]
#                 [--out DIR]
#
# --database-url: a PostgreSQL or MariaDB/MySQL *server* URL such as
#   postgres://postgres@127.0.0.1:5432/test; the script creates a fresh
#   schema (PostgreSQL) or database (MariaDB) on it and drops it on exit.
#   Default: a new SQLite file in a temporary directory.
# --bin: the herald binary (default: target/release/herald, built with
#   `cargo build --release` if missing).
# --out: keep the samples (rss.tsv, metrics.tsv, wrk.txt, serve.log) there.
#
# Everything is bounded: wrk runs --duration seconds, the drain wait at most
# --drain-timeout seconds, and the server this script started is killed on
# exit whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=60
connections=16
threads=2
db_url=""
bin=""
drain_timeout=120
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --database-url) db_url="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --drain-timeout) drain_timeout="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$duration" "$connections" "$threads" "$drain_timeout"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "expected a positive whole number, got $n" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to read the results" >&2; exit 2; }

if [ -z "$bin" ]; then
  bin="$PWD/target/release/herald"
  [ -x "$bin" ] || cargo build --release --quiet
fi
[ -x "$bin" ] || { echo "no herald binary at $bin" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

work="$(mktemp -d)"
[ -n "$out" ] && mkdir -p "$out" || out="$work"
pid=""
drop_sql=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$drop_sql" ]; then eval "$drop_sql" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A fresh database for this run, so earlier rows cannot skew the counts.
name="herald_load_$$_$RANDOM"
case "$db_url" in
  "") url="sqlite://$work/load.db"; backend=sqlite ;;
  postgres://* | postgresql://*)
    backend=postgres
    psql -q "$db_url" -c "CREATE SCHEMA $name"
    drop_sql="psql -q '$db_url' -c 'DROP SCHEMA $name CASCADE'"
    sep='?'; [[ "$db_url" == *\?* ]] && sep='&'
    url="${db_url}${sep}options=-c%20search_path%3D${name}"
    ;;
  mysql://* | mariadb://*)
    backend=mariadb
    read -r my_host my_port my_user my_pass < <(python3 -c '
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1])
print(p.hostname or "127.0.0.1", p.port or 3306, p.username or "root", p.password or "-")' "$db_url")
    my_args=(--protocol=tcp -h "$my_host" -P "$my_port" -u "$my_user")
    [ "$my_pass" != "-" ] && my_args+=("-p$my_pass")
    mysql "${my_args[@]}" -e "CREATE DATABASE $name"
    drop_sql="mysql ${my_args[*]} -e 'DROP DATABASE $name'"
    url="$(python3 -c '
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1])
print(u.urlunsplit((p.scheme, p.netloc, "/" + sys.argv[2], p.query, "")))' "$db_url" "$name")"
    ;;
  *) echo "--database-url must be postgres://… or mysql://… (SQLite is the default)" >&2; exit 2 ;;
esac

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
export HERALD_DATABASE_URL="$url" HERALD_DATA_DIR="$work" HERALD_LOG="${HERALD_LOG:-warn}"
key="$("$bin" keys create --name load)"
"$bin" serve --listen "127.0.0.1:$port" >"$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -sf "$base/healthz" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "herald serve exited:"; cat "$out/serve.log"; exit 1; }
  sleep 0.1
done
curl -sf "$base/healthz" >/dev/null || { echo "herald serve did not answer /healthz in 10 s" >&2; exit 1; }
curl -sf -o /dev/null -H "Authorization: Bearer $key" -H 'Content-Type: application/json' "$base/v1/rules" -d '{
  "name": "load", "trigger_type": "load.test", "channel": "inbox", "category": "load", "enabled": true,
  "template": {"fallback_locale": "en", "locales": {"en": {
    "subject": "Load {{ payload.n }}", "text": "Hello {{ user.id }}, this is message {{ payload.n }}."}}}}'

# One sample a second: RSS from /proc, delivered and outbox counts from
# /metrics (the outbox gauges are read from the database at scrape time).
from_metrics() { # prints: sent scheduled sending terminal
  awk '/^herald_deliveries_total\{/ && /channel="inbox"/ && /outcome="sent"/ { sent += $NF }
       /^herald_outbox_rows\{/ { if ($0 ~ /status="scheduled"/) sch += $NF; else if ($0 ~ /status="sending"/) sng += $NF; else term += $NF }
       END { printf "%d\t%d\t%d\t%d\n", sent, sch, sng, term }'
}
# Times are seconds since the start of the load ($EPOCHREALTIME), not
# sample counts: a scrape can take a while on a saturated machine.
start="$EPOCHREALTIME"
elapsed() { awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
sample() {
  printf 't\trss_kib\n' >"$out/rss.tsv"
  printf 't\tsent\tscheduled\tsending\tterminal\n' >"$out/metrics.tsv"
  while kill -0 "$pid" 2>/dev/null; do
    rss="$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)"
    printf '%s\t%s\n' "$(elapsed)" "$rss" >>"$out/rss.tsv"
    m="$(curl -sf --max-time 2 "$base/metrics" | from_metrics)"
    printf '%s\t%s\n' "$(elapsed)" "$m" >>"$out/metrics.tsv"
    sleep 1
  done
}
sample &
sampler=$!
trap 'kill $sampler 2>/dev/null || true; cleanup' EXIT

echo "load: $backend, wrk -t$threads -c$connections -d${duration}s against $base (server pid $pid)"
wrk -t"$threads" -c"$connections" -d"${duration}s" --timeout 10s -s bench/load.lua "$base" -- "$key" "$$" \
  >"$out/wrk.txt" 2>&1
load_end="$(elapsed)"

# Wait for the worker to deliver everything the load planned (bounded).
accepted="$(awk '$1 == "STATUS" && $2 >= 200 && $2 < 300 { s += $3 } END { printf "%d", s }' "$out/wrk.txt")"
deadline=$((SECONDS + drain_timeout))
while :; do
  read -r sent scheduled sending _ < <(curl -sf --max-time 5 "$base/metrics" | from_metrics)
  [ "$sent" -ge "$accepted" ] && [ "$scheduled" -eq 0 ] && [ "$sending" -eq 0 ] && break
  [ "$SECONDS" -ge "$deadline" ] && break
  sleep 1
done
sleep 2 # two more samples after the drain, so the series shows it settle
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
status_json="$(HERALD_LOG=error "$bin" status --json)"

python3 - "$out" "$load_end" "$duration" "$connections" "$threads" "$backend" "$status_json" <<'EOF'
import json, sys
out, load_end, duration, conns, threads, backend, status = sys.argv[1:8]
load_end = float(load_end)
wrk = {}
statuses = {}
for line in open(f"{out}/wrk.txt"):
    p = line.split()
    if not p:
        continue
    if p[0] == "STATUS":
        statuses[int(p[1])] = int(p[2])
    elif p[0] == "LATENCY_US":
        wrk[p[1]] = int(p[2]) / 1000
    elif p[0] in ("REQUESTS", "DURATION_US"):
        wrk[p[0]] = int(p[1])
    elif p[0] == "SOCKET_ERRORS":
        wrk["socket"] = dict(zip(["connect", "read", "write", "timeout"], map(int, p[1:5])))
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/metrics.tsv")][1:]
rows = [[float(r[0])] + list(map(int, r[1:])) for r in rows if len(r) == 5 and all(x.isdigit() for x in r[1:])]
rss = [int(l.split("\t")[1]) for l in list(open(f"{out}/rss.tsv"))[1:] if l.split("\t")[1].strip().isdigit()]
secs = wrk["DURATION_US"] / 1e6
accepted = sum(n for s, n in statuses.items() if 200 <= s < 300)
errors = {s: n for s, n in statuses.items() if not 200 <= s < 300}
sent_at_load_end = max((r[1] for r in rows if r[0] <= load_end), default=0)
final_sent = rows[-1][1] if rows else 0
counts = {c["status"]: c["count"] for c in json.loads(status)["counts"]}
rows_total = sum(counts.values())
drained_at = next((r[0] for r in rows if r[1] >= rows_total and r[2] == 0 and r[3] == 0), None)
print(f"backend            {backend}; wrk {threads} threads, {conns} connections, {duration} s, on the same host")
print(f"triggers accepted  {accepted} (2xx) in {secs:.1f} s = {accepted / secs:.0f} triggers/s")
print(f"errors by status   {errors or 'none'}; socket errors {wrk.get('socket')}")
print(f"latency (ms)       p50 {wrk['p50']:.2f}  p90 {wrk['p90']:.2f}  p99 {wrk['p99']:.2f}  p99.9 {wrk['p99.9']:.2f}  max {wrk['max']:.2f}")
print(f"drain (inbox sent) {sent_at_load_end} during the load = {sent_at_load_end / secs:.0f} rows/s; "
      f"all {rows_total} delivered {drained_at if drained_at is not None else 'NOT DRAINED'} s after the start "
      f"= {rows_total / drained_at if drained_at else 0:.0f} rows/s overall, "
      f"{(rows_total - sent_at_load_end) / (drained_at - load_end) if drained_at and drained_at > load_end else 0:.0f} rows/s after the load")
print(f"outbox at the end  {counts} (requests cut in flight when wrk stopped: {sum(counts.values()) - accepted})")
if rss:
    third = len(rss) // 3
    print(f"server RSS (MiB)   first {rss[0] / 1024:.1f}, at 1/3 {rss[third] / 1024:.1f}, last {rss[-1] / 1024:.1f}, "
          f"max {max(rss) / 1024:.1f} over {len(rss)} samples in {rows[-1][0] if rows else 0:.0f} s")
    print("RSS series (MiB)   " + " ".join(f"{r / 1024:.0f}" for r in rss))
problems = []
if any(s >= 500 for s in statuses):
    problems.append(f"server errors: {errors}")
# One enabled rule: every trigger the server took planned one row.
if not accepted <= rows_total <= accepted + int(conns):
    problems.append(f"wrk saw {accepted} triggers accepted but the outbox holds {rows_total} rows "
                    f"(expected {accepted} to {accepted + int(conns)}: the requests cut at the end)")
if counts.get("sent", 0) != rows_total or final_sent != rows_total:
    problems.append(f"the outbox holds {rows_total} rows but {counts.get('sent', 0)} are sent "
                    f"({final_sent} deliveries counted): {counts}")
if counts.get("scheduled", 0) or counts.get("sending", 0):
    problems.append(f"not drained within the timeout: {counts}")
for p in problems:
    print("FAIL: " + p)
sys.exit(1 if problems else 0)
EOF
