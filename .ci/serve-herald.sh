# Sourced by interop.sh and schemathesis.sh once `bin` is set, with the
# API key's name: `. "$here/serve-herald.sh" NAME`. Starts `$bin serve` in
# a fresh directory (`work`, the current directory from then on) on a
# random port (`port`) with an API key named NAME (`key`), waits until
# /healthz answers, and on exit stops the server (`pid`) and removes `work`.
work="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait "${pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"
key="$("$bin" keys create --name "$1" 2>/dev/null)"
HERALD_LOG=warn "$bin" serve --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
