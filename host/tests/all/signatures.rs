//! Signed components: keys made by `toolgate keygen`, files signed by
//! `toolgate sign` (`<file>.sig`), artifacts signed by `toolgate push
//! --sign` into a real registry (Debian's `docker-registry`), checked
//! against `[ceilings] trusted_keys` before anything compiles them.
//! Unsigned, wrongly signed or tampered content is refused, named, and
//! the last good version keeps serving.

use std::path::{Path, PathBuf};
use std::process::Command;

use toolgate::IssueKind;
use toolgate_tests::{NO_EMAIL, SQL_GUARD};

use crate::oci_registry::OciRegistry;
use crate::remote::{errors_of, manifest, open, steers_delete};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// `toolgate ARGS`: its standard output, or a panic with its error.
pub(crate) fn toolgate(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run toolgate");
    assert!(
        out.status.success(),
        "toolgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// A key pair made by `toolgate keygen`: (private key path, public PEM).
fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let base = dir.join(name);
    toolgate(&["keygen", &base.display().to_string()]);
    let public = std::fs::read_to_string(dir.join(format!("{name}.pub"))).expect("public key");
    (dir.join(format!("{name}.key")), public)
}

/// The global manifest's `[ceilings]` trusting `keys`, then `plugins`.
fn trusting(keys: &[&str], required: bool, plugins: &str) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("\"\"\"{k}\"\"\"")).collect();
    format!(
        "[ceilings]\ntrusted_keys = [{}]\nrequire_signatures = {required}\n\n{plugins}",
        keys.join(", ")
    )
}

#[tokio::test]
async fn a_signed_file_loads_and_unsigned_untrusted_or_tampered_ones_are_refused_while_the_last_good_serves()
 {
    let keys = tempfile::tempdir().expect("tempdir");
    let (trusted_key, trusted_pub) = keygen(keys.path(), "release");
    let (other_key, _) = keygen(keys.path(), "other");
    let dir = tempfile::tempdir().expect("tempdir");
    let guard = dir.path().join("sql-guard.wasm");
    std::fs::copy(SQL_GUARD, &guard).expect("copy");
    let text = trusting(
        &[&trusted_pub],
        true,
        "[[plugin]]\npath = \"sql-guard.wasm\"\n",
    );

    // Unsigned: refused, named, nothing serves.
    manifest(dir.path(), &text);
    let reg = open(dir.path(), None).await;
    let refused = errors_of(&reg, IssueKind::Signature);
    assert!(
        refused.len() == 1 && refused[0].contains("sql-guard.wasm.sig"),
        "{refused:?}"
    );
    assert!(!steers_delete(&reg, None).await);

    // Signed by the trusted key: loads and decides.
    let signed = toolgate(&[
        "sign",
        "--key",
        &trusted_key.display().to_string(),
        &guard.display().to_string(),
    ]);
    assert!(signed.contains("sql-guard.wasm.sig"), "{signed}");
    reg.reload().await.expect("reload");
    assert!(errors_of(&reg, IssueKind::Signature).is_empty());
    assert!(steers_delete(&reg, None).await, "the signed guard serves");

    // The component swapped for another with the old signature: refused,
    // and the last good version keeps serving.
    std::fs::copy(NO_EMAIL, &guard).expect("swap");
    reg.reload().await.expect("reload");
    let refused = errors_of(&reg, IssueKind::Signature);
    assert!(
        refused.len() == 1 && refused[0].contains("none by a trusted key"),
        "{refused:?}"
    );
    assert!(
        steers_delete(&reg, None).await,
        "the last good version serves"
    );

    // The operator stops trusting the key: what it signed stops serving,
    // no last good version of it is kept.
    let (_, next_pub) = keygen(keys.path(), "next");
    manifest(
        dir.path(),
        &trusting(
            &[&next_pub],
            true,
            "[[plugin]]\npath = \"sql-guard.wasm\"\n",
        ),
    );
    reg.reload().await.expect("reload");
    assert_eq!(errors_of(&reg, IssueKind::Signature).len(), 1);
    assert!(
        !steers_delete(&reg, None).await,
        "a revoked key's guard is out"
    );
    manifest(dir.path(), &text);

    // Signed, but by a key the operator does not trust: refused.
    std::fs::copy(SQL_GUARD, &guard).expect("back");
    toolgate(&[
        "sign",
        "--key",
        &other_key.display().to_string(),
        &guard.display().to_string(),
    ]);
    let fresh = open(dir.path(), None).await;
    assert_eq!(errors_of(&fresh, IssueKind::Signature).len(), 1);
    assert!(!steers_delete(&fresh, None).await);

    // Without require_signatures an unsigned file loads, a wrongly signed
    // one is still refused.
    manifest(
        dir.path(),
        &trusting(
            &[&trusted_pub],
            false,
            "[[plugin]]\npath = \"sql-guard.wasm\"\n",
        ),
    );
    let lenient = open(dir.path(), None).await;
    assert_eq!(errors_of(&lenient, IssueKind::Signature).len(), 1);
    std::fs::remove_file(dir.path().join("sql-guard.wasm.sig")).expect("rm");
    lenient.reload().await.expect("reload");
    assert!(errors_of(&lenient, IssueKind::Signature).is_empty());
    assert!(steers_delete(&lenient, None).await);
}

