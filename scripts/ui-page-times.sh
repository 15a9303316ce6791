#!/usr/bin/env bash
# Times the operator screen's pages against a database holding ROWS outbox
# rows and ROWS send-log rows (made by `herald bench`, all for one user,
# "bench-user", which is the worst case for that user's send-log page).
# Prints, per page, the HTTP status and the median of 5 loads as curl sees
# them (time to the last byte, on 127.0.0.1). Bounded: one bench run, then 5
# loads per page, then everything it started is stopped.
#
#   bash scripts/ui-page-times.sh target/release/herald [ROWS] [DATABASE_URL]
#
# DATABASE_URL must be a scratch database (bench drains whatever is due
# there); default a temporary SQLite file.
set -euo pipefail
bin="$(realpath "${1:?usage: ui-page-times.sh PATH/TO/herald [ROWS] [DATABASE_URL]}")"
rows="${2:-100000}"
work="$(mktemp -d)"
db="${3:-sqlite://$work/bench.db}"
port=$((20000 + RANDOM % 20000))
base="http://127.0.0.1:$port"
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait "${pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"
echo "filling $db with $rows rows (herald bench)..."
"$bin" bench --rows "$rows" --bench-database-url "$db" | sed 's/^/  /'
printf '%s\n' "a password for the timing run" |
  "$bin" --database-url "$db" operators add --email timing@example.com --password-stdin >/dev/null
HERALD_LOG=warn "$bin" --database-url "$db" serve --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.2; done
csrf="$(curl -s -c jar "$base/ui/login" | grep -o 'name="csrf" value="[0-9a-f]*"' | head -n1 | sed 's/.*value="//; s/"//')"
curl -s -b jar -c jar -o /dev/null --data-urlencode "csrf=$csrf" --data-urlencode "email=timing@example.com" \
  --data-urlencode "password=a password for the timing run" "$base/ui/login"
printf '%-34s %6s %10s\n' page status median_ms
for page in /ui/rules /ui/outbox "/ui/outbox?status=sent" "/ui/outbox?user=bench-user" "/ui/sends?q=bench-user" \
  /ui/suppressions /ui/audit; do
  status=""
  times=()
  for _ in 1 2 3 4 5; do
    out="$(curl -s -b jar -o /dev/null -w '%{http_code} %{time_total}' "$base$page")"
    status="${out% *}"
    times+=("${out#* }")
  done
  median="$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)"
  printf '%-34s %6s %10.1f\n' "$page" "$status" "$(echo "$median * 1000" | bc -l)"
done
