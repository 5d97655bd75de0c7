-- wrk script: POST one steering event (a call every steering guard lets
-- through, so the whole chain runs) and report p50/p99 in microseconds.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("TOOLGATE_BENCH_BODY") or
  '{"event":{"run_id":"bench","tool_name":"run_query","call_id":"c1",' ..
  '"args":{"sql":"SELECT * FROM users WHERE id = 1"}},"state":{"tenant_id":"t"}}'

done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT requests=%d errors=%d rps=%.0f p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    summary.requests,
    summary.errors.status + summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout,
    summary.requests / secs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
