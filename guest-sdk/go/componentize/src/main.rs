//! `toolgate-go-componentize`: the componentization step of the Go guest SDK.
//!
//! `go build` (GOOS=wasip1, `-buildmode=c-shared`) leaves a core module that
//! exports the canonical-ABI functions of the seams the guard implements
//! (`toolgate:guard/<seam>@0.1.0#<func>`), imports `toolgate:guard/host` and
//! `wasi_snapshot_preview1`. This program:
//!
//! 1. reads which seam interfaces the module exports;
//! 2. builds a world that imports `host` and exports exactly those seams (so
//!    the host subscribes the guard to those seams and no other);
//! 3. embeds that world as the module's component-type metadata;
//! 4. wraps module + WASI preview-1 *reactor* adapter into a component.
//!
//! `inspect` prints a component's imports and exports as JSON, one name per
//! instance, for build checks and tests.
//!
//! Usage:
//!   toolgate-go-componentize new --wit <dir> <core.wasm> -o <out.wasm>
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
/// The contract's version.
const VERSION: &str = "0.1.0";
/// The seam interfaces a guard may export, in the contract's order.
const SEAMS: [&str; 4] = ["routing", "rewrite", "steering", "result"];

fn main() {
    if let Err(err) = run(std::env::args().skip(1).collect()) {
        eprintln!("toolgate-go-componentize: {err:#}");
        std::process::exit(1);
    }
}

fn usage() -> &'static str {
    "usage:\n  toolgate-go-componentize new --wit <dir> <core.wasm> -o <out.wasm>\n  toolgate-go-componentize inspect <component.wasm>"
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

/// The seams whose functions `module` exports, by interface name.
fn exported_seams(module: &[u8]) -> Result<BTreeSet<&'static str>> {
    let mut seams = BTreeSet::new();
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
            let iface = rest.split(['@', '#']).next().unwrap_or_default();
            let Some(seam) = SEAMS.iter().find(|s| **s == iface) else {
                bail!("export `{name}` names no seam of {PACKAGE}@{VERSION}");
            };
            if !rest.starts_with(&format!("{iface}@{VERSION}#")) {
                bail!("export `{name}` is not for {PACKAGE}@{VERSION}");
            }
            seams.insert(*seam);
        }
    }
    Ok(seams)
}

/// Embeds a world exporting exactly the module's seams and makes a component.
fn componentize(module: &[u8], wit: &Path) -> Result<Vec<u8>> {
    let seams = exported_seams(module)?;
    if seams.is_empty() {
        bail!(
            "the module exports no seam: a Go guard must import at least one of \
             toolgate.dev/guest/{{steering,rewrite,routing,result}} and call its Handle"
        );
    }
    let mut resolve = Resolve::default();
    resolve
        .push_path(wit)
        .with_context(|| format!("parsing the contract in {}", wit.display()))?;
    // A world of our own: `host` imported (wit-component keeps it only if the
    // module uses it) and exactly the exported seams.
    let mut world =
        format!("package toolgate:go-guard;\nworld guard {{\n  import {PACKAGE}/host@{VERSION};\n");
    for seam in SEAMS.iter().filter(|s| seams.contains(*s)) {
        // `%` escapes a name that is also a WIT keyword (`result`).
        world.push_str(&format!("  export {PACKAGE}/%{seam}@{VERSION};\n"));
    }
    world.push_str("}\n");
    let pkg = resolve
        .push_str("go-guard.wit", &world)
        .context("synthesising the guard's world")?;
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
