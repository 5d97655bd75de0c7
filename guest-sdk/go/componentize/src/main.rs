//! `toolgate-go-componentize`: the componentization step of the Go guest SDK.
//!
//! `go build` (GOOS=wasip1, `-buildmode=c-shared`) leaves a core module that
//! exports the canonical-ABI functions of the seams the guard implements
//! (`toolgate:guard/<seam>@<version>#<func>`, and `config`'s
//! `validate-config` when the guard checks its configuration), imports
//! `toolgate:guard/host` (and `state` when it keeps state) and
//! `wasi_snapshot_preview1`. This program:
//!
//! 1. reads which interfaces the module exports, and the contract version
//!    they name (one for all: `0.3.0` today; `0.1.0` and `0.2.0` modules
//!    still build);
//! 2. builds a world that imports the contract's imports and exports exactly
//!    those interfaces (so the host subscribes the guard to those seams and
//!    no other); wit-component keeps only the imports the module uses;
//! 3. embeds that world as the module's component-type metadata;
//! 4. wraps module + WASI preview-1 *reactor* adapter into a component.
//!
//! `inspect` prints a component's imports and exports as JSON, one name per
//! instance, for build checks and tests.
//!
//! Usage:
//!   toolgate-go-componentize new --wit <dir or file> <core.wasm> -o <out.wasm>
//!   toolgate-go-componentize inspect <component.wasm>

use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_component::{ComponentEncoder, DecodedWasm, StringEncoding};
use wit_parser::Resolve;

/// The contract's package, as it prefixes export names.
const PACKAGE: &str = "toolgate:guard";
/// The contract versions a module may be built against, each with the
/// interfaces it may import (besides `host`) and export beyond the seams.
const VERSIONS: [(&str, &[&str], &[&str]); 3] = [
    ("0.1.0", &[], &[]),
    ("0.2.0", &["state", "http"], &["config"]),
    ("0.3.0", &["state", "http"], &["config"]),
];
/// The seam interfaces a guard may export, in the contract's order
/// (`response` and the lifecycle events' `observe` since `0.3.0`).
const SEAMS: [&str; 6] = [
    "routing", "rewrite", "steering", "result", "response", "observe",
];

fn main() {
    if let Err(err) = run(std::env::args().skip(1).collect()) {
        eprintln!("toolgate-go-componentize: {err:#}");
        std::process::exit(1);
    }
}

fn usage() -> &'static str {
    "usage:\n  toolgate-go-componentize new --wit <dir or file> <core.wasm> -o <out.wasm>\n  toolgate-go-componentize inspect <component.wasm>"
}

fn run(args: Vec<String>) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("new") => {
            let mut wit = None;
            let mut out = None;
            let mut input = None;
            let mut rest = args[1..].iter();
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "--wit" => wit = rest.next().map(PathBuf::from),
                    "-o" | "--output" => out = rest.next().map(PathBuf::from),
                    other if !other.starts_with('-') && input.is_none() => {
                        input = Some(PathBuf::from(other))
                    }
                    other => bail!("unexpected argument `{other}`\n{}", usage()),
                }
            }
            let (Some(wit), Some(input), Some(out)) = (wit, input, out) else {
                bail!("`new` needs --wit, an input module and -o\n{}", usage());
            };
            let module =
                std::fs::read(&input).with_context(|| format!("reading {}", input.display()))?;
            let component = componentize(&module, &wit)
                .with_context(|| format!("componentizing {}", input.display()))?;
            std::fs::write(&out, component).with_context(|| format!("writing {}", out.display()))
        }
        Some("inspect") => {
            let Some(path) = args.get(1) else {
                bail!("`inspect` needs a component\n{}", usage());
            };
            let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
            let (imports, exports) = inspect(&bytes).with_context(|| format!("decoding {path}"))?;
            println!(
                "{{\"imports\":[{}],\"exports\":[{}]}}",
                json_list(&imports),
                json_list(&exports)
            );
            Ok(())
        }
        _ => bail!("{}", usage()),
    }
}

