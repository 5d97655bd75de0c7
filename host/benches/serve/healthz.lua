-- wrk script: GET /healthz (the baseline: HTTP + routing, no guard).
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
