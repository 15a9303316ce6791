-- wrk script for bench/load.sh: POST /v1/triggers with a unique user id and
-- idempotency key per request (a repeated key would be answered from the
-- first request and plan nothing, which would flatter the drain figures),
-- and a count of responses by status.
--
-- Arguments (after `--`): API key, run nonce.

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  key = args[1]
  nonce = args[2] or "run"
  counter = 0
  statuses = {}
  headers = {
    ["Authorization"] = "Bearer " .. key,
    ["Content-Type"] = "application/json",
  }
end

function request()
  counter = counter + 1
  local id = string.format("%s-%d-%d", nonce, tid, counter)
  local body = string.format(
    '{"type":"load.test","user_id":"u-%s","idempotency_key":"k-%s","payload":{"n":%d,"name":"load"}}',
    id, id, counter)
  return wrk.format("POST", "/v1/triggers", headers, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("statuses")) do
      total[status] = (total[status] or 0) + n
    end
  end
  -- One machine-readable line per fact; load.sh parses these.
  for status, n in pairs(total) do
    io.write(string.format("STATUS %d %d\n", status, n))
  end
  io.write(string.format("REQUESTS %d\n", summary.requests))
  io.write(string.format("DURATION_US %d\n", summary.duration))
  io.write(string.format("SOCKET_ERRORS %d %d %d %d\n", summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout))
  for _, p in ipairs({50, 90, 99, 99.9}) do
    io.write(string.format("LATENCY_US p%s %d\n", p, latency:percentile(p)))
  end
  io.write(string.format("LATENCY_US max %d\n", latency.max))
end
