//! Where a granted request goes: the network (the plugin's own reqwest
//! client), or [`HttpAnswers`] a program scripted in its place —
//! `toolgate test` answers a case's requests from its `[[case.http]]`.
//! Either way the grant's method, host and budget checks come first; only
//! what the network needs (name resolution, the address checks) is skipped
//! by a scripted transport. Serving never scripts: a manifest builds its
//! specs with none, and no request can set one.

use std::sync::Arc;

/// An answer to one request, handed to the guest as the network's would be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The status code.
    pub status: u16,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Answers a plugin's requests in place of the network (see the module
/// docs): set on [`PluginSpec::http_answers`](crate::PluginSpec) or
/// [`RegistryOptions::http_answers`](crate::RegistryOptions).
pub trait HttpAnswers: Send + Sync + std::fmt::Debug {
    /// The answer to a granted request (each redirect hop is one), or
    /// `None`: none is scripted, and the request fails as one to a host
    /// that cannot be reached does (`http-failed`).
    fn answer(&self, method: &str, url: &str, body: &[u8]) -> Option<HttpAnswer>;
}

/// A plugin's transport.
pub(crate) enum Transport {
    /// Its own client (no proxy, no automatic redirects, its grant's
    /// resolver, its own pool).
    Network(reqwest::Client),
    /// Scripted answers; nothing reaches the network.
    Scripted(Arc<dyn HttpAnswers>),
}

/// A request's answer before its body is read.
pub(crate) enum Answered {
    /// From the network: the body is still to be read.
    Network(reqwest::Response),
    /// Scripted: all of it.
    Scripted(HttpAnswer),
}

impl Answered {
    /// Its status code.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Answered::Network(r) => r.status().as_u16(),
            Answered::Scripted(a) => a.status,
        }
    }

    /// Its `Location` header, when it has one (`Some(None)`: one that is
    /// not text).
    pub(crate) fn location(&self) -> Option<Option<String>> {
        match self {
            Answered::Network(r) => r
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|v| v.to_str().ok().map(str::to_owned)),
            Answered::Scripted(a) => a
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("location"))
                .map(|(_, v)| Some(v.clone())),
        }
    }
}
