//! Name resolution for a plugin's requests: the system resolver, with
//! every address its grant does not allow removed before a connection is
//! tried. The addresses it hands the client are the only ones the client
//! connects to, so what is checked is what is connected to: a name whose
//! DNS answer changes between a check and a connect (DNS rebinding) cannot
//! slip an address past it.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::runtime::http::grant::HttpGrant;

/// Resolves names for one grant's client (see the module docs).
pub(super) struct GrantResolver(pub(super) Arc<HttpGrant>);

/// Every address a name resolved to is one the grant does not allow.
#[derive(Debug, thiserror::Error)]
#[error(
    "{name} resolves to {addrs}: off the public internet, and not in the grant \
     (name it in allowed_networks to reach it)"
)]
pub(super) struct AddressRefused {
    name: String,
    addrs: String,
}

impl Resolve for GrantResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let grant = Arc::clone(&self.0);
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| grant.address_allowed(a.ip()))
                .collect();
            if allowed.is_empty() && !found.is_empty() {
                let addrs = found
                    .iter()
                    .map(|a| a.ip().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(Box::new(AddressRefused { name, addrs }) as _);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}
