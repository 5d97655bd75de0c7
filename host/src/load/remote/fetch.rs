//! Fetching a remote source's component: from the blobs kept beside the
//! compiled cache when they hold it (no request), else downloaded —
//! bounded in size, each try in time, a few tries with backoff — and
//! verified against its digest before it is kept or compiled.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde::Deserialize;

use super::signature::{MAX_PAYLOAD_BYTES, SIGNATURE_ANNOTATION, Trust, payload_names};
use super::{FetchLimits, LEGACY_WASM_LAYER_MEDIA_TYPE, Remote, WASM_LAYER_MEDIA_TYPE, sha256_hex};
use crate::error::Error;
use crate::load::cache::CompiledCache;

/// The largest OCI manifest read (the distribution spec's 4 MiB).
pub(super) const MAX_OCI_MANIFEST_BYTES: u64 = 4 << 20;

/// The manifest types asked for.
pub(super) const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// Fetches remote sources and keeps what it fetched.
pub(crate) struct Fetcher {
    limits: FetchLimits,
    /// The size cap of a component (the component file cap).
    max_bytes: u64,
    /// Made at the first download (a TLS set-up that fails is reported
    /// then, by every fetch).
    client: OnceLock<Result<reqwest::Client, String>>,
    /// Blobs fetched while the cache directory is off (or cannot be
    /// written), by SHA-256: kept for the process's life.
    memory: Mutex<HashMap<String, Arc<[u8]>>>,
    /// Failed fetches (not fetched, or refused for their digest), by plugin.
    failures: Mutex<BTreeMap<String, u64>>,
    /// The cosign signatures found for an OCI manifest, by its repository's
    /// URL and its digest (a signature is its repository's: the same bytes
    /// in another repository are not signed by it): `(payload, signature)`
    /// pairs, fetched once per process and checked against the trust of
    /// each load.
    signatures: Mutex<HashMap<String, Signatures>>,
}

/// An artifact's cosign signatures: `(payload, signature)` per layer.
pub(super) type Signatures = Arc<[(Vec<u8>, String)]>;

/// Why one try failed, and whether another may do better.
struct Failure {
    message: String,
    transient: bool,
}

impl Failure {
    fn permanent(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            transient: false,
        }
    }
}

/// What a fetch failed with, before it is an [`Error`] naming its source.
pub(super) enum Refusal {
    /// Not fetched (after its tries).
    Fetch(String),
    /// Fetched bytes that are not the ones pinned.
    Digest { expected: String, found: String },
    /// Not signed as the operator requires.
    Signature(String),
}

/// The parts of an OCI image manifest read here.
#[derive(Deserialize)]
pub(super) struct OciManifest {
    #[serde(default)]
    pub(super) layers: Vec<OciDescriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OciDescriptor {
    pub(super) media_type: String,
    pub(super) digest: String,
    pub(super) size: u64,
    #[serde(default)]
    annotations: HashMap<String, String>,
}

impl Fetcher {
    /// A fetcher under `limits`, refusing components over `max_bytes`.
    pub(crate) fn new(limits: FetchLimits, max_bytes: u64) -> Fetcher {
        Fetcher {
            limits,
            max_bytes,
            client: OnceLock::new(),
            memory: Mutex::default(),
            failures: Mutex::default(),
            signatures: Mutex::default(),
        }
    }

