//! A policy set followed by its tag: [`SetSource`].
//!
//! Every poll resolves the tag to a manifest digest (the SHA-256 of the
//! manifest's bytes as fetched, never a header's word). A digest not
//! serving is a new version: its signature is checked (when some key is
//! trusted), its one layer fetched (or found kept) and verified, unpacked
//! into a directory of its own under the cache, and loaded by a registry
//! of its own, every tenant with it. Only a version that loads whole is
//! swapped in, in one store: a call takes the registry serving when it
//! starts and finishes on it, so a replica never serves a mix of two
//! versions. Anything else is refused, logged with its reason and counted
//! once, and the version serving keeps serving.
//!
//! The version served is recorded beside the cache (its digest and
//! signatures; its manifest and layer are kept blobs), so a restart with
//! the registry down serves it again — re-verified against the keys
//! trusted now.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use super::super::fetch::{
    Fetcher, MANIFEST_ACCEPT, MAX_OCI_MANIFEST_BYTES, OciManifest, Refusal, Signatures, signed,
    verify,
};
use super::super::signature::Trust;
use super::super::{host_of, is_loopback, sha256_hex};
use super::{SET_LAYER_MEDIA_TYPE, pack};
use crate::error::Error;
use crate::load::cache::{CompiledCache, write_private};
use crate::load::loader::{IssueKind, LoadLimits};
use crate::load::policy::Policy;
use crate::load::registry::{Registry, RegistryOptions};
use crate::runtime::engine::Engine;

/// How a [`SetSource`] follows its set.
#[derive(Clone, Debug)]
pub struct SetOptions {
    /// The set: `oci://registry/repo:tag` (the tag defaults to `latest`;
    /// a digest is refused: a set is followed by its tag).
    pub reference: String,
    /// Plain HTTP instead of HTTPS (a loopback registry is spoken to in
    /// plain HTTP whatever this says).
    pub plain_http: bool,
    /// How often the tag is resolved. Default: 10 s.
    pub poll: Duration,
    /// The keys a version must be signed with, and whether a signature is
    /// required (`serve --trusted-key`, `--require-signatures`). The
    /// operator's: nothing in a set changes it.
    pub trust: Trust,
    /// The policy each version is loaded under (its global manifest
    /// overrides it key by key, as a directory's does).
    pub policy: Policy,
    /// Caps on files, compiles and fetches.
    pub load: LoadLimits,
    /// The cache directory: compiled components, kept blobs, unpacked
    /// versions and the record of the version served. `None`: a temporary
    /// directory, and no warm start.
    pub cache_dir: Option<PathBuf>,
    /// The largest layer (the set's archive) fetched, bytes. Default:
    /// 512 MiB.
    pub max_bytes: u64,
}

impl SetOptions {
    /// The defaults for the set `reference`, the cache directory the
    /// default's ([`CompiledCache::from_env`]).
    pub fn new(reference: impl Into<String>) -> SetOptions {
        SetOptions {
            reference: reference.into(),
            plain_http: false,
            poll: Duration::from_secs(10),
            trust: Trust::default(),
            policy: Policy::default(),
            load: LoadLimits::default(),
            cache_dir: CompiledCache::from_env().dir().map(PathBuf::from),
            max_bytes: 512 << 20,
        }
    }
}

/// Where the set is and what serves from it, as `GET /v1/plugins` (`set`)
/// and the metrics show it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SetStatus {
    /// The set followed, `oci://registry/repo:tag`.
    pub source: String,
    /// The version serving: its manifest digest, `sha256:<hex>`.
    pub digest: String,
    /// Versions swapped in since the process started (the first is 1).
    pub generation: u64,
    /// The trusted key that signed the version serving, if one did.
    pub signer: Option<String>,
    /// Whether the version serving is the one kept from before a restart,
    /// the registry not reached since.
    pub from_cache: bool,
    /// Versions refused since start (each version and reason counted once).
    pub refused: u64,
    /// The last version refused, and why.
    pub last_refusal: Option<SetRefusal>,
    /// Polls that could not resolve the tag (the registry unreachable, the
    /// tag missing) since start.
    pub poll_failures: u64,
    /// Why the last poll could not resolve the tag; `None` once one does.
    pub last_poll_failure: Option<String>,
}

