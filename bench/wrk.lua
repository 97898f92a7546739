-- Closed loop for wrk: POST a rotating set of AdmissionReview bodies (file paths as script args),
-- then print one machine-readable line with the latency percentiles (microseconds).
local requests = {}
local n = 0

function init(args)
  for _, path in ipairs(args) do
    local f = assert(io.open(path, "rb"))
    local body = f:read("*a")
    f:close()
    table.insert(requests, wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body))
  end
end

function request()
  n = n % #requests + 1
  return requests[n]
end

function done(summary, latency, _)
  local e = summary.errors
  io.write(string.format("WRK requests=%d duration_us=%d p50=%d p90=%d p99=%d max=%d status_errors=%d io_errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.status, e.connect + e.read + e.write + e.timeout))
end
