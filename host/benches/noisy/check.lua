-- wrk script for tenant B: POST a steering call that tenant B's chain must
-- refuse (the global sql-guard steers a DELETE without WHERE). Any answer
-- that is not that skip — a non-200, or a 200 whose verdict is wrong
-- because a guard faulted — counts as an error.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tenant":"b","event":{"run_id":"bench","tool_name":"run_query","call_id":"c1",' ..
  '"args":{"sql":"DELETE FROM users"}}}'

wrong = 0
response = function(status, headers, body)
  if status ~= 200 or not string.find(body, "Add a WHERE clause", 1, true) then
    wrong = wrong + 1
  end
end

-- Each wrk thread has its own Lua state: publish the count per thread.
local threads = {}
setup = function(thread) table.insert(threads, thread) end
done = function(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do bad = bad + (t:get("wrong") or 0) end
  local secs = summary.duration / 1e6
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout
  io.write(string.format(
    "RESULT requests=%d wrong=%d transport_errors=%d rps=%.0f p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, bad, errors, summary.requests / secs,
    latency:percentile(50), latency:percentile(99), latency.max))
end
