# Sourced by interop.sh and schemathesis.sh once `bin` is set, with the
# API key's name: `. "$here/serve-herald.sh" NAME`. Starts `$bin serve` in
# a fresh directory (`work`, the current directory from then on) on a free
# port (`port`) with an API key named NAME (`key`), waits until /healthz
# answers from this server (not another one that happens to hold the port),
# and on exit stops the server (`pid`) and removes `work`. When the calling
# script fails, the server's log and the failing line are printed first:
# a CI run once stopped here with nothing printed after the step's title.
work="$(mktemp -d)"
cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "serve-herald: the script failed (exit $rc); the server's log:" >&2
    tail -n 60 "$work/serve.log" >&2 2>/dev/null || true
  fi
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null
  wait "${pid:-}" 2>/dev/null || true
  rm -rf "$work"
  # No `return "$rc"`: the script exits with its own status whatever this
  # returns, and a non-zero return here fired the ERR trap below, which
  # then named "line 1: exit $failed" as a failure of its own.
  return 0
}
trap cleanup EXIT
trap 'echo "serve-herald: failed at line $LINENO of $0: $BASH_COMMAND" >&2' ERR
cd "$work"
# A port nobody listens on: a random one could be held by a server a test
# left behind, and /healthz would then answer for the wrong process.
for _ in $(seq 1 50); do
  port=$((20000 + RANDOM % 20000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
done
key="$("$bin" keys create --name "$1")"
HERALD_LOG=warn "$bin" serve --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if ! kill -0 "$pid" 2>/dev/null || ! curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; then
  echo "serve-herald: herald serve on 127.0.0.1:$port did not come up" >&2
  exit 1
fi
