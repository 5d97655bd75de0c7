//! Policy sets that reach every replica: a plugin directory pushed as one
//! signed OCI artifact (`toolgate push --set --sign`) into a real registry
//! (Debian's `docker-registry`), followed by two `toolgate serve --set`
//! replicas polling its tag. Both converge on each good version, refuse
//! the bad ones (unsigned, signed by an untrusted key, a signature for
//! another digest, a tag moved to something that is not a set, a manifest
//! that does not parse) while the
//! version before keeps deciding, and keep serving with the registry
//! down; a restart with the registry down serves the version kept, a cold
//! one serves nothing.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate_tests::{NO_EMAIL, SQL_GUARD};

use crate::KillOnDrop;
use crate::oci_registry::OciRegistry;
use crate::signatures::toolgate;

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// `toolgate push --set DIR REFERENCE [--sign KEY]`: the digest printed
/// (`sha256:<hex>`).
pub(crate) fn push_set(dir: &Path, reference: &str, key: Option<&Path>) -> String {
    let dir = dir.display().to_string();
    let mut args = vec!["push", "--set", &dir, reference];
    let key = key.map(|k| k.display().to_string());
    if let Some(k) = &key {
        args.extend(["--sign", k]);
    }
    let pinned = toolgate(&args);
    let digest = pinned
        .trim()
        .rsplit('@')
        .next()
        .expect("a digest")
        .to_string();
    assert!(digest.starts_with("sha256:"), "{pinned}");
    digest
}

