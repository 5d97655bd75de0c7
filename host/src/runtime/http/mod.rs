//! Outbound HTTP for guards: the `http` import, off unless the operator
//! grants it (see docs/http.md, "Outbound HTTP").
//!
//! The host makes every request with its own client; the guest holds no
//! socket. A plugin with a grant has an [`Outbound`], made when it loads: a
//! reqwest client of its own (no proxy, no automatic redirects, its
//! [grant's](HttpGrant) resolver, its own connection pool, so no plugin
//! rides a connection another's grant opened) and the plugin's tallies.
//! Each call gets a [`CallHttp`]: its request budget (`http_requests`,
//! `http_request_kib`, `http_response_kib`) and its waiting time, at most
//! the call's `timeout` across all its requests — a guard blocked on the
//! network holds no CPU and is still cut there.
//!
//! A request goes out only if its method and URL are granted and, for an
//! IP address or every address its name resolves to, the address is
//! public or named by the grant; redirects are followed by the host (at
//! most [`MAX_REDIRECTS`]), each hop checked the same way and counted as a
//! request. What is refused, over budget or fails traps the call with a
//! classified fault (`http-denied`, `http-budget`, `http-failed`); the
//! guard's `on_error` applies.
//!
//! Where a request that passed these checks goes is its plugin's
//! [`transport`]: the network, or answers scripted for a test.

pub(crate) mod grant;
mod resolve;
pub(crate) mod transport;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};

use crate::fault::{Fault, ImportRefused};
use crate::runtime::limits::Limits;
use crate::runtime::log_writer::redact::Secrets;
use grant::{HostPattern, HttpGrant};
use transport::{Answered, HttpAnswer, HttpAnswers, Transport};

/// The most redirects one request follows.
pub const MAX_REDIRECTS: u32 = 5;

/// The log target of every outbound request: `toolgate::http`.
pub(crate) const LOG_TARGET: &str = "toolgate::http";

/// Headers the host sets itself; a guest that sets one is refused.
const HOSTS_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-connection",
];

/// A request as the guest hands it over.
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// A response as the guest gets it.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// What a plugin's requests did, for one granted host (or `-`, for those
/// refused before one was matched) and outcome, since it was loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpTally {
    /// Requests made (or refused).
    pub requests: u64,
    /// Body bytes sent.
    pub sent: u64,
    /// Body bytes received.
    pub received: u64,
}

/// The outcome label of a request: `ok` (answered, any status),
/// `http-denied`, `http-budget` or `http-failed`.
fn outcome(fault: Option<Fault>) -> &'static str {
    fault.map_or("ok", Fault::as_str)
}

/// One plugin's outbound HTTP: its grant, its client, its tallies.
pub(crate) struct Outbound {
    grant: Arc<HttpGrant>,
    transport: Transport,
    tallies: Mutex<BTreeMap<(String, &'static str), HttpTally>>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("grant", &self.grant)
            .finish_non_exhaustive()
    }
}