/// The interfaces whose functions `module` exports, and the contract
/// version they all name.
fn exported_interfaces(module: &[u8]) -> Result<(&'static str, BTreeSet<&'static str>)> {
    let mut found = BTreeSet::new();
    let mut version: Option<&'static str> = None;
    let prefix = format!("{PACKAGE}/");
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        let wasmparser::Payload::ExportSection(exports) = payload.context("not a core module")?
        else {
            continue;
        };
        for export in exports {
            let name = export?.name;
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            let (iface, rest) = rest.split_once('@').unwrap_or((rest, ""));
            let Some((v, _, extra)) = VERSIONS
                .iter()
                .find(|(v, _, _)| rest.strip_prefix(v).is_some_and(|f| f.starts_with('#')))
            else {
                bail!("export `{name}` names no version of {PACKAGE} this helper knows");
            };
            if version.is_some_and(|seen| seen != *v) {
                bail!(
                    "export `{name}` is for {PACKAGE}@{v}, others for @{}",
                    version.unwrap_or_default()
                );
            }
            version = Some(v);
            let Some(known) = SEAMS.iter().chain(extra.iter()).find(|s| **s == iface) else {
                bail!("export `{name}` names no interface of {PACKAGE}@{v}");
            };
            found.insert(*known);
        }
    }
    Ok((version.unwrap_or(VERSIONS[VERSIONS.len() - 1].0), found))
}

/// Embeds a world exporting exactly the module's interfaces and makes a
/// component.
fn componentize(module: &[u8], wit: &Path) -> Result<Vec<u8>> {
    let (version, exported) = exported_interfaces(module)?;
    if !SEAMS.iter().any(|s| exported.contains(s)) {
        bail!(
            "the module exports no seam: a Go guard must import at least one of \
             toolgate.dev/guest/{{steering,rewrite,routing,result,response,observe}} and register a handler"
        );
    }
    let mut resolve = Resolve::default();
    resolve
        .push_path(wit)
        .with_context(|| format!("parsing the contract in {}", wit.display()))?;
    // A world of our own: the contract's imports (wit-component keeps only
    // those the module uses) and exactly the exported interfaces.
    let (_, imports, extra) = VERSIONS
        .iter()
        .find(|(v, _, _)| *v == version)
        .context("a known version")?;
    let mut world = "package toolgate:go-guard;\nworld guard {\n".to_string();
    for iface in ["host"].iter().chain(imports.iter()) {
        world.push_str(&format!("  import {PACKAGE}/{iface}@{version};\n"));
    }
    for iface in SEAMS
        .iter()
        .chain(extra.iter())
        .filter(|s| exported.contains(*s))
    {
        // `%` escapes a name that is also a WIT keyword (`result`).
        world.push_str(&format!("  export {PACKAGE}/%{iface}@{version};\n"));
    }
    world.push_str("}\n");
    let pkg = resolve
        .push_str("go-guard.wit", &world)
        .with_context(|| format!("synthesising the guard's world against {PACKAGE}@{version}"))?;
    let world = resolve.select_world(&[pkg], Some("guard"))?;

    let mut module = module.to_vec();
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)?;
    ComponentEncoder::default()
        .validate(true)
        .module(&module)?
        .adapter(
            WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
}

/// A component's imported and exported instance (or function) names.
fn inspect(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>)> {
    let DecodedWasm::Component(resolve, world) = wit_component::decode(bytes)? else {
        bail!("a WIT package, not a component");
    };
    let world = &resolve.worlds[world];
    let names = |items: &wit_parser::IndexMap<wit_parser::WorldKey, wit_parser::WorldItem>| {
        items
            .iter()
            .filter(|(_, item)| !matches!(item, wit_parser::WorldItem::Type { .. }))
            .map(|(key, _)| resolve.name_world_key(key))
            .collect::<Vec<_>>()
    };
    Ok((names(&world.imports), names(&world.exports)))
}

fn json_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect::<Vec<_>>()
        .join(",")
}
