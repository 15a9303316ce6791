#!/usr/bin/env bash
# Fuzzes the running server against its own OpenAPI document: any 5xx, any
# response that does not match the documented schema, status code or content
# type fails the run. Bounded: a fixed number of examples per operation.
set -euo pipefail
bin="${1:?usage: schemathesis.sh PATH/TO/herald}"
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/serve-herald.sh" schemathesis
# Every check schemathesis has, including "schema-valid request rejected"
# and "schema-violating request accepted": the document states what the
# server checks, exactly. What it cannot state is in .ci/schemathesis.toml,
# with why (docs/api.md lists it).
checks=all
config="$here/schemathesis.toml"
# A real link of each kind, signed with this data directory's secret as
# `address::AddressKeys` signs them, for the config to put in /u/{token} and
# /p/{token}: nothing else gets past their signature check.
eval "$(python3 - "$work/herald-secret" <<'PY'
import base64, hashlib, hmac, sys
secret = open(sys.argv[1]).read().strip().encode()
def mac(key, data): return hmac.new(key, data, hashlib.sha256).digest()
def b64(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
user = b"schemathesis"
address_hash = mac(mac(secret, b"herald address hash v1"), b"schemathesis@example.com").hex()
payload = b"\n".join([address_hash.encode(), b"schemathesis", user])
print("export HERALD_ST_UNSUBSCRIBE_TOKEN=" + b64(payload) + "." + b64(mac(mac(secret, b"herald unsubscribe token v1"), payload)))
print("export HERALD_ST_PREFERENCES_TOKEN=" + b64(user) + "." + b64(mac(mac(secret, b"herald preferences link v1"), user)))
PY
)"
failed=0
export HERALD_ST_API_KEY="$key"
export HERALD_ST_USER_TOKEN="$(curl -sf -X POST -H "Authorization: Bearer $key" "http://127.0.0.1:$port/v1/users/schemathesis/token" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"
# The operator API (the events stream never ends by itself, so it is left
# to the tests); the credentials come from the config, by security scheme.
timeout 600 schemathesis --config-file "$config" run "http://127.0.0.1:$port/v1/openapi.json" \
  --exclude-tag inbox --exclude-path /v1/events/stream \
  --checks "${SCHEMATHESIS_CHECKS:-$checks}" --max-examples 30 --seed 20261202 --no-color || failed=1
# The end-user inbox API (likewise without its stream).
timeout 600 schemathesis --config-file "$config" run "http://127.0.0.1:$port/v1/openapi.json" \
  --include-tag inbox --exclude-path /v1/inbox/stream \
  --checks "${SCHEMATHESIS_CHECKS:-$checks}" --max-examples 30 --seed 20261202 --no-color || failed=1
if grep -q "panicked" "$work/serve.log"; then
  echo "the server panicked during the run:"; cat "$work/serve.log"; exit 1
fi
exit "$failed"
