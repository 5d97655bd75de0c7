//! Who is calling the HTTP service: the operator, or one tenant.
//!
//! The operator's token (`--token-file`) may do anything, for any tenant.
//! A tenant's token (`--tenant-tokens-file`) binds its requests to that
//! tenant: it may call the seams only, always as itself, so a tenant that
//! makes calls cannot spend another tenant's shares, trip another tenant's
//! quarantine or read the plugin list.
//!
//! The tenants' tokens file maps each tenant to the SHA-256 digest of its
//! token, so the file holds no secret:
//!
//! ```toml
//! # printf %s "$TOKEN" | sha256sum
//! acme = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! ```

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::tenant::TenantName;

/// The SHA-256 digest of `bytes`.
pub(crate) fn sha256(bytes: impl AsRef<[u8]>) -> [u8; 32] {
    Sha256::digest(bytes.as_ref()).into()
}

/// Whether two digests are equal, compared in constant time.
pub(crate) fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Each tenant's token, by the digest of the token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantTokens(BTreeMap<[u8; 32], TenantName>);

/// Who a request comes from, as its bearer token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The operator (its token, or no token where none is configured).
    Operator,
    /// A tenant, by its own token: the seams only, as itself.
    Tenant(TenantName),
}

impl TenantTokens {
    /// Parses a tenants' tokens file (`tenant = "sha256:<64 hex digits>"`
    /// per line, TOML). The error names the tenant (key) at fault.
    pub fn parse(text: &str) -> Result<TenantTokens, String> {
        let table: BTreeMap<String, toml::Value> = toml::from_str(text).map_err(|e| {
            let before = e.span().and_then(|s| text.get(..s.start)).unwrap_or("");
            let line = before.matches('\n').count() + 1;
            format!("line {line}: {}", e.message())
        })?;
        let mut tokens = BTreeMap::new();
        for (name, value) in table {
            let tenant = TenantName::try_from(name.clone())
                .map_err(|e| format!("key `{name}`: not a tenant name: {e}"))?;
            let digest = value
                .as_str()
                .and_then(|v| v.strip_prefix("sha256:"))
                .and_then(parse_hex)
                .ok_or_else(|| {
                    format!(
                        "key `{name}`: must be \"sha256:<the 64 hex digits of the SHA-256 of its \
                         token>\" (printf %s \"$TOKEN\" | sha256sum)"
                    )
                })?;
            if let Some(other) = tokens.insert(digest, tenant) {
                return Err(format!(
                    "key `{name}`: the same token as tenant `{other}`; each tenant needs its own"
                ));
            }
        }
        Ok(TenantTokens(tokens))
    }

    /// Whether no tenant has a token.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The tenant whose token has `digest`.
    pub(crate) fn tenant(&self, digest: &[u8; 32]) -> Option<&TenantName> {
        self.0.get(digest)
    }

    /// Whether some tenant's token has `digest` (say, the operator's).
    pub fn holds(&self, token: &str) -> bool {
        self.0.contains_key(&sha256(token))
    }
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `printf %s test | sha256sum`
    const TEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_tenant_is_found_by_its_token_s_digest() {
        let tokens = TenantTokens::parse(&format!("acme = \"sha256:{TEST}\"\n")).expect("parses");
        assert_eq!(
            tokens.tenant(&sha256("test")).map(|t| t.as_str()),
            Some("acme")
        );
        assert_eq!(tokens.tenant(&sha256("tes")), None);
        assert!(tokens.holds("test") && !tokens.holds("x"));
        assert!(TenantTokens::parse("").expect("parses").is_empty());
    }

    #[test]
    fn a_bad_tokens_file_names_the_key_at_fault() {
        for (text, says) in [
            ("\"a b\" = \"sha256:00\"", "key `a b`: not a tenant name"),
            ("acme = \"test\"", "key `acme`: must be \"sha256:"),
            ("acme = \"sha256:xyz\"", "key `acme`: must be"),
            ("acme = 3", "key `acme`: must be"),
            (
                &format!(
                    "a = \"sha256:{TEST}\"\nb = \"sha256:{}\"",
                    TEST.to_uppercase()
                ),
                "key `b`: the same token as tenant `a`",
            ),
            ("a = \"sha256:00\"\nacme = ", "line 2: "),
        ] {
            let e = TenantTokens::parse(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
