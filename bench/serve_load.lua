-- wrk script for `engram serve`: appends and context builds, alternating, over 16 sessions.
-- Usage: see docs/benchmarks-history.md ("engram serve under load").
local counter = 0
local key = os.getenv("ENGRAM_BENCH_KEY") or ""

request = function()
  counter = counter + 1
  local session = "load" .. (math.floor(counter / 2) % 16)
  local headers = { ["Content-Type"] = "application/json" }
  if key ~= "" then headers["Authorization"] = "Bearer " .. key end
  if counter % 2 == 0 then
    local body = '{"messages":[{"role":"user","content":"turn ' .. counter ..
      ': please look at src/lib.rs line 42, the test fails with error E0433"}]}'
    return wrk.format("POST", "/v1/sessions/" .. session .. "/messages", headers, body)
  else
    return wrk.format("POST", "/v1/sessions/" .. session .. "/context", headers, '{"budget": 4000}')
  end
end

local errors = 0
response = function(status, headers, body)
  if status >= 300 then errors = errors + 1 end
end

done = function(summary, latency, requests)
  io.write(string.format("non-2xx: %d, socket errors: connect %d read %d write %d timeout %d\n",
    summary.errors.status, summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.timeout))
  io.write(string.format("requests: %d in %.1f s = %.0f/s; latency p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
