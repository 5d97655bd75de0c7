//! A fleet on this machine: a real `haproxy` (Debian's package; `.ci/run`
//! installs it) in front of three `toolgate serve` replicas that share a
//! real Redis, as `deploy/` describes, each serving the same signed policy
//! set from a real registry (`serve --set`). Under steady load through the load
//! balancer one replica is SIGKILLed and another SIGTERMed (draining):
//! every call is answered by a guard, and a budget never lets more through
//! than its limit.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::KillOnDrop;
use crate::redis_server::RedisServer;

/// Calls per run, and how many of them the budget lets through.
const CALLS: u32 = 5;
const LIMIT: u32 = 3;
/// Clients sending at once (each one call at a time).
const WORKERS: u32 = 4;
/// How long a replica keeps serving after SIGTERM (`--drain-ms`).
const DRAIN: Duration = Duration::from_millis(1500);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// haproxy in the foreground with `deploy/local/haproxy.cfg` (the file
/// the deploy recipe uses), balancing over `replicas` (host:port).
fn haproxy(port: u16, replicas: [&str; 3]) -> KillOnDrop {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/haproxy.cfg");
    let spawned = Command::new("haproxy")
        .args(["-db", "-q", "-f"])
        .arg(&config)
        .env("TOOLGATE_LB", format!("127.0.0.1:{port}"))
        .env("TOOLGATE_R0", replicas[0])
        .env("TOOLGATE_R1", replicas[1])
        .env("TOOLGATE_R2", replicas[2])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        Ok(child) => KillOnDrop(child),
        Err(e) => {
            panic!("cannot start haproxy ({e}): install Debian's haproxy package (.ci/run does)")
        }
    }
}

