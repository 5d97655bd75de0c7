//! `toolgate push`: publishes a component as an OCI artifact, or a plugin
//! directory as a policy set (`--set`), signed with `--sign`, and prints
//! the reference pinned by its digest (what a manifest's `oci` key takes); `toolgate sign` signs component files
//! (`<file>.sig`), `toolgate keygen` makes a key pair for both.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::bad;

/// `toolgate push`'s options.
#[derive(clap::Args)]
pub(crate) struct PushArgs {
    /// The component (*.wasm) to push, then where to:
    /// `oci://registry/repo:tag` (the tag defaults to `latest`). With
    /// --set, only where to.
    #[arg(value_name = "[FILE] REFERENCE", num_args = 1..=2, required = true)]
    operands: Vec<String>,
    /// Push this plugin directory (its manifest, components and tenants/)
    /// as one policy set, which `toolgate serve --set` follows: one layer,
    /// the directory's archive; the same directory gives the same digest.
    #[arg(long, value_name = "DIR")]
    set: Option<PathBuf>,
    /// Speak plain HTTP to the registry, not HTTPS. A registry on loopback
    /// (localhost, 127.0.0.0/8, ::1) is spoken to in plain HTTP without it.
    #[arg(long)]
    plain_http: bool,
    /// The registry user, when it wants credentials; the password is read from
    /// $TOOLGATE_REGISTRY_PASSWORD (never from the command line).
    #[arg(long)]
    username: Option<String>,
    /// Sign the artifact with this private key (PKCS#8 PEM, ECDSA P-256;
    /// `toolgate keygen`), as `cosign sign --key` does.
    #[arg(long, value_name = "KEY")]
    sign: Option<PathBuf>,
}

/// `toolgate sign`'s options.
#[derive(clap::Args)]
pub(crate) struct SignArgs {
    /// The private key (PKCS#8 PEM, ECDSA P-256; `toolgate keygen`).
    #[arg(long)]
    key: PathBuf,
    /// The component files to sign: each gets `<file>.sig` beside it.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// `toolgate keygen`'s options.
#[derive(clap::Args)]
pub(crate) struct KeygenArgs {
    /// Writes `<NAME>.key` (the private key, mode 0600) and `<NAME>.pub`
    /// (the public key, for `[ceilings] trusted_keys`); refuses to
    /// overwrite either.
    name: PathBuf,
}

/// The private key at `path`.
fn signing_key(path: &Path) -> Result<toolgate::remote::SigningKey> {
    let pem = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the key {}", path.display()))?;
    toolgate::remote::SigningKey::from_pem(&pem)
        .map_err(|why| bad(format!("{}: {why}", path.display())))
}

/// Runs `toolgate sign`: writes each file's signature to `<file>.sig`.
pub(crate) fn sign(args: SignArgs) -> Result<()> {
    let key = signing_key(&args.key)?;
    for file in &args.files {
        let bytes =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let signature = key.sign(&bytes).map_err(bad)?;
        let mut out = file.as_os_str().to_owned();
        out.push(".sig");
        std::fs::write(&out, format!("{signature}\n"))
            .with_context(|| format!("cannot write {}", Path::new(&out).display()))?;
        println!("{} (key {})", Path::new(&out).display(), key.public().id());
    }
    Ok(())
}

/// Runs `toolgate keygen`.
pub(crate) fn keygen(args: KeygenArgs) -> Result<()> {
    use std::io::Write;
    let (private, public) = toolgate::remote::SigningKey::generate().map_err(bad)?;
    let with = |ext: &str| {
        let mut p = args.name.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    let (key_path, pub_path) = (with(".key"), with(".pub"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&key_path).with_context(|| {
        format!(
            "cannot create {} (it is never overwritten)",
            key_path.display()
        )
    })?;
    file.write_all(private.as_bytes())?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&pub_path)
        .and_then(|mut f| f.write_all(public.as_bytes()))
        .with_context(|| {
            format!(
                "cannot create {} (it is never overwritten)",
                pub_path.display()
            )
        })?;
    println!(
        "{} (private: keep it secret)\n{} (public: for [ceilings] trusted_keys)",
        key_path.display(),
        pub_path.display()
    );
    Ok(())
}

/// Runs `toolgate push`: prints `registry/repo:tag@sha256:<hex>`.
pub(crate) async fn run(args: PushArgs) -> Result<()> {
    let (file, reference) = match (&args.set, args.operands.as_slice()) {
        (None, [file, reference]) => (Some(PathBuf::from(file)), reference),
        (Some(_), [reference]) => (None, reference),
        (None, _) => {
            return Err(bad(
                "name the component and where to push it: toolgate push FILE oci://registry/repo:tag",
            ));
        }
        (Some(_), _) => {
            return Err(bad(
                "with --set DIR, name only where to push it: toolgate push --set DIR oci://registry/repo:tag",
            ));
        }
    };
    let Some(bare) = reference.strip_prefix("oci://") else {
        return Err(bad(format!(
            "{reference:?}: name the registry as oci://registry/repo:tag"
        )));
    };
    let credentials = match args.username {
        None => None,
        Some(user) => {
            let password = std::env::var("TOOLGATE_REGISTRY_PASSWORD")
                .map_err(|_| bad("--username needs the password in $TOOLGATE_REGISTRY_PASSWORD"))?;
            Some((user, password))
        }
    };
    let sign = args.sign.as_deref().map(signing_key).transpose()?;
    let options = toolgate::remote::PushOptions {
        plain_http: args.plain_http,
        credentials,
        sign: sign.map(std::sync::Arc::new),
    };
    let pinned = match (&args.set, file) {
        (Some(dir), _) => {
            if !dir.is_dir() {
                return Err(bad(format!("{}: not a plugin directory", dir.display())));
            }
            toolgate::remote::push_set(dir, bare, &options).await?
        }
        (None, Some(file)) => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            if !wasmparser::Parser::is_component(&bytes) {
                return Err(bad(format!(
                    "{}: is not a WebAssembly component",
                    file.display()
                )));
            }
            toolgate::remote::push(&bytes, bare, &options).await?
        }
        (None, None) => return Err(bad("nothing to push")),
    };
    println!("{pinned}");
    Ok(())
}
