#!/usr/bin/env bash
# Fuzzes the running server against its own OpenAPI document: any 5xx, any
# response that does not match the documented schema, status code or content
# type fails the run. Bounded: a fixed number of examples per operation.
set -euo pipefail
bin="${1:?usage: schemathesis.sh PATH/TO/herald}"
work="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait "${pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"
key="$("$bin" keys create --name schemathesis 2>/dev/null)"
HERALD_LOG=warn "$bin" serve --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
checks=not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance
# The operator API, with an API key (the events stream never ends by
# itself, so it is left to the tests).
timeout 600 schemathesis run "http://127.0.0.1:$port/v1/openapi.json" \
  -H "Authorization: Bearer $key" --exclude-tag inbox --exclude-path /v1/events/stream \
  --checks "${SCHEMATHESIS_CHECKS:-$checks}" --max-examples 30 --seed 20261202 --no-color
# The end-user inbox API, with a user's token (the stream never ends by
# itself, so it is left to the tests).
token="$(curl -sf -X POST -H "Authorization: Bearer $key" "http://127.0.0.1:$port/v1/users/schemathesis/token" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"
timeout 600 schemathesis run "http://127.0.0.1:$port/v1/openapi.json" \
  -H "Authorization: Bearer $token" --include-tag inbox --exclude-path /v1/inbox/stream \
  --checks "${SCHEMATHESIS_CHECKS:-$checks}" --max-examples 30 --seed 20261202 --no-color
if grep -q "panicked" "$work/serve.log"; then
  echo "the server panicked during the run:"; cat "$work/serve.log"; exit 1
fi