/// Waits until `url` answers 200, or panics naming it.
async fn until_ok(client: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = client.get(url).send().await
            && r.status() == reqwest::StatusCode::OK
        {
            return;
        }
        assert!(Instant::now() < deadline, "{url} never answered 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the load saw.
#[derive(Default)]
struct Tally {
    /// Calls answered 200 (each call counted once, however many tries).
    answered: AtomicU64,
    /// Answers of 503 (retried after a pause, as the client should).
    unavailable: AtomicU64,
    /// Tries the load balancer could not answer at all (retried).
    failed: AtomicU64,
    /// Per run, how many of its calls proceeded: `(run, proceeded)`.
    runs: std::sync::Mutex<Vec<(String, u32)>>,
    /// Calls whose guard faulted (`fault` in the trace, then skipped: the
    /// call proceeds), with the fault: consulted, never decided by it.
    faults: std::sync::Mutex<Vec<String>>,
}

/// One call through the balancer, tried until a guard answers it (200):
/// the decision, `null` (proceed) or the budget's cancellation, and
/// whether the guard decided it (not a fault, which the trace names).
async fn call(
    client: &reqwest::Client,
    base: &str,
    run: &str,
    id: u32,
    tally: &Tally,
) -> (Value, bool) {
    let body = json!({"event": {"run_id": run, "tool_name": "send_email",
        "call_id": format!("{run}-{id}"), "args": {"to": "a@example.com"}}});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "call {run}-{id} never answered");
        let sent = client
            .post(format!("{base}/v1/steering?trace=1"))
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status() == reqwest::StatusCode::OK => {
                tally.answered.fetch_add(1, Ordering::Relaxed);
                let answer: Value = r.json().await.expect("a JSON answer");
                let trace = answer["trace"].as_array().expect("a trace");
                assert_eq!(trace.len(), 1, "the budget guard consulted: {answer}");
                let decided = trace[0]["outcome"] != "fault";
                if !decided {
                    let fault = format!("{run}-{id}: {}", trace[0]);
                    tally.faults.lock().expect("tally").push(fault);
                }
                return (answer["result"].clone(), decided);
            }
            Ok(r) => {
                assert_eq!(
                    r.status(),
                    reqwest::StatusCode::SERVICE_UNAVAILABLE,
                    "call {run}-{id}: {}",
                    r.text().await.unwrap_or_default()
                );
                tally.unavailable.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Runs of `CALLS` calls each, one after another, until `stop`.
async fn load(worker: u32, base: String, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let client = reqwest::Client::new();
    let cancelled = json!({"action": "skip", "is_error": false,
        "content": "Tool call limit exceeded. Do not call 'send_email' again."});
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        let run = format!("w{worker}-{k}");
        let mut proceeded = 0;
        for id in 0..CALLS {
            let (decision, decided) = call(&client, &base, &run, id, &tally).await;
            if decision.is_null() {
                // A faulted guard is skipped, the call proceeds: counted
                // apart (`faults`), not as the budget's.
                proceeded += u32::from(decided);
            } else {
                assert_eq!(decision, cancelled, "{run}-{id}: a decision of no guard");
            }
        }
        tally.runs.lock().expect("tally").push((run, proceeded));
        k += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_behind_haproxy_lose_no_call_and_keep_the_budget_while_one_is_killed_and_one_drains()
 {
    // The budget reaches every replica as one signed policy set, pushed
    // once to a real registry and followed by its tag.
    let dir = crate::state_redis::send_email_limit_dir(LIMIT);
    let registry = crate::oci_registry::OciRegistry::start();
    let keys = tempfile::tempdir().expect("tempdir");
    let (key, public) = crate::fleet_sets::keygen(keys.path(), "release");
    let reference = format!("oci://{}/policies/budget:prod", registry.authority());
    let digest = crate::fleet_sets::push_set(dir.path(), &reference, Some(&key));
    let url = RedisServer::shared().fresh_url();
    let drain = DRAIN.as_millis().to_string();
    let public = public.display().to_string();
    let args = [
        "--trusted-key",
        public.as_str(),
        "--require-signatures",
        "--poll-ms",
        "1000",
        "--state",
        url.as_str(),
        "--no-cache",
        "--drain-ms",
        drain.as_str(),
    ];
    let replica = || {
        let (child, addr) = crate::fleet_sets::serve_set(&reference, &args);
        (child, addr.expect("a replica serves the set"))
    };
    let (mut killed, addr_killed) = replica();
    let (mut drained, addr_drained) = replica();
    let (_kept, addr_kept) = replica();
    let client = reqwest::Client::new();
    for addr in [&addr_killed, &addr_drained, &addr_kept] {
        until_ok(&client, &format!("http://{addr}/readyz")).await;
        let set = crate::fleet_sets::set_of(&client, addr).await;
        assert_eq!(set["digest"], digest.as_str(), "{addr}: {set}");
    }
    let port = free_port();
    let _balancer = haproxy(port, [&addr_killed, &addr_drained, &addr_kept]);
    let base = format!("http://127.0.0.1:{port}");
    until_ok(&client, &format!("{base}/readyz")).await;

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| tokio::spawn(load(w, base.clone(), Arc::clone(&stop), Arc::clone(&tally))))
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before_kill = tally.answered.load(Ordering::Relaxed);
    killed.kill().expect("SIGKILL");
    let _ = killed.wait();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // SIGTERM: the replica says it is draining at once, serves on, then
    // stops accepting and exits cleanly within its bound.
    let terminated_at = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &drained.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let mut said_draining = false;
    let mut exited = None;
    while terminated_at.elapsed() < DRAIN + Duration::from_secs(30) {
        if let Some(status) = drained.try_wait().expect("try_wait") {
            exited = Some(status);
            break;
        }
        if !said_draining
            && let Ok(r) = client
                .get(format!("http://{addr_drained}/readyz"))
                .send()
                .await
        {
            let status = r.status();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            if status == reqwest::StatusCode::OK {
                // Until the signal is handled.
                assert!(
                    terminated_at.elapsed() < Duration::from_secs(2),
                    "still ready long after SIGTERM: {body}"
                );
                continue;
            }
            assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE, "{body}");
            assert_eq!(body["status"], "draining", "{body}");
            said_draining = true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let exited = exited.expect("the drained replica exited within its bound");
    assert!(
        exited.success(),
        "a drained replica exits cleanly: {exited}"
    );
    assert!(
        said_draining,
        "/readyz said draining before the replica went"
    );
    assert!(
        terminated_at.elapsed() >= DRAIN,
        "the replica served its whole drain"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.expect("a worker panicked");
    }

    let answered = tally.answered.load(Ordering::Relaxed);
    let runs = std::mem::take(&mut *tally.runs.lock().expect("tally"));
    let faults = std::mem::take(&mut *tally.faults.lock().expect("tally"));
    eprintln!(
        "{answered} calls in {} runs; {} answers of 503 and {} failed tries, retried; \
         {} guard faults: {faults:?}",
        runs.len(),
        tally.unavailable.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        faults.len()
    );
    assert!(
        answered > before_kill && runs.len() > 10,
        "the load went on through the kill and the drain: {answered} calls, {} runs",
        runs.len()
    );
    // A worker stops between runs: every call of every run was answered.
    assert_eq!(answered, runs.len() as u64 * u64::from(CALLS));
    // Never more than the limit; fewer only for a run whose call was in
    // flight on the killed replica after its count landed in Redis (one
    // call per worker at most), retried elsewhere and counted again, or
    // whose guard faulted (a machine this loaded can miss a deadline).
    let over: Vec<_> = runs.iter().filter(|(_, p)| *p > LIMIT).collect();
    assert!(over.is_empty(), "runs over their budget: {over:?}");
    let short: usize = runs.iter().map(|(_, p)| (LIMIT - p) as usize).sum();
    assert!(
        short <= WORKERS as usize + faults.len(),
        "{short} calls short of the budget across {} runs",
        runs.len()
    );

    // After it all, a fresh run through the one replica left is exact.
    let fresh = Tally::default();
    let mut proceeded = 0;
    for id in 0..CALLS {
        let (decision, decided) = call(&client, &base, "after", id, &fresh).await;
        assert!(decided, "{:?}", fresh.faults);
        proceeded += u32::from(decision.is_null());
    }
    assert_eq!(proceeded, LIMIT);
}