/// A plugin directory: `files` (name, component) at its root, and
/// `tenants/<t>/<name>` for each of `tenant_files`.
fn set_dir(files: &[(&str, &str)], tenant_files: &[(&str, &str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, component) in files {
        std::fs::copy(component, dir.path().join(name)).expect("copy");
    }
    for (tenant, name, component) in tenant_files {
        let t = dir.path().join("tenants").join(tenant);
        std::fs::create_dir_all(&t).expect("mkdir");
        std::fs::copy(component, t.join(name)).expect("copy");
    }
    dir
}

/// `toolgate serve --set REFERENCE ARGS`, its address once it listens;
/// `None` (and the lines it wrote) when it says it has no version to serve.
pub(crate) fn serve_set(reference: &str, args: &[&str]) -> (KillOnDrop, Result<String, String>) {
    let mut child = KillOnDrop::spawn(
        Command::new(BIN)
            .args(["serve", "--set", reference, "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = child.stderr.take().expect("stderr");
    let mut said = String::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("line");
        said.push_str(&line);
        said.push('\n');
        if let Some(at) = line.find(" on http://") {
            return (
                child,
                Ok(line[at + " on http://".len()..].trim().to_string()),
            );
        }
        if line.contains("no version to serve") {
            return (child, Err(said));
        }
    }
    panic!("toolgate serve --set ended: {said}");
}

/// `GET /v1/plugins`' `set`.
pub(crate) async fn set_of(client: &reqwest::Client, addr: &str) -> Value {
    let body: Value = client
        .get(format!("http://{addr}/v1/plugins"))
        .send()
        .await
        .expect("GET /v1/plugins")
        .json()
        .await
        .expect("JSON");
    body["set"].clone()
}

/// The plugins a steering call for tenant `acme` ran, in order.
async fn decided_by(client: &reqwest::Client, addr: &str) -> Vec<String> {
    // A call every guard proceeds on: each guard of the chain is asked.
    let body = json!({"tenant": "acme", "event": {"run_id": "r", "tool_name": "search",
        "call_id": "c", "args": {"q": "x"}}});
    let answer: Value = client
        .post(format!("http://{addr}/v1/steering?trace=1"))
        .json(&body)
        .send()
        .await
        .expect("POST /v1/steering")
        .json()
        .await
        .expect("JSON");
    answer["trace"]
        .as_array()
        .unwrap_or_else(|| panic!("a trace: {answer}"))
        .iter()
        .map(|t| t["plugin"].as_str().expect("plugin").to_string())
        .collect()
}

/// Waits until `ok` holds of every replica's `set`, or panics with them.
async fn until_all(
    client: &reqwest::Client,
    addrs: &[&str],
    what: &str,
    ok: impl Fn(&Value) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut sets = Vec::new();
        for addr in addrs {
            sets.push(set_of(client, addr).await);
        }
        if sets.iter().all(&ok) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {sets:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Asserts every replica serves `digest` at `generation`, decided by
/// `plugins`.
async fn all_serve(
    client: &reqwest::Client,
    addrs: &[&str],
    digest: &str,
    generation: u64,
    plugins: &[&str],
) {
    for addr in addrs {
        let set = set_of(client, addr).await;
        assert_eq!(set["digest"], digest, "{addr}: {set}");
        assert_eq!(set["generation"], generation, "{addr}: {set}");
        assert_eq!(decided_by(client, addr).await, plugins, "{addr}");
    }
}

/// Copies the signature manifest of `signed` (hex) to the signature tag of
/// `unsigned` (hex): a real signature, for another digest.
async fn copy_signature(client: &reqwest::Client, base: &str, signed: &str, unsigned: &str) {
    let accept = "application/vnd.oci.image.manifest.v1+json";
    let manifest = client
        .get(format!("{base}/manifests/sha256-{signed}.sig"))
        .header("Accept", accept)
        .send()
        .await
        .expect("GET signature")
        .bytes()
        .await
        .expect("bytes");
    let put = client
        .put(format!("{base}/manifests/sha256-{unsigned}.sig"))
        .header("Content-Type", accept)
        .body(manifest)
        .send()
        .await
        .expect("PUT signature");
    assert!(put.status().is_success(), "{}", put.status());
}

pub(crate) fn keygen(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let base = dir.join(name);
    toolgate(&["keygen", &base.display().to_string()]);
    (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_following_a_signed_set_converge_on_each_good_version_refuse_bad_ones_and_keep_serving_the_last_good()
 {
    let mut registry = OciRegistry::start();
    let keys = tempfile::tempdir().expect("tempdir");
    let (release_key, release_pub) = keygen(keys.path(), "release");
    let (other_key, _) = keygen(keys.path(), "other");
    let reference = format!("oci://{}/policies/fleet:prod", registry.authority());
    let base = format!("http://{}/v2/policies/fleet", registry.authority());
    let hex = |digest: &str| digest.trim_start_matches("sha256:").to_string();

    // Version 1: a global guard and tenant acme's own, signed. The same
    // directory pushes to the same digest.
    let v1 = set_dir(
        &[("sql-guard.wasm", SQL_GUARD)],
        &[("acme", "no-email.wasm", NO_EMAIL)],
    );
    let d1 = push_set(v1.path(), &reference, Some(&release_key));
    let again = format!("oci://{}/policies/fleet:again", registry.authority());
    assert_eq!(push_set(v1.path(), &again, None), d1, "deterministic");

    let caches = [
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    ];
    let trust = release_pub.display().to_string();
    let replica = |cache: &Path| {
        let cache = cache.display().to_string();
        let args = [
            "--poll-ms",
            "200",
            "--trusted-key",
            trust.as_str(),
            "--require-signatures",
            "--cache-dir",
            cache.as_str(),
            "--fetch-tries",
            "1",
            "--fetch-timeout-ms",
            "2000",
        ];
        serve_set(&reference, &args)
    };
    let (_r0, a0) = replica(caches[0].path());
    let (mut r1, a1) = replica(caches[1].path());
    let (a0, a1) = (a0.expect("serves"), a1.expect("serves"));
    let addrs = [a0.as_str(), a1.as_str()];
    let client = reqwest::Client::new();
    all_serve(&client, &addrs, &d1, 1, &["sql-guard", "acme/no-email"]).await;
    let set = set_of(&client, &a0).await;
    assert_eq!(set["source"], reference, "{set}");
    assert!(
        set["signer"]
            .as_str()
            .is_some_and(|k| k.starts_with("sha256:")),
        "{set}"
    );

    // Version 2: another guard, no tenant directory: both replicas swap
    // it in whole (acme's own guard goes with version 1).
    // Calls decided meanwhile are decided by one version or the other,
    // never by a mix of the two.
    let v2 = set_dir(&[("no-email.wasm", NO_EMAIL)], &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (client, addr, stop) = (client.clone(), a0.clone(), std::sync::Arc::clone(&stop));
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                seen.push(decided_by(&client, &addr).await);
            }
            seen
        })
    };
    let d2 = push_set(v2.path(), &reference, Some(&release_key));
    until_all(&client, &addrs, "converged on version 2", |s| {
        s["digest"] == d2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = watcher.await.expect("the watcher");
    let (one, two) = (["sql-guard", "acme/no-email"], ["no-email"]);
    assert!(
        seen.iter().all(|p| *p == one || *p == two),
        "a call decided by a mix: {seen:?}"
    );
    assert!(
        seen.first().is_some_and(|p| *p == one) && seen.last().is_some_and(|p| *p == two),
        "the calls saw the swap: {seen:?}"
    );
    all_serve(&client, &addrs, &d2, 2, &["no-email"]).await;

    // Refused everywhere, version 2 deciding meanwhile: unsigned ...
    let v3 = set_dir(
        &[("sql-guard.wasm", SQL_GUARD), ("no-email.wasm", NO_EMAIL)],
        &[],
    );
    let d3 = push_set(v3.path(), &reference, None);
    let refused = |digest: String, why: &'static str| {
        move |s: &Value| {
            s["last_refusal"]["digest"] == digest.as_str()
                && s["last_refusal"]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains(why))
        }
    };
    until_all(
        &client,
        &addrs,
        "refused the unsigned version",
        refused(d3.clone(), "has none"),
    )
    .await;
    all_serve(&client, &addrs, &d2, 2, &["no-email"]).await;

    // ... signed by a key not trusted ...
    let v4 = set_dir(
        &[("sql-guard.wasm", SQL_GUARD)],
        &[("acme", "x.wasm", NO_EMAIL)],
    );
    let d4 = push_set(v4.path(), &reference, Some(&other_key));
    until_all(
        &client,
        &addrs,
        "refused the untrusted key's version",
        refused(d4, "none by a trusted key"),
    )
    .await;
    all_serve(&client, &addrs, &d2, 2, &["no-email"]).await;

    // ... carrying a good signature, for another digest ...
    let v5 = set_dir(
        &[("sql-guard.wasm", SQL_GUARD)],
        &[("acme", "y.wasm", NO_EMAIL)],
    );
    let staging = format!("oci://{}/policies/fleet:staging", registry.authority());
    let d5 = push_set(v5.path(), &staging, None);
    copy_signature(&client, &base, &hex(&d2), &hex(&d5)).await;
    assert_eq!(push_set(v5.path(), &reference, None), d5);
    until_all(
        &client,
        &addrs,
        "refused the borrowed signature",
        refused(d5, "another artifact"),
    )
    .await;
    all_serve(&client, &addrs, &d2, 2, &["no-email"]).await;

    // ... and the tag moved to something that is no set (a component,
    // signed by the trusted key).
    let component = toolgate(&[
        "push",
        SQL_GUARD,
        &reference,
        "--sign",
        &release_key.display().to_string(),
    ]);
    let d6 = component
        .trim()
        .rsplit('@')
        .next()
        .expect("digest")
        .to_string();
    until_all(
        &client,
        &addrs,
        "refused the component",
        refused(d6, "not a policy set"),
    )
    .await;
    all_serve(&client, &addrs, &d2, 2, &["no-email"]).await;
    // ... and a version, signed, whose manifest does not parse.
    let v7 = set_dir(&[("sql-guard.wasm", SQL_GUARD)], &[]);
    std::fs::write(v7.path().join("toolgate.toml"), "[[plugin]\n").expect("write");
    let d7 = push_set(v7.path(), &reference, Some(&release_key));
    until_all(
        &client,
        &addrs,
        "refused the broken manifest",
        refused(d7, "does not load whole"),
    )
    .await;
    let why = set_of(&client, &a0).await["last_refusal"]["reason"].to_string();
    assert!(
        why.contains("toolgate.toml:1") && !why.contains("unpacked"),
        "named by its path in the set: {why}"
    );
    all_serve(&client, &addrs, &d2, 2, &["no-email"]).await;
    for addr in addrs {
        let set = set_of(&client, addr).await;
        assert_eq!(set["refused"], 5, "each refusal counted once: {set}");
        let metrics = client
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        assert!(
            metrics.contains("toolgate_set_refused_total 5"),
            "{metrics}"
        );
        assert!(metrics.contains("toolgate_set_generation 2"), "{metrics}");
        assert!(metrics.contains(&format!("digest=\"{d2}\"")), "{metrics}");
    }

    // The registry down: polls fail, counted; version 2 keeps deciding.
    registry.stop();
    until_all(&client, &addrs, "saw the registry down", |s| {
        s["poll_failures"].as_u64().unwrap_or(0) >= 2 && s["last_poll_failure"].is_string()
    })
    .await;
    all_serve(&client, &addrs, &d2, 2, &["no-email"]).await;

    // A replica restarted with the registry down serves the version it
    // kept (re-verified); one with an empty cache has nothing to serve.
    r1.kill().expect("kill");
    let _ = r1.wait();
    let (_r1, warm) = replica(caches[1].path());
    let warm = warm.expect("a warm start serves");
    let set = set_of(&client, &warm).await;
    assert_eq!(set["digest"], d2, "{set}");
    assert_eq!(set["from_cache"], true, "{set}");
    assert_eq!(decided_by(&client, &warm).await, ["no-email"]);
    let cold_cache = tempfile::tempdir().expect("tempdir");
    let (_cold, cold) = replica(cold_cache.path());
    let said = cold.expect_err("a cold start serves nothing");
    assert!(said.contains("cold start"), "{said}");

    // The registry back: the warm replica reaches it again.
    registry.restart();
    until_all(
        &client,
        &[a0.as_str(), warm.as_str()],
        "reached the registry again",
        |s| s["from_cache"] == false && s["last_poll_failure"].is_null() && s["digest"] == d2,
    )
    .await;

    // The version refused for want of a signature, signed now (the same
    // directory, the same digest): both replicas take it.
    assert_eq!(push_set(v3.path(), &reference, Some(&release_key)), d3);
    let now = [a0.as_str(), warm.as_str()];
    until_all(&client, &now, "took the version once signed", |s| {
        s["digest"] == d3
    })
    .await;
    for addr in now {
        let mut plugins = decided_by(&client, addr).await;
        plugins.sort();
        assert_eq!(plugins, ["no-email", "sql-guard"], "{addr}");
    }
}

/// `toolgate serve ARGS`, expected to stop at once: its standard error.
fn refused_at_start(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("serve")
        .args(args)
        .output()
        .expect("run toolgate");
    assert!(!out.status.success(), "toolgate serve {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn set_flags_that_cannot_work_are_refused_at_start_naming_what_is_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad_key = dir.path().join("bad.pub");
    std::fs::write(&bad_key, "hello").expect("write");
    let at = "oci://127.0.0.1:9/policies/fleet:prod";
    let digest = format!("oci://127.0.0.1:9/policies/fleet@sha256:{}", "a".repeat(64));
    let e = refused_at_start(&["--set", &digest]);
    assert!(e.contains("names a digest"), "{e}");
    let e = refused_at_start(&["--set", "http://127.0.0.1:9/policies/fleet:prod"]);
    assert!(e.contains("oci://registry/repo:tag"), "{e}");
    let key = bad_key.display().to_string();
    let e = refused_at_start(&["--set", at, "--trusted-key", &key]);
    assert!(e.contains(&key) && e.contains("PEM"), "{e}");
    let e = refused_at_start(&["--set", at, "--require-signatures"]);
    assert!(e.contains("--trusted-key"), "{e}");
    let plugins = dir.path().display().to_string();
    let e = refused_at_start(&["--set", at, "--plugins", &plugins]);
    assert!(e.contains("cannot be used with"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_source_swaps_a_new_version_in_and_lets_the_one_before_go() {
    use toolgate::remote::{SetOptions, SetSource};
    let registry = OciRegistry::start();
    let reference = format!("oci://{}/policies/lib:prod", registry.authority());
    let v1 = set_dir(&[("sql-guard.wasm", SQL_GUARD)], &[]);
    let d1 = push_set(v1.path(), &reference, None);
    let cache = tempfile::tempdir().expect("tempdir");
    let engine = toolgate::Engine::new(toolgate::EngineConfig::default()).expect("engine");
    let options = SetOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..SetOptions::new(reference.as_str())
    };
    let source = SetSource::start(engine, options).await.expect("starts");
    assert_eq!(source.status().digest, d1);
    let first = std::sync::Arc::downgrade(&source.registry());
    assert!(!source.poll().await.expect("polls"), "nothing new");

    let v2 = set_dir(&[("no-email.wasm", NO_EMAIL)], &[]);
    let d2 = push_set(v2.path(), &reference, None);
    let held = source.registry();
    assert!(source.poll().await.expect("polls"), "version 2 swapped in");
    let status = source.status();
    assert_eq!(
        (status.digest.as_str(), status.generation),
        (d2.as_str(), 2)
    );
    // A call that took version 1 finishes on it; then it is let go.
    assert_eq!(held.plugin_set().describe().global[0].name, "sql-guard");
    assert!(first.upgrade().is_some());
    drop(held);
    assert!(first.upgrade().is_none(), "the version before is dropped");
    assert!(
        std::fs::read_dir(cache.path().join("sets/unpacked"))
            .expect("unpacked")
            .all(|e| e
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .starts_with(&d2[7..])),
        "only the version serving stays unpacked"
    );
}
