//! Components the host must refuse at load, each with a message naming the
//! file and the mismatch; and guests whose reply cannot be read.

use serde_json::json;
use toolgate::{Error, Fault, Outcome, Plugin, PluginSpec};
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::Resolve;

use crate::*;

/// The frozen `0.1.0` contract: the hand-written components of these tests
/// are `0.1.0` guards, so every test built on them shows that a `0.1.0`
/// guard still loads and runs unchanged.
pub const WIT: &str = include_str!("../../../wit/v0.1.0/guard.wit");

/// A core module exporting `before-tool-call` of contract `version`
/// (canonical ABI: ten i32 string halves in, a pointer to the result area
/// out), whose memory holds `data` at offset 64 and which returns `ret` as
/// that pointer.
pub fn steering_core(version: &str, ret: i32, data: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
            (memory (export "memory") 1)
            (global $bump (mut i32) (i32.const 1024))
            (data (i32.const 64) "{data}")
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
              (local $p i32)
              (local.set $p (global.get $bump))
              (global.set $bump (i32.add (global.get $bump) (i32.and (i32.add (local.get 3) (i32.const 7)) (i32.const -8))))
              (local.get $p))
            (func (export "toolgate:guard/steering@{version}#before-tool-call")
              (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
              (i32.const {ret})))"#
    ))
    .expect("valid wat")
}

/// Wraps a core module as a component of `world` in `wit`.
pub fn componentize(wit: &str, world: &str, mut core: Vec<u8>) -> Vec<u8> {
    let mut resolve = Resolve::default();
    let pkg = resolve.push_source("guard.wit", wit).expect("wit parses");
    let world = resolve.select_world(&[pkg], Some(world)).expect("world");
    wit_component::embed_component_metadata(&mut core, &resolve, world, StringEncoding::UTF8)
        .expect("embed");
    ComponentEncoder::default()
        .module(&core)
        .expect("module")
        .validate(true)
        .encode()
        .expect("component")
}

async fn load_bytes(bytes: &[u8], file: &str) -> (tempfile::TempDir, Result<Plugin, Error>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(file);
    std::fs::write(&path, bytes).expect("write");
    let r = Plugin::load(&engine(), PluginSpec::new(&path)).await;
    (dir, r)
}

async fn refused(bytes: &[u8], file: &str) -> String {
    let (_dir, r) = load_bytes(bytes, file).await;
    let e = r.expect_err("must be refused");
    let msg = e.to_string();
    assert!(msg.contains(file), "the error names the file: {msg}");
    msg
}

#[tokio::test]
async fn corrupt_file_is_refused() {
    let msg = refused(b"this is not wasm at all", "corrupt.wasm").await;
    assert!(msg.contains("is not a WebAssembly component"), "{msg}");
    let (_d, r) = load_bytes(b"\0asm\x0d\0\x01\0garbage", "truncated.wasm").await;
    assert!(matches!(r, Err(Error::Compile { .. })), "{r:?}");
}

#[tokio::test]
async fn core_module_is_refused() {
    let core = wat::parse_str("(module (func (export \"before-tool-call\")))").expect("wat");
    let msg = refused(&core, "core.wasm").await;
    assert!(
        msg.contains("core WebAssembly module, not a component"),
        "{msg}"
    );
}

#[tokio::test]
async fn component_for_another_contract_version_is_refused() {
    let other = WIT.replace("toolgate:guard@0.1.0", "toolgate:guard@0.9.0");
    let core = steering_core("0.9.0", 64, "\\00");
    let msg = refused(&componentize(&other, "steering-guard", core), "v3.wasm").await;
    assert!(
        msg.contains("exports none of the toolgate:guard seams"),
        "{msg}"
    );
    assert!(
        msg.contains("toolgate:guard/steering@0.9.0"),
        "names what it exports: {msg}"
    );
}

