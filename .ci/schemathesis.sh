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
timeout 600 schemathesis run "http://127.0.0.1:$port/v1/openapi.json" \
  -H "Authorization: Bearer $key" \
  --checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance \
  --max-examples 30 --seed 20261202 --no-color
if grep -q "panicked" "$work/serve.log"; then
  echo "the server panicked during the run:"; cat "$work/serve.log"; exit 1
fi