/// A version of a set that was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SetRefusal {
    /// Its manifest digest, `sha256:<hex>`.
    pub digest: String,
    /// Why it was refused.
    pub reason: String,
}

/// Where the set is: its registry, repository and tag.
#[derive(Debug)]
struct Place {
    /// `oci://registry/repo:tag`.
    shown: String,
    /// For pull tokens.
    reference: oci_client::Reference,
    tag: String,
    plain_http: bool,
    /// `scheme://registry/v2/repo`.
    base: String,
}

impl Place {
    fn parse(written: &str, plain_http: bool) -> Result<Place, String> {
        let bare = written
            .strip_prefix("oci://")
            .ok_or_else(|| format!("{written:?}: name the set as oci://registry/repo:tag"))?;
        let parsed = oci_client::Reference::try_from(bare)
            .map_err(|e| format!("{written:?} is not an OCI reference: {e}"))?;
        if parsed.digest().is_some() {
            return Err(format!(
                "{written:?} names a digest: a set is followed by its tag \
                 (oci://registry/repo:tag), each version pinned by the digest it resolves to"
            ));
        }
        let tag = parsed.tag().unwrap_or("latest").to_string();
        let registry = parsed.registry().to_string();
        let plain_http = plain_http || is_loopback(host_of(&registry));
        let scheme = if plain_http { "http" } else { "https" };
        let base = format!(
            "{scheme}://{}/v2/{}",
            parsed.resolve_registry(),
            parsed.repository()
        );
        Ok(Place {
            shown: format!("oci://{registry}/{}:{tag}", parsed.repository()),
            reference: parsed,
            tag,
            plain_http,
            base,
        })
    }
}

/// The version served, as recorded for a warm start.
#[derive(Serialize, Deserialize)]
struct Record {
    source: String,
    /// Manifest digest, hex.
    digest: String,
    /// `(payload base64, signature)` pairs.
    signatures: Vec<(String, String)>,
}

/// Why a version was not prepared, and whether trying it again may do
/// better (a signature not there yet, a layer not fetched).
struct NotPrepared {
    reason: String,
    retry: bool,
}

impl NotPrepared {
    fn fin(reason: impl Into<String>) -> NotPrepared {
        NotPrepared {
            reason: reason.into(),
            retry: false,
        }
    }
}

/// Everything but what serves: fetches, verifies, unpacks and loads.
struct Puller {
    place: Place,
    options: SetOptions,
    engine: Engine,
    fetcher: Fetcher,
    blobs: Arc<CompiledCache>,
    /// `<cache>/sets`, or a temporary directory's.
    sets_dir: PathBuf,
    _scratch: Option<tempfile::TempDir>,
}

