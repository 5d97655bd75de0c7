-- wrk script for tenant A: ordinary calls, nothing hostile (a SELECT with a
-- WHERE, which A's sql-guard lets through).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tenant":"a","event":{"run_id":"flood","tool_name":"run_query","call_id":"c1",' ..
  '"args":{"sql":"SELECT * FROM users WHERE id = 1"}}}'
done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d rps=%.0f p99_us=%d non2xx=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6), latency:percentile(99),
    summary.errors.status))
end