    /// Failed fetches so far, by plugin.
    pub(crate) fn failures(&self) -> BTreeMap<String, u64> {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The component of plugin `plugin`'s `remote` source: kept from
    /// before (in `cache`'s blobs or this process's memory), else fetched,
    /// verified and kept; signed as `trust` requires (an `oci` source by
    /// cosign's signatures, a `url` source cannot be). A failure is
    /// logged (`warn`) and counted.
    /// With the bytes, the id of the trusted key that signed them, if one
    /// did.
    pub(crate) async fn component(
        &self,
        cache: &Arc<CompiledCache>,
        plugin: &str,
        remote: &Remote,
        trust: &Trust,
    ) -> Result<(Vec<u8>, Option<String>), Error> {
        let got = match remote {
            Remote::Url { .. } if trust.required => Err(Refusal::Signature(
                "signatures are required and a `url` source carries none: publish it with \
                 `toolgate push --sign` and name it by `oci`"
                    .into(),
            )),
            Remote::Url { url, sha256 } => self.url(cache, url, sha256).await.map(|b| (b, None)),
            Remote::Oci { .. } => self.oci(cache, remote, trust).await,
        };
        got.map_err(|refusal| {
            let location = remote.location();
            let e = match refusal {
                Refusal::Fetch(message) => Error::Fetch { location, message },
                Refusal::Digest { expected, found } => Error::Digest {
                    location,
                    expected,
                    found,
                },
                Refusal::Signature(message) => Error::Signature { location, message },
            };
            tracing::warn!(plugin, source = %remote.location(), "plugin source not fetched: {e}");
            *self
                .failures
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(plugin.to_string())
                .or_default() += 1;
            e
        })
    }

    async fn url(
        &self,
        cache: &Arc<CompiledCache>,
        url: &str,
        sha256: &str,
    ) -> Result<Vec<u8>, Refusal> {
        if let Some(kept) = self.kept(cache, sha256, self.max_bytes).await {
            return Ok(kept);
        }
        let bytes = self.download(url, None, None, self.max_bytes).await?;
        verify(&bytes, sha256)?;
        self.keep(cache, sha256, &bytes).await;
        Ok(bytes)
    }

    /// An OCI source: the manifest pinned by its digest (kept, or pulled),
    /// its signature when some key is trusted, its one wasm layer (kept, or
    /// pulled), each verified.
    async fn oci(
        &self,
        cache: &Arc<CompiledCache>,
        remote: &Remote,
        trust: &Trust,
    ) -> Result<(Vec<u8>, Option<String>), Refusal> {
        let Remote::Oci {
            registry,
            repository,
            digest,
            plain_http,
            ..
        } = remote
        else {
            return Err(Refusal::Fetch("not an OCI source".into()));
        };
        let reference = oci_client::Reference::with_digest(
            registry.clone(),
            repository.clone(),
            format!("sha256:{digest}"),
        );
        let scheme = if *plain_http { "http" } else { "https" };
        let base = format!(
            "{scheme}://{}/v2/{repository}",
            reference.resolve_registry()
        );
        // The token is asked for once, when something must be pulled.
        let mut token: Option<Option<String>> = None;
        let manifest = match self.kept(cache, digest, MAX_OCI_MANIFEST_BYTES).await {
            Some(kept) => kept,
            None => {
                let t = self.token(&reference, *plain_http).await?;
                let url = format!("{base}/manifests/sha256:{digest}");
                let bytes = self
                    .download(
                        &url,
                        t.as_deref(),
                        Some(MANIFEST_ACCEPT),
                        MAX_OCI_MANIFEST_BYTES,
                    )
                    .await?;
                verify(&bytes, digest)?;
                token = Some(t);
                bytes
            }
        };
        let mut signer = None;
        if trust.active() {
            let t = match &token {
                Some(t) => t.clone(),
                None => self.token(&reference, *plain_http).await?,
            };
            let signatures = self
                .oci_signatures(&base, t.as_deref(), digest, true)
                .await?;
            signer = signed(trust, digest, &signatures)?;
            token = Some(t);
        }
        let layer = self.wasm_layer(&manifest)?;
        let bytes = match self.kept(cache, &layer, self.max_bytes).await {
            Some(kept) => kept,
            None => {
                let t = match token {
                    Some(t) => t,
                    None => self.token(&reference, *plain_http).await?,
                };
                let url = format!("{base}/blobs/sha256:{layer}");
                let bytes = self
                    .download(&url, t.as_deref(), None, self.max_bytes)
                    .await?;
                verify(&bytes, &layer)?;
                self.keep(cache, &layer, &bytes).await;
                bytes
            }
        };
        // Kept once its layer is: a manifest kept means its layer was too.
        self.keep(cache, digest, &manifest).await;
        Ok((bytes, signer))
    }

    /// The cosign signatures of the OCI manifest `digest` (the manifest at
    /// the tag `sha256-<digest>.sig`): each layer's payload (verified by its
    /// digest) and the signature its annotation holds; none when the tag is
    /// not there. Fetched once per process when `cached` (a policy set's
    /// are fetched at each look: its signature may arrive after it).
    pub(super) async fn oci_signatures(
        &self,
        base: &str,
        token: Option<&str>,
        digest: &str,
        cached: bool,
    ) -> Result<Signatures, Refusal> {
        let url = format!("{base}/manifests/sha256-{digest}.sig");
        let known = cached
            .then(|| {
                self.signatures
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&url)
                    .cloned()
            })
            .flatten();
        if let Some(known) = known {
            return Ok(known);
        }
        let not_found = format!("HTTP {}", reqwest::StatusCode::NOT_FOUND);
        let manifest = match self
            .download(&url, token, Some(MANIFEST_ACCEPT), MAX_OCI_MANIFEST_BYTES)
            .await
        {
            Ok(m) => Some(m),
            Err(Refusal::Fetch(m)) if m == not_found => None,
            Err(Refusal::Fetch(m)) => {
                return Err(Refusal::Fetch(format!(
                    "its signature (sha256-{digest}.sig): {m}"
                )));
            }
            Err(e) => return Err(e),
        };
        let mut found = Vec::new();
        if let Some(manifest) = manifest {
            let parsed: OciManifest = serde_json::from_slice(&manifest).map_err(|e| {
                Refusal::Signature(format!(
                    "its signature manifest is not an OCI manifest: {e}"
                ))
            })?;
            for layer in &parsed.layers {
                let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
                    continue;
                };
                let Some(hex) = layer.digest.strip_prefix("sha256:") else {
                    continue;
                };
                if layer.size > MAX_PAYLOAD_BYTES {
                    continue;
                }
                let payload = self
                    .download(
                        &format!("{base}/blobs/{}", layer.digest),
                        token,
                        None,
                        MAX_PAYLOAD_BYTES,
                    )
                    .await?;
                verify(&payload, hex)?;
                found.push((payload, signature.clone()));
            }
        }
        let found: Signatures = found.into();
        self.signatures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(url, Arc::clone(&found));
        Ok(found)
    }

