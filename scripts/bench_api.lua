-- wrk script of scripts/bench_api.py. Settings come from the environment (read when the script loads,
-- so wrk knows at once whether requests are static or built one by one):
--   BENCH_MODE     static (the URL as given) | byid (GET a random filled subscription) | post (create one)
--   BENCH_KEY      the X-API-Key header (empty: none)
--   BENCH_PREFIX   byid: the filled ids' prefix; post: a prefix that makes every network_id new
--   BENCH_ROWS     byid: ids run from <prefix>000000000000000 to rows - 1
-- done() prints one line `WRK_RESULT {json}` with counts and latency percentiles in microseconds.
local mode = os.getenv("BENCH_MODE") or "static"
local key = os.getenv("BENCH_KEY") or ""
local prefix = os.getenv("BENCH_PREFIX") or ""
local rows = tonumber(os.getenv("BENCH_ROWS") or "1")
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function init(args)
  if key ~= "" then wrk.headers["X-API-Key"] = key end
  if mode == "post" then
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/json"
  end
  math.randomseed(tid * 7919 + os.time())
  counter = 0
end

if mode == "byid" then
  request = function()
    return wrk.format(nil, string.format("/api/v1/subscriptions/%s%015d", prefix, math.random(0, rows - 1)))
  end
elseif mode == "post" then
  request = function()
    counter = counter + 1
    return wrk.format(nil, nil, nil,
      string.format('{"entity_type":"contact","network_id":"%s-%d-%d"}', prefix, tid, counter))
  end
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "non_2xx": %d, ' ..
    '"socket_errors": %d}\n', summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), errors.status, errors.connect + errors.read + errors.write + errors.timeout))
end