#[tokio::test]
async fn a_tenants_files_are_held_to_the_global_trust() {
    let keys = tempfile::tempdir().expect("tempdir");
    let (key, public) = keygen(keys.path(), "release");
    let dir = tempfile::tempdir().expect("tempdir");
    manifest(dir.path(), &trusting(&[&public], true, ""));
    let tenant = dir.path().join("tenants").join("acme");
    std::fs::create_dir_all(&tenant).expect("mkdir");
    let guard = tenant.join("sql-guard.wasm");
    std::fs::copy(SQL_GUARD, &guard).expect("copy");
    let reg = open(dir.path(), None).await;
    reg.load_pending().await.expect("tenants");
    assert_eq!(
        errors_of(&reg, IssueKind::Signature).len(),
        1,
        "an unsigned tenant file"
    );
    toolgate(&[
        "sign",
        "--key",
        &key.display().to_string(),
        &guard.display().to_string(),
    ]);
    reg.reload().await.expect("reload");
    assert!(errors_of(&reg, IssueKind::Signature).is_empty());
    assert!(steers_delete(&reg, Some("acme")).await);
}

#[tokio::test]
async fn an_artifact_pushed_signed_loads_and_unsigned_or_untrusted_ones_are_refused() {
    let registry = OciRegistry::start();
    let at = registry.authority();
    let keys = tempfile::tempdir().expect("tempdir");
    let (key, public) = keygen(keys.path(), "release");
    let (other, _) = keygen(keys.path(), "other");
    let push = |file: &str, repo: &str, sign: Option<&Path>| {
        let reference = format!("oci://{at}/guards/{repo}:v1");
        let mut args = vec!["push", file, reference.as_str(), "--plain-http"];
        let key = sign.map(|k| k.display().to_string());
        if let Some(k) = &key {
            args.extend(["--sign", k.as_str()]);
        }
        toolgate(&args).trim().to_string()
    };
    let signed = push(SQL_GUARD, "signed", Some(&key));
    let unsigned = push(NO_EMAIL, "unsigned", None);
    let untrusted = push(SQL_GUARD, "untrusted", Some(&other));
    let plugins = format!(
        "[[plugin]]\nname = \"signed\"\noci = \"{signed}\"\n\n\
         [[plugin]]\nname = \"unsigned\"\noci = \"{unsigned}\"\n\n\
         [[plugin]]\nname = \"untrusted\"\noci = \"{untrusted}\"\n"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    manifest(dir.path(), &trusting(&[&public], true, &plugins));
    let reg = open(dir.path(), None).await;
    let refused = errors_of(&reg, IssueKind::Signature);
    assert_eq!(
        refused.len(),
        2,
        "{refused:?} {:?}",
        reg.plugin_set().errors
    );
    assert!(
        refused
            .iter()
            .any(|e| e.contains("/guards/unsigned") && e.contains("has none")),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|e| e.contains("/guards/untrusted") && e.contains("none by a trusted key")),
        "{refused:?}"
    );
    let names: Vec<String> = reg
        .plugin_set()
        .global
        .plugins()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    assert_eq!(names, ["signed"]);
    assert!(steers_delete(&reg, None).await);

    // A signature moved onto another artifact (its payload names the
    // signed digest): refused for that artifact. (The same bytes pushed
    // to another repository are the same artifact: a signature names the
    // digest, as cosign's does.)
    let digest = |pinned: &str| {
        pinned
            .rsplit_once("@sha256:")
            .map(|(_, d)| d.to_string())
            .expect("digest")
    };
    let (signed_digest, unsigned_digest) = (digest(&signed), digest(&unsigned));
    let client = reqwest::Client::new();
    let sig_manifest = client
        .get(format!(
            "http://{at}/v2/guards/signed/manifests/sha256-{signed_digest}.sig"
        ))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .expect("get")
        .bytes()
        .await
        .expect("body");
    let manifest_json: serde_json::Value = serde_json::from_slice(&sig_manifest).expect("JSON");
    // Its blobs, mounted into the unsigned repository, then the manifest.
    for blob in [
        &manifest_json["config"]["digest"],
        &manifest_json["layers"][0]["digest"],
    ] {
        let blob = blob.as_str().expect("digest");
        let mounted = client
            .post(format!(
                "http://{at}/v2/guards/unsigned/blobs/uploads/?mount={blob}&from=guards/signed"
            ))
            .send()
            .await
            .expect("mount");
        assert_eq!(mounted.status(), reqwest::StatusCode::CREATED);
    }
    let put = client
        .put(format!(
            "http://{at}/v2/guards/unsigned/manifests/sha256-{unsigned_digest}.sig"
        ))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(sig_manifest.to_vec())
        .send()
        .await
        .expect("put");
    assert!(put.status().is_success(), "{}", put.status());
    let again = open(dir.path(), None).await;
    let refused = errors_of(&again, IssueKind::Signature);
    assert!(
        refused
            .iter()
            .any(|e| e.contains("/guards/unsigned") && e.contains("another artifact")),
        "{refused:?}"
    );
}

#[test]
fn trust_keys_are_checked_at_load_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (text, needle) in [
        (
            "[ceilings]\nrequire_signatures = true\n",
            "needs `trusted_keys`",
        ),
        (
            "[ceilings]\ntrusted_keys = [\"hello\"]\n",
            "key 1: not a PEM public key",
        ),
    ] {
        manifest(dir.path(), text);
        let out = Command::new(BIN)
            .args([
                "list",
                "--plugins",
                &dir.path().display().to_string(),
                "--no-cache",
            ])
            .output()
            .expect("run");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(all.contains("ceilings.") && all.contains(needle), "{all}");
    }
}