/// A policy set followed by its tag, and the registry of the version
/// serving (see the module's documentation).
pub struct SetSource {
    puller: Puller,
    current: ArcSwap<Registry>,
    status: Mutex<SetStatus>,
    /// The last refusal, and whether that version is tried again.
    refusal: Mutex<Option<(SetRefusal, bool)>>,
    /// One poll at a time.
    polling: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SetSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetSource")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl SetSource {
    /// Follows `options.reference`: serves the version its tag names now
    /// once it is verified and loads whole; failing that (the registry
    /// unreachable, the version refused), the version served before a
    /// restart, if one is recorded in the cache and still verifies (a warm
    /// start). With neither (a cold start), an [`Error::Set`] saying why:
    /// nothing is served.
    pub async fn start(engine: Engine, options: SetOptions) -> Result<SetSource, Error> {
        let place =
            Place::parse(&options.reference, options.plain_http).map_err(|message| Error::Set {
                set: options.reference.clone(),
                digest: "-".into(),
                message,
            })?;
        let (blobs, sets_dir, scratch) = match &options.cache_dir {
            Some(dir) => (CompiledCache::at(dir), dir.join("sets"), None),
            None => {
                let scratch = tempfile::tempdir().map_err(|e| Error::Set {
                    set: place.shown.clone(),
                    digest: "-".into(),
                    message: format!("cannot make a directory to unpack into: {e}"),
                })?;
                let sets = scratch.path().join("sets");
                (CompiledCache::disabled(), sets, Some(scratch))
            }
        };
        let fetcher = Fetcher::new(options.load.fetch.clone(), options.max_bytes);
        let puller = Puller {
            place,
            options,
            engine,
            fetcher,
            blobs: Arc::new(blobs),
            sets_dir,
            _scratch: scratch,
        };
        let mut status = SetStatus {
            source: puller.place.shown.clone(),
            ..SetStatus::default()
        };
        let mut refusal = None;
        let live = match puller.resolve().await {
            Err(why) => {
                status.poll_failures = 1;
                status.last_poll_failure = Some(why.clone());
                Err(format!("the tag could not be resolved: {why}"))
            }
            Ok((hex, manifest, token)) => {
                match puller.prepare(&hex, &manifest, token.as_deref()).await {
                    Ok(ready) => Ok((hex, ready)),
                    Err(no) => {
                        let r = SetRefusal {
                            digest: format!("sha256:{hex}"),
                            reason: no.reason.clone(),
                        };
                        tracing::warn!(set = %puller.place.shown, digest = %r.digest, "policy set version refused: {}", r.reason);
                        status.refused = 1;
                        status.last_refusal = Some(r.clone());
                        refusal = Some((r, no.retry));
                        Err(format!("sha256:{hex} was refused: {}", no.reason))
                    }
                }
            }
        };
        let (hex, (registry, signer, signatures)) = match live {
            Ok(ready) => ready,
            Err(why) => {
                let warm = puller.warm().await.map_err(|warm| Error::Set {
                    set: puller.place.shown.clone(),
                    digest: "-".into(),
                    message: format!("no version to serve: {why}; {warm}"),
                })?;
                tracing::warn!(set = %puller.place.shown, digest = %format!("sha256:{}", warm.0), "serving the policy set version kept from before ({why})");
                status.from_cache = true;
                warm
            }
        };
        puller.record(&hex, &signatures);
        status.digest = format!("sha256:{hex}");
        status.generation = 1;
        status.signer = signer;
        tracing::info!(set = %status.source, digest = %status.digest, signer = ?status.signer, "policy set serving");
        Ok(SetSource {
            puller,
            current: ArcSwap::new(Arc::new(registry)),
            status: Mutex::new(status),
            refusal: Mutex::new(refusal),
            polling: tokio::sync::Mutex::new(()),
        })
    }

    /// The registry of the version serving now. Hold it for the length of
    /// one call: a new version swaps in a new registry and never changes
    /// one already taken.
    pub fn registry(&self) -> Arc<Registry> {
        self.current.load_full()
    }