    /// The SHA-256 of the manifest's one wasm layer, checked: a wasm
    /// media type, a sha256 digest, within the size cap.
    fn wasm_layer(&self, manifest: &[u8]) -> Result<String, Refusal> {
        let parsed: OciManifest = serde_json::from_slice(manifest).map_err(|e| {
            Refusal::Fetch(format!("its manifest is not an OCI image manifest: {e}"))
        })?;
        let wasm: Vec<&OciDescriptor> = parsed
            .layers
            .iter()
            .filter(|l| {
                l.media_type == WASM_LAYER_MEDIA_TYPE
                    || l.media_type == LEGACY_WASM_LAYER_MEDIA_TYPE
            })
            .collect();
        let [layer] = wasm.as_slice() else {
            let types: Vec<&str> = parsed
                .layers
                .iter()
                .map(|l| l.media_type.as_str())
                .collect();
            return Err(Refusal::Fetch(format!(
                "not a wasm artifact: its manifest must have exactly one layer of type \
                 `{WASM_LAYER_MEDIA_TYPE}`; it has {types:?}"
            )));
        };
        if layer.size > self.max_bytes {
            return Err(Refusal::Fetch(format!(
                "its wasm layer is {} bytes, larger than the limit of {} bytes",
                layer.size, self.max_bytes
            )));
        }
        layer
            .digest
            .strip_prefix("sha256:")
            .ok_or_else(|| "only sha256 digests are supported".to_string())
            .and_then(sha256_hex)
            .map_err(|why| Refusal::Fetch(format!("its wasm layer's digest: {why}")))
    }

    /// A pull token for `reference`'s repository, when its registry asks
    /// for one (anonymous: public or network-restricted registries).
    pub(super) async fn token(
        &self,
        reference: &oci_client::Reference,
        plain_http: bool,
    ) -> Result<Option<String>, Refusal> {
        use oci_client::client::{ClientConfig, ClientProtocol};
        let config = ClientConfig {
            protocol: if plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(self.limits.timeout),
            read_timeout: Some(self.limits.timeout),
            ..ClientConfig::default()
        };
        let client = oci_client::Client::new(config);
        let timeout = self.limits.timeout;
        self.tries(|| async {
            let asked = client.auth(
                reference,
                &oci_client::secrets::RegistryAuth::Anonymous,
                oci_client::RegistryOperation::Pull,
            );
            match tokio::time::timeout(timeout, asked).await {
                Ok(Ok(token)) => Ok(token),
                Ok(Err(e)) => Err(Failure {
                    message: format!("asking the registry for access: {}", ErrorChain(&e)),
                    transient: true,
                }),
                Err(_) => Err(Failure {
                    message: format!(
                        "the registry did not answer within {} ms",
                        timeout.as_millis()
                    ),
                    transient: true,
                }),
            }
        })
        .await
        .map_err(Refusal::Fetch)
    }

    /// GETs `url` (with `token` as a bearer, asking for `accept`), at most
    /// `cap` bytes, within the tries.
    pub(super) async fn download(
        &self,
        url: &str,
        token: Option<&str>,
        accept: Option<&str>,
        cap: u64,
    ) -> Result<Vec<u8>, Refusal> {
        let client = self.client().map_err(Refusal::Fetch)?;
        self.tries(|| get_capped(&client, url, token, accept, cap))
            .await
            .map_err(Refusal::Fetch)
    }

