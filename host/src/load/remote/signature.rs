//! Signatures on components, key-based and cosign-compatible: ECDSA over
//! P-256 with SHA-256 (cosign's default keys), a signature as base64 of
//! its ASN.1 DER.
//!
//! - A component file is signed by a detached `<file>.sig` beside it: the
//!   signature of the file's bytes (`cosign sign-blob --key K FILE`,
//!   `toolgate sign --key K FILE`).
//! - An OCI artifact is signed as cosign signs images: a manifest at the
//!   tag `sha256-<digest>.sig` of the same repository whose layers are
//!   "simple signing" payloads naming the artifact's manifest digest, each
//!   with its signature in the layer annotation
//!   `dev.cosignproject.cosign/signature` (`cosign sign --key K REF`,
//!   `toolgate push --sign K`).
//!
//! Which keys are trusted, and whether a signature is required, is the
//! operator's (`[ceilings] trusted_keys`, `require_signatures`): see
//! `docs/remote.md`, "Signatures".

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivatePkcs8KeyDer, SubjectPublicKeyInfoDer};
use serde_json::json;

/// The annotation of a cosign signature layer that holds the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The media type of a cosign signature layer (its payload).
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

/// The largest signature payload read (cosign's are a few hundred bytes).
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;

/// The DER prefix of every P-256 public key's SubjectPublicKeyInfo
/// (id-ecPublicKey, prime256v1, then the uncompressed point's bit string).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A public key signatures are checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedKey {
    /// The uncompressed P-256 point.
    point: Vec<u8>,
    /// `sha256:` and the first 16 hex digits of the SubjectPublicKeyInfo's
    /// SHA-256: how logs and errors name the key.
    id: String,
}

impl TrustedKey {
    /// A key from its PEM (`-----BEGIN PUBLIC KEY-----`, as `cosign
    /// generate-key-pair` and `openssl pkey -pubout` write it). Only
    /// ECDSA P-256 keys are accepted; the error says what the text is not.
    pub fn from_pem(pem: &str) -> Result<TrustedKey, String> {
        let spki = SubjectPublicKeyInfoDer::from_pem_slice(pem.trim().as_bytes())
            .map_err(|e| format!("not a PEM public key (-----BEGIN PUBLIC KEY-----): {e}"))?;
        let der: &[u8] = spki.as_ref();
        let point = der
            .strip_prefix(&P256_SPKI_PREFIX[..])
            .filter(|p| p.len() == 65 && p.first() == Some(&0x04))
            .ok_or("not an ECDSA P-256 public key (the only kind accepted, cosign's default)")?;
        let id = format!("sha256:{}", &crate::call::plugin::digest(der)[..16]);
        Ok(TrustedKey {
            point: point.to_vec(),
            id,
        })
    }

    /// How the key is named: `sha256:` and 16 hex digits of its digest.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether `signature` (base64 of an ASN.1 DER ECDSA signature, as
    /// cosign writes it; surrounding white space ignored) signs `message`
    /// with this key.
    pub fn verifies(&self, message: &[u8], signature: &str) -> bool {
        let Ok(der) = BASE64.decode(signature.trim()) else {
            return false;
        };
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(message, &der)
            .is_ok()
    }
}

impl serde::Serialize for TrustedKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.id)
    }
}

/// The operator's trust: the keys, and whether a signature is required.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Trust {
    /// The keys a signature must be made with (`[ceilings] trusted_keys`).
    pub keys: Vec<TrustedKey>,
    /// Whether every component must carry a signature by one of `keys`
    /// (`[ceilings] require_signatures`). Without it, a signature that is
    /// there is still checked (a wrong one is refused), a missing one is
    /// not required.
    pub required: bool,
}

