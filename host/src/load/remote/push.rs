//! Publishing a component as an OCI artifact (`toolgate push`): the
//! component as the one layer (`application/wasm`), a small config
//! (`application/vnd.wasm.config.v0+json`), and an image manifest written
//! here byte for byte, so the digest printed is the digest of what the
//! registry holds and the same file always pushes to the same digest. A
//! policy set (`toolgate push --set`) is pushed the same way, its layer
//! the directory's archive (see `set/pack.rs`).
//!
//! The manifest is pushed by its digest first, then its signature (with
//! `--sign`), and only then is the tag moved to it: whoever follows the
//! tag never finds a version whose signature is not there yet.

use std::path::Path;

use super::set::{SET_CONFIG_MEDIA_TYPE, SET_LAYER_MEDIA_TYPE};
use super::signature::{
    SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, SigningKey, simple_signing_payload,
};
use super::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, host_of, is_loopback};
use crate::call::plugin::digest;
use crate::error::Error;

/// The media type of the manifest pushed.
const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// How [`push`] speaks to the registry.
#[derive(Clone, Debug, Default)]
pub struct PushOptions {
    /// Plain HTTP instead of HTTPS. A registry on loopback (`localhost`,
    /// `127.0.0.0/8`, `::1`) is spoken to in plain HTTP whatever this
    /// says, as a manifest's `oci` source is.
    pub plain_http: bool,
    /// HTTP basic credentials, when the registry wants them; `None`:
    /// anonymous.
    pub credentials: Option<(String, String)>,
    /// Sign what is pushed with this key, as cosign signs an image: a
    /// signature manifest at the tag `sha256-<digest>.sig` (replacing any
    /// signature there before).
    pub sign: Option<std::sync::Arc<SigningKey>>,
}

/// Pushes `component` to `reference` (`[oci://]registry/repo[:tag]`; the
/// tag defaults to `latest`) and returns the reference pinned by the
/// manifest's digest, `registry/repo:tag@sha256:<hex>`: what a manifest's
/// `oci` key takes.
pub async fn push(
    component: &[u8],
    reference: &str,
    options: &PushOptions,
) -> Result<String, Error> {
    let layer_digest = format!("sha256:{}", digest(component));
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    }))
    .map_err(|e| Error::Push {
        reference: reference.to_string(),
        message: e.to_string(),
    })?;
    let artifact = Artifact {
        layer: component,
        layer_media_type: WASM_LAYER_MEDIA_TYPE,
        config,
        config_media_type: WASM_CONFIG_MEDIA_TYPE,
    };
    push_artifact(&artifact, reference, options).await
}

/// Pushes the plugin directory `dir` (its manifest, components and
/// `tenants/`) to `reference` as one policy set: one layer, the
/// directory's archive (`application/vnd.toolgate.set.v1.tar`; the same
/// directory always gives the same bytes, so the same digest). Returns
/// the reference pinned by the manifest's digest, as [`push`] does.
pub async fn push_set(dir: &Path, reference: &str, options: &PushOptions) -> Result<String, Error> {
    let refused = |message: String| Error::Push {
        reference: reference.to_string(),
        message,
    };
    let owned = dir.to_path_buf();
    let tar = tokio::task::spawn_blocking(move || super::set::pack::pack(&owned))
        .await
        .map_err(|e| refused(e.to_string()))?
        .map_err(|why| refused(format!("packing {}: {why}", dir.display())))?;
    let config = serde_json::to_vec(&serde_json::json!({
        "layerDigests": [format!("sha256:{}", digest(&tar))],
    }))
    .map_err(|e| refused(e.to_string()))?;
    let artifact = Artifact {
        layer: &tar,
        layer_media_type: SET_LAYER_MEDIA_TYPE,
        config,
        config_media_type: SET_CONFIG_MEDIA_TYPE,
    };
    push_artifact(&artifact, reference, options).await
}

/// What [`push_artifact`] pushes: one layer and a config.
struct Artifact<'a> {
    layer: &'a [u8],
    layer_media_type: &'static str,
    config: Vec<u8>,
    config_media_type: &'static str,
}

