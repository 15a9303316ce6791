#!/usr/bin/env bash
# Third-party tools against a running server (issue 13, items 11 and 13):
# the OpenAPI document through openapi-spec-validator and
# openapi-python-client (a Python client is generated from it; a warning
# fails), and /metrics through `promtool check metrics`, in the classic text
# format it gets by default and as OpenMetrics when asked (promtool reads
# the former; the latter is only checked to be served). Bounded: each tool
# has a timeout, the server is killed on exit.
#
# The generated clients are used, not only generated (issue 27): the Python
# client drives a rule -> trigger -> inbox -> read flow against this server
# (.ci/interop/flow.py), and the TypeScript types openapi-typescript makes
# from the document must compile with `tsc --strict` for a script that posts
# a trigger with a payload and reads `data.url` from an inbox item, which
# then runs against the server too (.ci/interop/flow.ts). The npm tools are
# pinned in .ci/interop/package-lock.json; the Python client needs httpx and
# attrs, which openapi-python-client brings.
set -euo pipefail
bin="${1:?usage: interop.sh PATH/TO/herald}"
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/serve-herald.sh" interop
base="http://127.0.0.1:$port"

curl -sf "$base/v1/openapi.json" >openapi.json
timeout 120 openapi-spec-validator openapi.json
timeout 300 openapi-python-client generate --path openapi.json --output-path client --overwrite --fail-on-warning
test -f client/pyproject.toml
echo "openapi-python-client: generated $(find client -name '*.py' | wc -l) Python files"
PYTHONPATH="$work/client" timeout 120 python3 "$here/interop/flow.py" "$base" "$key"

# npm ci into the work directory, not the checkout.
cp "$here/interop/package.json" "$here/interop/package-lock.json" "$here/interop/flow.ts" "$work/"
timeout 300 npm ci --no-audit --no-fund --silent
timeout 120 npx --no-install openapi-typescript openapi.json -o schema.ts
timeout 300 npx --no-install tsc --strict --target es2022 --module nodenext --moduleResolution nodenext \
  --lib es2022,dom --outDir ts-out flow.ts schema.ts
echo "openapi-typescript: types compile with tsc --strict ($(npx --no-install tsc --version))"
user_token="$(curl -sf -X POST -H "Authorization: Bearer $key" "$base/v1/users/interop-user/token" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"
HERALD_URL="$base" HERALD_KEY="$key" HERALD_USER_TOKEN="$user_token" timeout 120 node ts-out/flow.js

curl -sf "$base/metrics" >metrics.txt
timeout 60 promtool check metrics <metrics.txt
echo "promtool check metrics: OK ($(grep -c '^# TYPE' metrics.txt) metric families)"
curl -sf -H 'Accept: application/openmetrics-text; version=1.0.0' -D headers.txt "$base/metrics" >metrics.om
grep -qi '^content-type: application/openmetrics-text' headers.txt
tail -n1 metrics.om | grep -qx '# EOF'
echo "OpenMetrics served on request"
