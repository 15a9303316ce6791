#!/usr/bin/env bash
# Third-party tools against a running server (issue 13, items 11 and 13):
# the OpenAPI document through openapi-spec-validator and
# openapi-python-client (a Python client is generated from it; a warning
# fails), and /metrics through `promtool check metrics`, in the classic text
# format it gets by default and as OpenMetrics when asked (promtool reads
# the former; the latter is only checked to be served). Bounded: each tool
# has a timeout, the server is killed on exit.
set -euo pipefail
bin="${1:?usage: interop.sh PATH/TO/herald}"
work="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait "${pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"
HERALD_LOG=warn "$bin" serve --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
base="http://127.0.0.1:$port"

curl -sf "$base/v1/openapi.json" >openapi.json
timeout 120 openapi-spec-validator openapi.json
timeout 300 openapi-python-client generate --path openapi.json --output-path client --overwrite --fail-on-warning
test -f client/pyproject.toml
echo "openapi-python-client: generated $(find client -name '*.py' | wc -l) Python files"

curl -sf "$base/metrics" >metrics.txt
timeout 60 promtool check metrics <metrics.txt
echo "promtool check metrics: OK ($(grep -c '^# TYPE' metrics.txt) metric families)"
curl -sf -H 'Accept: application/openmetrics-text; version=1.0.0' -D headers.txt "$base/metrics" >metrics.om
grep -qi '^content-type: application/openmetrics-text' headers.txt
tail -n1 metrics.om | grep -qx '# EOF'
echo "OpenMetrics served on request"
