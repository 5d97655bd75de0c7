//! Outbound HTTP, when the operator grants it to the plugin.
//!
//! The host makes the request with its own client and hands back the whole
//! response, any status. A request the plugin is not granted (host, scheme,
//! port, method, a redirect off the grant, an address on the host's own
//! network), more requests or bytes than the call may use, or a network
//! failure **traps the call**: the host classifies it (`http-denied`,
//! `http-budget`, `http-failed`) and the plugin's `on_error` applies, so
//! there is no error to handle here. Time spent waiting counts against the
//! call's deadline.
//!
//! ```rust,ignore
//! use toolgate_guest::http;
//!
//! let answer = http::post_json("https://classifier.internal/v1/pii", &json!({"text": text}));
//! let pii = answer.json::<serde_json::Value>().ok().and_then(|v| v["pii"].as_bool());
//! ```
//!
//! Off WebAssembly (a guard's native unit tests), requests go to the
//! responder set with [`respond_with`] on this thread (none set: a panic
//! naming the request, as a real call would trap).

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, upper case (`GET`, `POST`, ...).
    pub method: String,
    /// The absolute URL, `http://` or `https://`.
    pub url: String,
    /// Headers to send.
    pub headers: Vec<(String, String)>,
    /// The body (empty for none).
    pub body: Vec<u8>,
}

impl Request {
    /// A request with no headers and no body.
    pub fn new(method: &str, url: &str) -> Request {
        Request {
            method: method.to_string(),
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// Sends it (see [`send`]).
    pub fn send(&self) -> Response {
        send(self)
    }
}

/// What the server answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The response headers (names lower case).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.body)
    }
}

/// Sends `request` and waits for the whole response (see the module docs:
/// what is not granted traps the call).
pub fn send(request: &Request) -> Response {
    imp::send(request)
}

/// `GET url`.
pub fn get(url: &str) -> Response {
    send(&Request::new("GET", url))
}

/// `POST url` with `value` as a JSON body (`content-type:
/// application/json`).
pub fn post_json(url: &str, value: &impl serde::Serialize) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    send(
        &Request::new("POST", url)
            .header("content-type", "application/json")
            .body(body),
    )
}

/// Off WebAssembly: answers this thread's requests with `responder` from
/// now on (a guard's native unit tests). On WebAssembly it does nothing.
pub fn respond_with(responder: impl Fn(&Request) -> Response + 'static) {
    imp::respond_with(Box::new(responder))
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::{Request, Response};
    use crate::bindings::base::toolgate::guard::http as wit;

    pub fn send(r: &Request) -> Response {
        let answer = wit::send(&wit::Request {
            method: r.method.clone(),
            url: r.url.clone(),
            headers: r.headers.clone(),
            body: r.body.clone(),
        });
        Response {
            status: answer.status,
            headers: answer.headers,
            body: answer.body,
        }
    }

    pub fn respond_with(_: Box<dyn Fn(&Request) -> Response>) {}
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use super::{Request, Response};
    use std::cell::RefCell;

    type Responder = Box<dyn Fn(&Request) -> Response>;

    thread_local! {
        static RESPONDER: RefCell<Option<Responder>> = const { RefCell::new(None) };
    }

    pub fn send(r: &Request) -> Response {
        RESPONDER.with(|x| match &*x.borrow() {
            Some(respond) => respond(r),
            None => panic!(
                "{} {}: no responder set (toolgate_guest::http::respond_with)",
                r.method, r.url
            ),
        })
    }

    pub fn respond_with(responder: Responder) {
        RESPONDER.with(|x| *x.borrow_mut() = Some(responder));
    }
}