/// Pushes `artifact` to `reference`: its blobs, its manifest by digest,
/// its signature (when `options` sign), then the tag.
async fn push_artifact(
    artifact: &Artifact<'_>,
    reference: &str,
    options: &PushOptions,
) -> Result<String, Error> {
    use oci_client::client::{ClientConfig, ClientProtocol};
    use oci_client::secrets::RegistryAuth;
    let refused = |message: String| Error::Push {
        reference: reference.to_string(),
        message,
    };
    let written = reference.strip_prefix("oci://").unwrap_or(reference);
    let parsed = oci_client::Reference::try_from(written)
        .map_err(|e| refused(format!("not an OCI reference: {e}")))?;
    if parsed.digest().is_some() {
        return Err(refused(
            "name a tag to push to, not a digest: the digest is the registry's answer".into(),
        ));
    }
    let tag = parsed.tag().unwrap_or("latest").to_string();
    let layer_digest = format!("sha256:{}", digest(artifact.layer));
    let config = &artifact.config;
    let config_digest = format!("sha256:{}", digest(config));
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": artifact.config_media_type,
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": artifact.layer_media_type,
            "digest": layer_digest,
            "size": artifact.layer.len(),
        }],
    }))
    .map_err(|e| refused(e.to_string()))?;
    let plain_http = options.plain_http || is_loopback(host_of(parsed.registry()));
    let client = oci_client::Client::new(ClientConfig {
        protocol: if plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        ..ClientConfig::default()
    });
    let auth = match &options.credentials {
        Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
        None => RegistryAuth::Anonymous,
    };
    // Over HTTPS, a registry that speaks plain HTTP fails with a TLS
    // error that does not say so: the message names the way out.
    let hint = if plain_http {
        ""
    } else {
        " (spoken to over HTTPS; a registry that speaks plain HTTP needs --plain-http)"
    };
    let failed = |what: &str, e: oci_client::errors::OciDistributionError| {
        refused(format!("{what}: {e}{hint}"))
    };
    client
        .auth(&parsed, &auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(|e| failed("authenticating", e))?;
    client
        .push_blob(&parsed, artifact.layer, &layer_digest)
        .await
        .map_err(|e| failed("pushing the layer", e))?;
    client
        .push_blob(&parsed, config, &config_digest)
        .await
        .map_err(|e| failed("pushing the config", e))?;
    let manifest_digest = digest(&manifest);
    let content_type = reqwest::header::HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE);
    let by_digest = oci_client::Reference::with_digest(
        parsed.registry().to_string(),
        parsed.repository().to_string(),
        format!("sha256:{manifest_digest}"),
    );
    client
        .push_manifest_raw(&by_digest, manifest.clone(), content_type.clone())
        .await
        .map_err(|e| failed("pushing the manifest", e))?;
    if let Some(key) = &options.sign {
        let repository = format!("{}/{}", parsed.registry(), parsed.repository());
        let payload = simple_signing_payload(&repository, &manifest_digest);
        let signature = key.sign(&payload).map_err(refused)?;
        let payload_digest = format!("sha256:{}", digest(&payload));
        // cosign's signature image config: empty, its one layer named.
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "", "config": {}, "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"}], "os": "",
            "rootfs": {"type": "layers", "diff_ids": [payload_digest]},
        }))
        .map_err(|e| refused(e.to_string()))?;
        let config_digest = format!("sha256:{}", digest(&config));
        let signature_manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
                "digest": payload_digest,
                "size": payload.len(),
                "annotations": {SIGNATURE_ANNOTATION: signature},
            }],
        }))
        .map_err(|e| refused(e.to_string()))?;
        let at = oci_client::Reference::with_tag(
            parsed.registry().to_string(),
            parsed.repository().to_string(),
            format!("sha256-{manifest_digest}.sig"),
        );
        client
            .push_blob(&at, &payload, &payload_digest)
            .await
            .map_err(|e| failed("pushing the signature", e))?;
        client
            .push_blob(&at, &config, &config_digest)
            .await
            .map_err(|e| failed("pushing the signature's config", e))?;
        client
            .push_manifest_raw(&at, signature_manifest, content_type.clone())
            .await
            .map_err(|e| failed("pushing the signature's manifest", e))?;
    }
    // The tag last: it names a version only once its signature is there.
    client
        .push_manifest_raw(&parsed, manifest, content_type)
        .await
        .map_err(|e| failed("moving the tag", e))?;
    Ok(format!(
        "{}/{}:{tag}@sha256:{manifest_digest}",
        parsed.registry(),
        parsed.repository()
    ))
}
