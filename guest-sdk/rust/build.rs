//! Copies the contract (`wit/*.wit` at the repository root) into `OUT_DIR`,
//! where `src/bindings.rs` generates its bindings from.
//!
//! On the way it escapes `result` where the WIT uses it as a name (`interface
//! result`, `export result;`, a `result:` field): recent WIT parsers read
//! `result` as a keyword and require `%result`. The escape changes nothing
//! in the component (the name is still `result`) and is a no-op on a WIT
//! that already escapes it.

use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let src = manifest.join("../../wit");
    let dest = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("wit");
    println!("cargo:rerun-if-changed={}", src.display());
    if let Err(err) = copy_wit(&src, &dest) {
        panic!(
            "toolgate-guest: cannot prepare the WIT contract from {}: {err}",
            src.display()
        );
    }
}

fn copy_wit(src: &Path, dest: &Path) -> std::io::Result<()> {
    let _ = fs::remove_dir_all(dest);
    fs::create_dir_all(dest)?;
    let mut found = false;
    for entry in fs::read_dir(src)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wit") {
            println!("cargo:rerun-if-changed={}", path.display());
            let text = fs::read_to_string(&path)?;
            fs::write(
                dest.join(path.file_name().expect("file name")),
                escape_keywords(&text),
            )?;
            found = true;
        }
    }
    if !found {
        return Err(std::io::Error::other("no .wit files found"));
    }
    Ok(())
}

/// Writes `%result` where `result` names an interface, an export/import or a
/// record field.
fn escape_keywords(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.lines() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let fixed = if body.starts_with("//") {
            body.to_string()
        } else if body.starts_with("result:") || body.starts_with("result :") {
            format!("%{body}")
        } else {
            body.replace("interface result ", "interface %result ")
                .replace("export result;", "export %result;")
                .replace("import result;", "import %result;")
        };
        out.push_str(indent);
        out.push_str(&fixed);
        out.push('\n');
    }
    out
}