    /// Where the set is and what serves from it.
    pub fn status(&self) -> SetStatus {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How often [`SetSource::spawn_polling`] polls.
    pub fn poll_interval(&self) -> Duration {
        self.puller.options.poll
    }

    /// Resolves the tag once; a new digest is verified, loaded and swapped
    /// in (`Ok(true)`), or refused (an [`Error::Set`], the version serving
    /// kept). `Ok(false)`: the digest serving is the tag's.
    pub async fn poll(&self) -> Result<bool, Error> {
        let _one = self.polling.lock().await;
        let refuse = |digest: &str, message: String| Error::Set {
            set: self.puller.place.shown.clone(),
            digest: digest.to_string(),
            message,
        };
        let (hex, manifest, token) = match self.puller.resolve().await {
            Ok(resolved) => resolved,
            Err(why) => {
                let mut status = self.lock_status();
                status.poll_failures += 1;
                if status.last_poll_failure.as_deref() != Some(&why) {
                    tracing::warn!(set = %status.source, "policy set not polled: {why}; the version serving keeps serving");
                }
                status.last_poll_failure = Some(why.clone());
                return Err(refuse("-", why));
            }
        };
        let digest = format!("sha256:{hex}");
        {
            let mut status = self.lock_status();
            status.last_poll_failure = None;
            status.from_cache = false;
            if status.digest == digest {
                return Ok(false);
            }
        }
        if let Some((last, false)) = &*self.lock_refusal()
            && last.digest == digest
        {
            return Err(refuse(&digest, last.reason.clone()));
        }
        match self.puller.prepare(&hex, &manifest, token.as_deref()).await {
            Ok((registry, signer, signatures)) => {
                let old = self.current.swap(Arc::new(registry));
                self.puller.record(&hex, &signatures);
                let status = {
                    let mut status = self.lock_status();
                    let before = std::mem::replace(&mut status.digest, digest);
                    status.generation += 1;
                    status.signer = signer;
                    self.puller.forget(before.trim_start_matches("sha256:"));
                    status.clone()
                };
                *self.lock_refusal() = None;
                tracing::info!(set = %status.source, digest = %status.digest, generation = status.generation, signer = ?status.signer, "policy set version swapped in");
                // The version before is dropped when its last call ends.
                drop(old);
                Ok(true)
            }
            Err(no) => {
                let refusal = SetRefusal {
                    digest: digest.clone(),
                    reason: no.reason.clone(),
                };
                let mut last = self.lock_refusal();
                if last.as_ref().map(|(r, _)| r) != Some(&refusal) {
                    tracing::warn!(set = %self.puller.place.shown, digest = %digest, "policy set version refused, the version serving keeps serving: {}", no.reason);
                    let mut status = self.lock_status();
                    status.refused += 1;
                    status.last_refusal = Some(refusal.clone());
                }
                *last = Some((refusal, no.retry));
                Err(refuse(&digest, no.reason))
            }
        }
    }

    /// Polls every [`SetSource::poll_interval`] until the task is aborted
    /// (what each poll did is logged and in [`SetStatus`]). Must be called
    /// inside a Tokio runtime.
    pub fn spawn_polling(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut every = tokio::time::interval(self.poll_interval());
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                every.tick().await;
                let _ = self.poll().await;
            }
        })
    }

    fn lock_status(&self) -> std::sync::MutexGuard<'_, SetStatus> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_refusal(&self) -> std::sync::MutexGuard<'_, Option<(SetRefusal, bool)>> {
        self.refusal.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A version ready to swap in: its registry, the key that signed it and
/// its signatures.
type Ready = (Registry, Option<String>, Signatures);

impl Puller {
    /// The tag's manifest now: its digest (hex, of the bytes fetched), the
    /// bytes, and the pull token used.
    async fn resolve(&self) -> Result<(String, Vec<u8>, Option<String>), String> {
        let token = self
            .fetcher
            .token(&self.place.reference, self.place.plain_http)
            .await
            .map_err(refusal_text)?;
        let url = format!("{}/manifests/{}", self.place.base, self.place.tag);
        let manifest = self
            .fetcher
            .download(
                &url,
                token.as_deref(),
                Some(MANIFEST_ACCEPT),
                MAX_OCI_MANIFEST_BYTES,
            )
            .await
            .map_err(refusal_text)?;
        Ok((crate::call::plugin::digest(&manifest), manifest, token))
    }

    /// Verifies the version `hex` (its `manifest`'s digest) and loads it:
    /// its signatures (fetched, when some key is trusted), its layer (kept,
    /// or fetched with `token`), unpacked and loaded whole.
    async fn prepare(
        &self,
        hex: &str,
        manifest: &[u8],
        token: Option<&str>,
    ) -> Result<Ready, NotPrepared> {
        let signatures = if self.options.trust.active() {
            self.fetcher
                .oci_signatures(&self.place.base, token, hex, false)
                .await
                .map_err(|r| NotPrepared {
                    reason: refusal_text(r),
                    retry: true,
                })?
        } else {
            Signatures::from([])
        };
        self.load(hex, manifest, signatures, token).await
    }

    /// [`Puller::prepare`] with the signatures in hand.
    async fn load(
        &self,
        hex: &str,
        manifest: &[u8],
        signatures: Signatures,
        token: Option<&str>,
    ) -> Result<Ready, NotPrepared> {
        verify(manifest, hex).map_err(|r| NotPrepared::fin(refusal_text(r)))?;
        let signer = if self.options.trust.active() {
            signed(&self.options.trust, hex, &signatures).map_err(|r| NotPrepared {
                reason: refusal_text(r),
                retry: true,
            })?
        } else {
            None
        };
        let layer = self.layer(manifest).map_err(NotPrepared::fin)?;
        let tar = match self
            .fetcher
            .kept(&self.blobs, &layer, self.options.max_bytes)
            .await
        {
            Some(kept) => kept,
            None => {
                let url = format!("{}/blobs/sha256:{layer}", self.place.base);
                let bytes = self
                    .fetcher
                    .download(&url, token, None, self.options.max_bytes)
                    .await
                    .map_err(|r| NotPrepared {
                        reason: format!("its layer: {}", refusal_text(r)),
                        retry: true,
                    })?;
                verify(&bytes, &layer).map_err(|r| NotPrepared::fin(refusal_text(r)))?;
                self.fetcher.keep(&self.blobs, &layer, &bytes).await;
                bytes
            }
        };
        self.fetcher.keep(&self.blobs, hex, manifest).await;
        let dir = self
            .sets_dir
            .join("unpacked")
            .join(format!("{hex}.{}", std::process::id()));
        let into = dir.clone();
        tokio::task::spawn_blocking(move || {
            if into.exists() {
                std::fs::remove_dir_all(&into).map_err(|e| format!("{}: {e}", into.display()))?;
            }
            pack::unpack(&tar, &into)
        })
        .await
        .map_err(|e| NotPrepared::fin(e.to_string()))?
        .map_err(|why| NotPrepared::fin(format!("its archive: {why}")))?;
        let options = RegistryOptions {
            cache: match &self.options.cache_dir {
                Some(d) => CompiledCache::at(d),
                None => CompiledCache::disabled(),
            },
            policy: self.options.policy.clone(),
            load: self.options.load.clone(),
            // Serving: a set's guards reach the network, never scripted answers.
            http_answers: None,
        };
        let registry = Registry::open_with(self.engine.clone(), &dir, options)
            .await
            .map_err(|e| NotPrepared::fin(e.to_string()))?;
        let set = registry.plugin_set();
        let mut issues: Vec<String> = set
            .errors
            .iter()
            .filter(|e| e.kind != IssueKind::Snapshot)
            // Named by their paths in the set, not where it is unpacked.
            .map(|e| e.message.replace(&format!("{}/", dir.display()), ""))
            .collect();
        issues.extend(
            set.refused
                .iter()
                .map(|(t, why)| format!("tenant `{t}` not admitted: {why}")),
        );
        if !issues.is_empty() {
            drop(set);
            drop(registry);
            let _ = std::fs::remove_dir_all(&dir);
            return Err(NotPrepared::fin(format!(
                "it does not load whole: {}",
                issues.join("; ")
            )));
        }
        drop(set);
        Ok((registry, signer, signatures))
    }

    /// The SHA-256 of a set manifest's one layer, checked.
    fn layer(&self, manifest: &[u8]) -> Result<String, String> {
        let parsed: OciManifest = serde_json::from_slice(manifest)
            .map_err(|e| format!("its manifest is not an OCI image manifest: {e}"))?;
        let types: Vec<&str> = parsed
            .layers
            .iter()
            .map(|l| l.media_type.as_str())
            .collect();
        let [layer] = parsed.layers.as_slice() else {
            return Err(format!(
                "not a policy set: its manifest must have exactly one layer of type \
                 `{SET_LAYER_MEDIA_TYPE}`; it has {types:?}"
            ));
        };
        if layer.media_type != SET_LAYER_MEDIA_TYPE {
            return Err(format!(
                "not a policy set: its layer is of type {:?}, not `{SET_LAYER_MEDIA_TYPE}` \
                 (a component is named by a manifest's `oci` key, not followed as a set)",
                layer.media_type
            ));
        }
        if layer.size > self.options.max_bytes {
            return Err(format!(
                "its layer is {} bytes, larger than the limit of {} bytes",
                layer.size, self.options.max_bytes
            ));
        }
        layer
            .digest
            .strip_prefix("sha256:")
            .ok_or_else(|| "only sha256 digests are supported".to_string())
            .and_then(sha256_hex)
            .map_err(|why| format!("its layer's digest: {why}"))
    }

    /// Where the version served is recorded.
    fn record_path(&self) -> PathBuf {
        let id = crate::call::plugin::digest(self.place.shown.as_bytes());
        self.sets_dir.join(format!("{}.json", &id[..16]))
    }

    /// Records `hex` as the version served (with a cache directory only).
    fn record(&self, hex: &str, signatures: &Signatures) {
        if self.options.cache_dir.is_none() {
            return;
        }
        let record = Record {
            source: self.place.shown.clone(),
            digest: hex.to_string(),
            signatures: signatures
                .iter()
                .map(|(p, s)| (BASE64.encode(p), s.clone()))
                .collect(),
        };
        let path = self.record_path();
        let written = serde_json::to_vec(&record)
            .map_err(|e| e.to_string())
            .and_then(|b| write_private(&path, &b).map_err(|e| e.to_string()));
        if let Err(e) = written {
            tracing::warn!(record = %path.display(), "cannot record the policy set version served (no warm start): {e}");
        }
    }

    /// The version recorded before, verified as a new one is (its
    /// signatures against the keys trusted now) from the blobs kept.
    async fn warm(&self) -> Result<(String, Ready), String> {
        if self.options.cache_dir.is_none() {
            return Err("no cache directory, so no version kept (cold start)".into());
        }
        let path = self.record_path();
        let text = std::fs::read(&path).map_err(|e| {
            format!(
                "no version kept from before ({}: {e}; cold start)",
                path.display()
            )
        })?;
        let record: Record = serde_json::from_slice(&text)
            .map_err(|e| format!("the version kept ({}) is unreadable: {e}", path.display()))?;
        let hex = sha256_hex(&record.digest)?;
        let manifest = self
            .fetcher
            .kept(&self.blobs, &hex, MAX_OCI_MANIFEST_BYTES)
            .await
            .ok_or_else(|| {
                format!("the version kept, sha256:{hex}: its manifest is no longer kept")
            })?;
        let signatures: Signatures = record
            .signatures
            .iter()
            .filter_map(|(p, s)| BASE64.decode(p).ok().map(|p| (p, s.clone())))
            .collect::<Vec<_>>()
            .into();
        let ready = self
            .load(&hex, &manifest, signatures, None)
            .await
            .map_err(|no| format!("the version kept, sha256:{hex}, is refused: {}", no.reason))?;
        Ok((hex, ready))
    }

    /// Removes the unpacked directory of the version `hex` (replaced).
    fn forget(&self, hex: &str) {
        let dir = self
            .sets_dir
            .join("unpacked")
            .join(format!("{hex}.{}", std::process::id()));
        if dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            tracing::debug!(dir = %dir.display(), "cannot remove a replaced version: {e}");
        }
    }
}

/// A fetch's refusal as text.
fn refusal_text(refusal: Refusal) -> String {
    match refusal {
        Refusal::Fetch(m) => m,
        Refusal::Signature(m) => format!("not signed as required: {m}"),
        Refusal::Digest { expected, found } => {
            format!("the bytes fetched have SHA-256 {found}, not {expected}")
        }
    }
}
