-- wrk script for tenant A: its hostile guard runs the attack named by the
-- tool (FLOOD_ATTACK: loop | alloc).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tenant":"a","event":{"run_id":"flood","tool_name":"' ..
  (os.getenv("FLOOD_ATTACK") or "loop") .. '","call_id":"c1","args":{}}}'
done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d rps=%.0f p99_us=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6), latency:percentile(99)))
end
