//! Names, checked once where they enter. One rule ([`is_valid_name`]) for
//! tenant names — a request's `tenant`, a `--tenant` flag, a manifest's
//! `tenants = [...]`, a directory under `tenants/` — and plugin names — a
//! manifest's `name`, a component file's stem. Past that point a
//! [`TenantName`] is known to be safe to use as a directory name, a metric
//! label and a map key; nothing checks it again.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a tenant or plugin name may be, as the error messages say it.
pub const NAME_RULE: &str =
    "1-64 characters of letters, digits, '_', '-', '.', not starting with '.'";

/// The tenant name reserved for the operator's global account (its
/// `account` label in the metrics): no tenant may take it.
pub const GLOBAL_ACCOUNT: &str = "global";

/// Whether `name` follows the one rule for tenant and plugin names: 1–64
/// characters of `[A-Za-z0-9_.-]`, not starting with a dot (so no `..`, no
/// hidden files, no separators, no quotes, backslashes or control
/// characters).
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A valid tenant name: it follows `is_valid_name` and is not
/// `GLOBAL_ACCOUNT`. The only way to make one is [`TenantName::try_from`]
/// (or [`str::parse`], or deserializing), which checks it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantName(String);

/// A string that is not a valid [`TenantName`]; its message names it and
/// says what a tenant name may be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", invalid_tenant_message(.0))]
pub struct InvalidTenantName(pub String);

fn invalid_tenant_message(name: &str) -> String {
    if name == GLOBAL_ACCOUNT {
        format!("invalid tenant name {name:?}: it is reserved for the global account")
    } else {
        format!("invalid tenant name {name:?}: use {NAME_RULE}")
    }
}

impl TenantName {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TenantName {
    type Error = InvalidTenantName;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        if is_valid_name(&name) && name != GLOBAL_ACCOUNT {
            Ok(TenantName(name))
        } else {
            Err(InvalidTenantName(name))
        }
    }
}

impl TryFrom<&str> for TenantName {
    type Error = InvalidTenantName;

    fn try_from(name: &str) -> Result<Self, Self::Error> {
        TenantName::try_from(name.to_string())
    }
}

impl FromStr for TenantName {
    type Err = InvalidTenantName;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        TenantName::try_from(name)
    }
}

impl From<TenantName> for String {
    fn from(name: TenantName) -> String {
        name.0
    }
}

impl Deref for TenantName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for TenantName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for TenantName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for TenantName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for TenantName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_once_at_construction() {
        for ok in ["acme", "acme-1.prod", "A_b", &"x".repeat(64)] {
            let name = TenantName::try_from(ok).expect(ok);
            assert_eq!(name.as_str(), ok);
        }
        for bad in [
            "",
            "../acme",
            "a/b",
            ".hidden",
            "has space",
            "a\"b",
            "a\\b",
            "a\nb",
            &"x".repeat(65),
            GLOBAL_ACCOUNT,
        ] {
            let err = TenantName::try_from(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        let reserved = TenantName::try_from(GLOBAL_ACCOUNT).expect_err("reserved");
        assert!(reserved.to_string().contains("reserved"), "{reserved}");
        let parsed: TenantName = serde_json::from_str("\"acme\"").expect("valid");
        assert_eq!(parsed, "acme");
        assert!(serde_json::from_str::<TenantName>("\"../x\"").is_err());
        assert_eq!(serde_json::to_string(&parsed).expect("json"), "\"acme\"");
    }
}