#[tokio::test]
async fn wrong_signature_is_refused() {
    // Same names, but `before-tool-call` returns a bool.
    let wit = WIT.replace(
        "before-tool-call: func(event: before-tool-call-event) -> verdict;",
        "before-tool-call: func(event: before-tool-call-event) -> bool;",
    );
    assert_ne!(wit, WIT);
    let core = wat::parse_str(
        r#"(module
            (memory (export "memory") 1)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
            (func (export "toolgate:guard/steering@0.1.0#before-tool-call")
              (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32) (i32.const 1)))"#,
    )
    .expect("wat");
    let msg = refused(&componentize(&wit, "steering-guard", core), "bool.wasm").await;
    assert!(
        msg.contains("`steering` export does not match the toolgate:guard contract"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_wrong_observe_signature_is_refused_naming_the_observe_export() {
    // The current contract, but `observe` returns a bool: the error names
    // `observe` (it used to say `result`).
    let current = include_str!("../../../wit/guard.wit");
    let wit = current.replace(
        "observe: func(event: lifecycle-event);",
        "observe: func(event: lifecycle-event) -> bool;",
    );
    assert_ne!(wit, current);
    // A lifecycle event flattens past 16 values: one pointer in.
    let core = wat::parse_str(
        r#"(module
            (memory (export "memory") 1)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
            (func (export "toolgate:guard/observe@0.3.0#subscriptions") (result i32) (i32.const 1))
            (func (export "toolgate:guard/observe@0.3.0#observe") (param i32) (result i32) (i32.const 1)))"#,
    )
    .expect("wat");
    let msg = refused(&componentize(&wit, "observer", core), "observer.wasm").await;
    assert!(
        msg.contains("`observe` export does not match the toolgate:guard contract"),
        "{msg}"
    );
}

#[tokio::test]
async fn unknown_import_is_refused() {
    let wit = format!(
        "{WIT}\ninterface evil {{ steal: func(); }}\nworld evil-guard {{ import evil; export steering; }}\n"
    );
    let core = wat::parse_str(
        r#"(module
            (import "toolgate:guard/evil@0.1.0" "steal" (func $steal))
            (memory (export "memory") 1)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
            (func (export "toolgate:guard/steering@0.1.0#before-tool-call")
              (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
              (call $steal) (i32.const 64)))"#,
    )
    .expect("wat");
    let msg = refused(&componentize(&wit, "evil-guard", core), "evil.wasm").await;
    assert!(
        msg.contains("imports something the host does not provide"),
        "{msg}"
    );
    assert!(msg.contains("toolgate:guard/evil@0.1.0"), "{msg}");
}

#[tokio::test]
async fn component_with_no_seams_is_refused() {
    let wit = format!("{WIT}\nworld empty {{ import host; }}\n");
    let core = wat::parse_str("(module (memory (export \"memory\") 1))").expect("wat");
    let msg = refused(&componentize(&wit, "empty", core), "empty.wasm").await;
    assert!(msg.contains("exports none"), "{msg}");
}

/// Garbage replies: the component is valid, the reply cannot be lifted.
async fn garbage(ret: i32, data: &str) -> toolgate::GuardTrace {
    let bytes = componentize(WIT, "steering-guard", steering_core("0.1.0", ret, data));
    let (_dir, p) = load_bytes(&bytes, "garbage.wasm").await;
    let p = std::sync::Arc::new(p.expect("a valid component loads"));
    let d = chain(&[&p])
        .steering(&steering("t", json!({})), &no_state())
        .await;
    assert_eq!(d.result, None, "garbage is never a skip");
    d.trace[0].clone()
}

#[tokio::test]
async fn garbage_replies_are_invalid_results() {
    // A well-formed proceed (discriminant 0 at offset 64) works...
    let ok = garbage(64, "\\00").await;
    assert_eq!(ok.outcome, Outcome::Proceed, "{ok:?}");
    // ...a reply pointer out of bounds does not,
    let oob = garbage(-16, "").await;
    assert_eq!(oob.fault, Some(Fault::InvalidResult), "{oob:?}");
    // nor does an invalid variant tag,
    let tag = garbage(64, "\\07").await;
    assert_eq!(tag.fault, Some(Fault::InvalidResult), "{tag:?}");
    // nor a skip whose content points outside memory.
    let content = garbage(64, "\\01\\00\\00\\00\\00\\00\\ff\\ff\\10\\00\\00\\00\\00").await;
    assert_eq!(content.fault, Some(Fault::InvalidResult), "{content:?}");
}