    /// `attempt` until it succeeds, fails for good, or has had its tries;
    /// each wait doubles the one before.
    async fn tries<T, F, Fut>(&self, mut attempt: F) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let tries = self.limits.tries.max(1);
        let mut wait = self.limits.backoff;
        let mut n = 1;
        loop {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(f) if f.transient && n < tries => {
                    tracing::debug!(
                        "fetch try {n} of {tries} failed, trying again: {}",
                        f.message
                    );
                    tokio::time::sleep(wait).await;
                    wait = wait.saturating_mul(2);
                    n += 1;
                }
                Err(f) if f.transient => return Err(format!("{} ({n} tries)", f.message)),
                Err(f) => return Err(f.message),
            }
        }
    }

    fn client(&self) -> Result<reqwest::Client, String> {
        self.client
            .get_or_init(|| {
                let t = self.limits.timeout;
                reqwest::Client::builder()
                    .timeout(t)
                    .connect_timeout(t.min(std::time::Duration::from_secs(10)))
                    .redirect(reqwest::redirect::Policy::limited(5))
                    .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| format!("cannot set up the HTTP client: {e}"))
            })
            .clone()
    }

    /// The blob with SHA-256 `hex`, when kept (and intact).
    pub(super) async fn kept(
        &self,
        cache: &Arc<CompiledCache>,
        hex: &str,
        cap: u64,
    ) -> Option<Vec<u8>> {
        if let Some(bytes) = self
            .memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(hex)
        {
            return Some(bytes.to_vec());
        }
        let (cache, hex) = (Arc::clone(cache), hex.to_string());
        tokio::task::spawn_blocking(move || cache.blob(&hex, cap))
            .await
            .ok()
            .flatten()
    }

    /// Keeps the verified blob with SHA-256 `hex`: on disk beside the
    /// compiled cache, else (cache off, or not writable) in memory.
    pub(super) async fn keep(&self, cache: &Arc<CompiledCache>, hex: &str, bytes: &[u8]) {
        let (c, h, b) = (Arc::clone(cache), hex.to_string(), bytes.to_vec());
        let stored = tokio::task::spawn_blocking(move || c.store_blob(&h, &b))
            .await
            .unwrap_or(false);
        if !stored {
            self.memory
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(hex.to_string(), bytes.into());
        }
    }
}

/// The trusted key's id when one of `signatures` (payload, signature)
/// names the manifest `digest` and was made by a key `trust` holds; `None`
/// when there is none and none is required; else why not.
pub(super) fn signed(
    trust: &Trust,
    digest: &str,
    signatures: &[(Vec<u8>, String)],
) -> Result<Option<String>, Refusal> {
    if signatures.is_empty() {
        return if trust.required {
            Err(Refusal::Signature(format!(
                "signatures are required and it has none (no sha256-{digest}.sig in its repository)"
            )))
        } else {
            Ok(None)
        };
    }
    let mut why = Vec::new();
    for (payload, signature) in signatures {
        match payload_names(payload, digest)
            .and_then(|()| trust.signer(payload, [signature.as_str()]))
        {
            Ok(key) => {
                tracing::debug!(digest, key = key.id(), "signature verified");
                return Ok(Some(key.id().to_string()));
            }
            Err(e) => why.push(e),
        }
    }
    Err(Refusal::Signature(format!(
        "none of its {} signature(s) is good: {}",
        signatures.len(),
        why.join("; ")
    )))
}

/// `Err` unless `bytes` have SHA-256 `hex`.
pub(super) fn verify(bytes: &[u8], hex: &str) -> Result<(), Refusal> {
    let found = crate::call::plugin::digest(bytes);
    if found == hex {
        Ok(())
    } else {
        Err(Refusal::Digest {
            expected: hex.to_string(),
            found,
        })
    }
}

/// One GET of `url`, its body read to at most `cap` bytes.
async fn get_capped(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    accept: Option<&str>,
    cap: u64,
) -> Result<Vec<u8>, Failure> {
    let mut request = client.get(url);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    if let Some(a) = accept {
        request = request.header(reqwest::header::ACCEPT, a);
    }
    let transient = |e: reqwest::Error| Failure {
        message: format!("{}", ErrorChain(&e)),
        transient: true,
    };
    let mut response = request.send().await.map_err(transient)?;
    let status = response.status();
    if !status.is_success() {
        return Err(Failure {
            message: format!("HTTP {status}"),
            transient: status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS,
        });
    }
    let too_large = || Failure::permanent(format!("larger than the limit of {cap} bytes"));
    if response.content_length().is_some_and(|n| n > cap) {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transient)? {
        if (bytes.len() + chunk.len()) as u64 > cap {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// An error with its causes, `: `-separated (reqwest's own text stops at
/// "error sending request").
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        while let Some(e) = next {
            write!(f, ": {e}")?;
            next = e.source();
        }
        Ok(())
    }
}