impl Outbound {
    /// The client for `grant` (see the module docs), or why it could not
    /// be made; with `answers`, no client: its requests get those.
    pub(crate) fn new(
        grant: HttpGrant,
        answers: Option<Arc<dyn HttpAnswers>>,
    ) -> Result<Outbound, String> {
        let grant = Arc::new(grant);
        if let Some(answers) = answers {
            return Ok(Outbound {
                grant,
                transport: Transport::Scripted(answers),
                tallies: Mutex::default(),
            });
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(resolve::GrantResolver(Arc::clone(&grant))))
            .pool_max_idle_per_host(4)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("the HTTP client could not be made: {e}"))?;
        Ok(Outbound {
            grant,
            transport: Transport::Network(client),
            tallies: Mutex::default(),
        })
    }

    /// The grant.
    pub(crate) fn grant(&self) -> &HttpGrant {
        &self.grant
    }

    /// Every tally, by (granted host, outcome).
    pub(crate) fn tallies(&self) -> Vec<((String, &'static str), HttpTally)> {
        let t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        t.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    fn tally(&self, host: Option<&HostPattern>, fault: Option<Fault>, sent: usize, got: usize) {
        let host = host.map_or_else(|| "-".to_string(), ToString::to_string);
        let mut t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let tally = t.entry((host, outcome(fault))).or_default();
        tally.requests += 1;
        tally.sent += sent as u64;
        tally.received += got as u64;
    }
}

/// One call's outbound HTTP: what it may still send and wait.
pub(crate) struct CallHttp {
    outbound: Arc<Outbound>,
    plugin: Arc<str>,
    tenant: Arc<str>,
    requests_left: u32,
    requests: u32,
    request_bytes: usize,
    response_bytes: usize,
    /// The call's waiting allowance (its `timeout`) and what it has used.
    wait: Duration,
    waited: Duration,
    /// The call's masked values, cut out of the URL and the reason the
    /// log says (`None`: no mask is configured).
    secrets: Option<Arc<Secrets>>,
}

impl CallHttp {
    /// A call of `plugin` for `tenant` (`""`: the operator's) under
    /// `limits`.
    pub(crate) fn new(
        outbound: Arc<Outbound>,
        plugin: Arc<str>,
        tenant: Arc<str>,
        limits: &Limits,
    ) -> CallHttp {
        CallHttp {
            outbound,
            plugin,
            tenant,
            requests_left: limits.http_requests,
            requests: limits.http_requests,
            request_bytes: limits.http_request_bytes,
            response_bytes: limits.http_response_bytes,
            wait: limits.timeout,
            waited: Duration::ZERO,
            secrets: None,
        }
    }

    /// Masks what the log says about this call's requests with `secrets`.
    pub(crate) fn mask_log_with(&mut self, secrets: Option<Arc<Secrets>>) {
        self.secrets = secrets;
    }

    /// `text` with the call's masked values cut out.
    fn masked<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.secrets {
            Some(secrets) => secrets.scrubbed(text),
            None => std::borrow::Cow::Borrowed(text),
        }
    }

    /// Sends `request` (following granted redirects) and reads the whole
    /// response, within what is left of the call's budget and waiting
    /// time; every request is logged and tallied.
    pub(crate) async fn send(&mut self, request: Request) -> Result<Response, ImportRefused> {
        let started = Instant::now();
        let left = self.wait.saturating_sub(self.waited);
        let (method, url) = (request.method.clone(), request.url.clone());
        let out = match tokio::time::timeout(left, self.exchange(request)).await {
            Ok(out) => out,
            Err(_) => Err(Hop::failed(
                None,
                format!(
                    "no answer within the call's {} ms of waiting (its timeout_ms)",
                    self.wait.as_millis()
                ),
            )),
        };
        self.waited += started.elapsed();
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let (plugin, tenant) = (&*self.plugin, &*self.tenant);
        match out {
            Ok((response, host, sent)) => {
                let status = response.status;
                let bytes = response.body.len();
                self.outbound.tally(Some(&host), None, sent, bytes);
                let url = self.masked(&url);
                tracing::info!(target: LOG_TARGET, plugin, tenant, method, %host, url = ?url, status, sent, bytes, ms, "outbound request");
                Ok(response)
            }
            Err(hop) => {
                self.outbound
                    .tally(hop.host.as_ref(), Some(hop.fault), hop.sent, 0);
                let host = hop.host.as_ref().map_or("-".into(), ToString::to_string);
                let (shown, why) = (self.masked(&url), self.masked(&hop.why));
                tracing::warn!(target: LOG_TARGET, plugin, tenant, method, host, url = ?shown, fault = %hop.fault, ms, "outbound request refused or failed: {why}");
                Err(ImportRefused::new(
                    hop.fault,
                    format!("{method} {url}: {}", hop.why),
                ))
            }
        }
    }

    /// The request, and each redirect, sent and answered.
    async fn exchange(&mut self, request: Request) -> Result<(Response, HostPattern, usize), Hop> {
        let mut method = Method::from_bytes(request.method.as_bytes())
            .ok()
            .filter(|m| self.outbound.grant.allows_method(m.as_str()))
            .ok_or_else(|| {
                Hop::denied(
                    None,
                    format!(
                        "method {:?} is not granted (http_methods = [{}])",
                        request.method,
                        self.outbound.grant.methods.join(", ")
                    ),
                )
            })?;
        let mut url = Url::parse(&request.url)
            .map_err(|e| Hop::denied(None, format!("not an absolute URL: {e}")))?;
        if request.body.len() > self.request_bytes {
            return Err(Hop::budget(
                None,
                format!(
                    "a {}-byte body is over the {}-byte limit (http_request_kib)",
                    request.body.len(),
                    self.request_bytes
                ),
            ));
        }
        let headers = headers(&request.headers)?;
        let mut body = request.body;
        let mut redirects = 0;
        loop {
            let host = self.admit(&url)?;
            self.requests_left = self.requests_left.checked_sub(1).ok_or_else(|| {
                Hop::budget(
                    Some(host.clone()),
                    format!(
                        "more than {} requests in one call (http_requests; each redirect counts)",
                        self.requests
                    ),
                )
            })?;
            let sent = body.len();
            let response = match &self.outbound.transport {
                Transport::Network(client) => Answered::Network(
                    client
                        .request(method.clone(), url.clone())
                        .headers(headers.clone())
                        .body(body.clone())
                        .send()
                        .await
                        .map_err(|e| Hop::from_reqwest(&host, &e))?,
                ),
                Transport::Scripted(answers) => Answered::Scripted(
                    answers
                        .answer(method.as_str(), url.as_str(), &body)
                        .ok_or_else(|| {
                            Hop::failed(
                                Some(host.clone()),
                                "no answer is scripted for it (toolgate test: no \
                                 [[case.http]] of the case matches)"
                                    .into(),
                            )
                        })?,
                ),
            };
            let status = response.status();
            if (300..400).contains(&status)
                && let Some(to) = response.location()
            {
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(Hop::failed(
                        Some(host),
                        format!("more than {MAX_REDIRECTS} redirects"),
                    ));
                }
                let to = to.and_then(|to| url.join(&to).ok()).ok_or_else(|| {
                    Hop::failed(Some(host.clone()), "a redirect to no valid URL".into())
                })?;
                // 301, 302 and 303 turn a request with a body into a GET
                // (as browsers do); 307 and 308 keep method and body.
                if !matches!(status, 307 | 308) && method != Method::HEAD {
                    method = Method::GET;
                    body = Vec::new();
                }
                if !self.outbound.grant.allows_method(method.as_str()) {
                    return Err(Hop::denied(
                        Some(host),
                        format!("a redirect to {to} turns it into {method}, which is not granted"),
                    ));
                }
                url = to;
                continue;
            }
            return Ok((self.read(response, &host).await?, host, sent));
        }
    }

    /// The granted pattern `url` falls under, with its address checked if
    /// it is one; or why it may not be reached.
    fn admit(&self, url: &Url) -> Result<HostPattern, Hop> {
        let grant = &self.outbound.grant;
        let Some(host) = grant.host_for(url) else {
            let granted = grant
                .hosts
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>();
            let why = match granted.is_empty() {
                true => format!("plugin {} is granted no outbound HTTP", self.plugin),
                false => format!(
                    "{} is not a granted host (allowed_hosts = [{}])",
                    origin(url),
                    granted.join(", ")
                ),
            };
            return Err(Hop::denied(None, why));
        };
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        // A scripted answer reaches no address: nothing to check.
        let scripted = matches!(self.outbound.transport, Transport::Scripted(_));
        if let Some(ip) = ip
            && !scripted
            && !grant.address_allowed(ip)
        {
            return Err(Hop::denied(
                Some(host.clone()),
                format!("{ip} is off the public internet and not in the grant"),
            ));
        }
        Ok(host.clone())
    }

    /// The whole response, its body at most the call's response limit.
    async fn read(&self, response: Answered, host: &HostPattern) -> Result<Response, Hop> {
        let limit = self.response_bytes;
        let over = |n: u64| {
            Hop::budget(
                Some(host.clone()),
                format!(
                    "the response body ({n} bytes or more) is over the {limit}-byte limit (http_response_kib)"
                ),
            )
        };
        let mut response = match response {
            Answered::Network(response) => response,
            Answered::Scripted(HttpAnswer {
                status,
                headers,
                body,
            }) => {
                return match body.len() > limit {
                    true => Err(over(body.len() as u64)),
                    false => Ok(Response {
                        status,
                        headers,
                        body,
                    }),
                };
            }
        };
        if let Some(n) = response.content_length()
            && n > limit as u64
        {
            return Err(over(n));
        }
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| Hop::from_reqwest(host, &e))?
        {
            if body.len() + chunk.len() > limit {
                return Err(over((body.len() + chunk.len()) as u64));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// `scheme://host:port` of `url`, for messages.
fn origin(url: &Url) -> String {
    match url.port_or_known_default() {
        Some(port) => format!(
            "{}://{}:{port}",
            url.scheme(),
            url.host_str().unwrap_or_default()
        ),
        None => format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default()),
    }
}

/// The guest's headers, checked: valid, and none the host sets itself.
fn headers(given: &[(String, String)]) -> Result<HeaderMap, Hop> {
    let mut map = HeaderMap::new();
    for (name, value) in given {
        let bad = |why: &str| Hop::denied(None, format!("header {name:?}: {why}"));
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad("not a header name"))?;
        if HOSTS_HEADERS.contains(&name.as_str()) || name.as_str().starts_with("proxy-") {
            return Err(bad("the host sets it"));
        }
        let value = HeaderValue::from_str(value).map_err(|_| bad("not a header value"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// Why a request did not get its answer: its fault, the granted host it
/// fell under (if it got that far), what it had sent, and what happened.
struct Hop {
    fault: Fault,
    host: Option<HostPattern>,
    sent: usize,
    why: String,
}

impl Hop {
    fn denied(host: Option<HostPattern>, why: String) -> Hop {
        Hop {
            fault: Fault::HttpDenied,
            host,
            sent: 0,
            why,
        }
    }

    fn budget(host: Option<HostPattern>, why: String) -> Hop {
        Hop {
            fault: Fault::HttpBudget,
            ..Hop::denied(host, why)
        }
    }

    fn failed(host: Option<HostPattern>, why: String) -> Hop {
        Hop {
            fault: Fault::HttpFailed,
            ..Hop::denied(host, why)
        }
    }

    /// A client error: an address the grant refused is `http-denied`;
    /// anything else (refused connection, reset, TLS, a name that does not
    /// resolve) `http-failed`, with its innermost cause.
    fn from_reqwest(host: &HostPattern, e: &reqwest::Error) -> Hop {
        let mut cause: &dyn std::error::Error = e;
        while let Some(next) = cause.source() {
            if let Some(refused) = next.downcast_ref::<resolve::AddressRefused>() {
                return Hop::denied(Some(host.clone()), refused.to_string());
            }
            cause = next;
        }
        Hop::failed(Some(host.clone()), format!("{e}: {cause}"))
    }
}