impl Trust {
    /// Whether signatures are looked at at all (some key is trusted).
    pub fn active(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether a component verified before by `signer` (a key's id; `None`:
    /// unsigned, or loaded while no key was trusted) may still serve.
    pub fn admits(&self, signer: Option<&str>) -> bool {
        match signer {
            _ if !self.active() => true,
            Some(id) => self.keys.iter().any(|k| k.id() == id),
            None => !self.required,
        }
    }

    /// The trusted key that signed `message` with any of `signatures`, or
    /// why none did.
    pub fn signer<'s>(
        &self,
        message: &[u8],
        signatures: impl IntoIterator<Item = &'s str>,
    ) -> Result<&TrustedKey, String> {
        let mut seen = 0;
        for signature in signatures {
            seen += 1;
            if let Some(key) = self.keys.iter().find(|k| k.verifies(message, signature)) {
                return Ok(key);
            }
        }
        let keys: Vec<&str> = self.keys.iter().map(TrustedKey::id).collect();
        Err(if seen == 0 {
            "no signature".to_string()
        } else {
            format!(
                "{seen} signature(s), none by a trusted key ({})",
                keys.join(", ")
            )
        })
    }
}

/// A private key that signs (PKCS#8 PEM, `-----BEGIN PRIVATE KEY-----`,
/// as `toolgate keygen` and `openssl genpkey -algorithm EC -pkeyopt
/// ec_paramgen_curve:P-256` write it).
pub struct SigningKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    /// A key from its PKCS#8 PEM; the error says what the text is not.
    pub fn from_pem(pem: &str) -> Result<SigningKey, String> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem.trim().as_bytes()).map_err(|e| {
            format!(
                "not a PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----): {e} (cosign's \
                 encrypted keys are not read: export one with openssl, or make one with \
                 `toolgate keygen`)"
            )
        })?;
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            der.secret_pkcs8_der(),
            &rng,
        )
        .map_err(|e| format!("not an ECDSA P-256 private key: {e}"))?;
        Ok(SigningKey { pair, rng })
    }

    /// A new key pair: the private key's PKCS#8 PEM and the public key's
    /// PEM.
    pub fn generate() -> Result<(String, String), String> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|e| format!("generating a key: {e}"))?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|e| format!("generating a key: {e}"))?;
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(pair.public_key().as_ref());
        Ok((pem("PRIVATE KEY", pkcs8.as_ref()), pem("PUBLIC KEY", &spki)))
    }

    /// The public key, as a [`TrustedKey`].
    pub fn public(&self) -> TrustedKey {
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(self.pair.public_key().as_ref());
        TrustedKey {
            point: self.pair.public_key().as_ref().to_vec(),
            id: format!("sha256:{}", &crate::call::plugin::digest(&spki)[..16]),
        }
    }

    /// The signature of `message`: base64 of its ASN.1 DER.
    pub fn sign(&self, message: &[u8]) -> Result<String, String> {
        self.pair
            .sign(&self.rng, message)
            .map(|s| BASE64.encode(s.as_ref()))
            .map_err(|e| format!("signing: {e}"))
    }
}

/// PEM text of `der` under `label`, 64 characters a line.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = BASE64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The payload cosign signs for an image: "simple signing" JSON naming
/// the repository (`registry/repo`) and the manifest's digest (hex).
pub fn simple_signing_payload(repository: &str, manifest_digest: &str) -> Vec<u8> {
    json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": format!("sha256:{manifest_digest}")},
            "type": "cosign container image signature",
        },
        "optional": null,
    })
    .to_string()
    .into_bytes()
}

/// Whether a simple-signing `payload` is about the manifest `digest`
/// (hex): a signature for another artifact is no signature for this one.
pub fn payload_names(payload: &[u8], digest: &str) -> Result<(), String> {
    let parsed: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| format!("a signature payload that is not JSON: {e}"))?;
    let critical = &parsed["critical"];
    if critical["type"] != "cosign container image signature" {
        return Err("a signature payload that is not a cosign image signature".into());
    }
    let named = critical["image"]["docker-manifest-digest"]
        .as_str()
        .unwrap_or_default();
    if named != format!("sha256:{digest}") {
        return Err(format!(
            "a signature for another artifact ({named:?}, not sha256:{digest})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_signs_and_only_its_public_key_verifies_and_only_that_message() {
        let (private, public) = SigningKey::generate().expect("keys");
        let signer = SigningKey::from_pem(&private).expect("private");
        let trusted = TrustedKey::from_pem(&public).expect("public");
        assert_eq!(signer.public(), trusted);
        let signature = signer.sign(b"component").expect("sign");
        assert!(trusted.verifies(b"component", &signature));
        assert!(!trusted.verifies(b"component!", &signature));
        let (_, other) = SigningKey::generate().expect("keys");
        let other = TrustedKey::from_pem(&other).expect("public");
        assert!(!other.verifies(b"component", &signature));
        assert!(!trusted.verifies(b"component", "not base64!"));
        let trust = Trust {
            keys: vec![other.clone(), trusted.clone()],
            required: true,
        };
        assert_eq!(
            trust.signer(b"component", [signature.as_str()]),
            Ok(&trusted)
        );
        let none = trust.signer(b"x", [signature.as_str()]).expect_err("wrong");
        assert!(
            none.contains(other.id()) && none.contains(trusted.id()),
            "{none}"
        );
    }

    #[test]
    fn keys_that_are_not_p256_pem_are_named_as_such() {
        let rsa_spki = "-----BEGIN PUBLIC KEY-----\nMFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf\n9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n-----END PUBLIC KEY-----\n";
        let e = TrustedKey::from_pem(rsa_spki).expect_err("rsa");
        assert!(e.contains("P-256"), "{e}");
        let e = TrustedKey::from_pem("hello").expect_err("text");
        assert!(e.contains("PEM"), "{e}");
        let e = SigningKey::from_pem("hello").expect_err("text");
        assert!(e.contains("PKCS#8"), "{e}");
    }

    #[test]
    fn a_payload_names_one_digest() {
        let payload = simple_signing_payload("r.example/guards/a", &"ab".repeat(32));
        assert_eq!(payload_names(&payload, &"ab".repeat(32)), Ok(()));
        let e = payload_names(&payload, &"cd".repeat(32)).expect_err("other");
        assert!(e.contains("another artifact"), "{e}");
    }
}
