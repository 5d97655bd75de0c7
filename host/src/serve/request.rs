//! One seam request, `{"event": {...}, "state"?: {...}, "tenant"?: "t"}`,
//! parsed by one reader and answered the same way by every face: the HTTP
//! service ([`crate::serve::server`]), the Python module
//! (`adapters/python/native`) and the CLI (`check` through
//! [`DecideRequest::from_value`], `replay`, `bench` and `snapshot
//! --warm-up` through [`DecideRequest::parse_line`]).
//!
//! Long on purpose (about 590 lines of code, 300 of tests): the one reader
//! every face's text goes through, with the order its faults are reported
//! in; its tests pin every message.
//!
//! Every error names its field (`event.args`,
//! `event.narrowed_tool_names[2]`, `tenant`), or, for text that is not
//! JSON (nested 128 levels deep, say), the line and column; an error is a
//! bad request (HTTP 400, Python `toolgate.RequestError`, CLI exit 2). The
//! event is typed as it is read, so it and each of its fields are read
//! once: a duplicate of either is refused (a duplicate `state` or `tenant`
//! keeps its last value, as does a duplicate key inside `args`, `result`
//! or the state).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::de::SliceRead;
use serde_json::{Map, Value};

use crate::call::chain::{Chain, Decision, GuardTrace, Verdict};
use crate::event::{Event, Seam};
use crate::fault::Fault;
use crate::load::registry::{NotReady, PluginSet};
use crate::runtime::shares::Busy;
use crate::tenant::TenantName;

/// A seam request, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct DecideRequest {
    /// The event, typed for its seam.
    pub event: Event,
    /// The hook's state: a JSON object (`{}` when absent or `null`).
    pub state: Value,
    /// The tenant whose chain runs after the global one (`None`: only the
    /// global chain).
    pub tenant: Option<TenantName>,
}

impl DecideRequest {
    /// Parses `body` (JSON text) as a request for `seam`: HTTP's body, the
    /// Python `Host`'s request. The error is one line naming the field at
    /// fault (see this module's comment, `serve/request.rs`).
    pub fn parse(seam: Seam, body: &[u8]) -> Result<DecideRequest, String> {
        read(body, Shape::Body(seam))
    }

    /// Checks an already parsed request body for `seam`, as [`parse`]
    /// checks its text (which is what it reads: the value written out).
    ///
    /// [`parse`]: DecideRequest::parse
    pub fn from_value(seam: Seam, value: Value) -> Result<DecideRequest, String> {
        DecideRequest::parse(seam, value.to_string().as_bytes())
    }

    /// Parses one line of a trace (`toolgate replay`, `bench`, `snapshot
    /// --warm-up`): a request body with its seam in it, `{"seam": ...,
    /// "event": {...}, "state"?: {...}, "tenant"?: "..."}`, checked as a
    /// body is.
    pub fn parse_line(line: &str) -> Result<DecideRequest, String> {
        read(line.as_bytes(), Shape::Line)
    }

    /// Runs the request through `set`'s chain for its tenant, once
    /// its account has a place for it (see
    /// [`Shares::tenant_requests`](crate::runtime::shares::Shares::tenant_requests)):
    /// a request that waited the share's `wait` in vain is refused as
    /// [`NotDecided::Busy`], one for a tenant whose guards are not serving
    /// (still loading, or not admitted) as [`NotDecided::NotReady`], and one
    /// whose chain met a guard the host could not run in time as
    /// [`NotDecided::Unavailable`] — never decided as if that guard had said
    /// nothing. Then its shadow guards run, if any subscribe to the seam,
    /// and the decision returned holds their run (`shadow`): what the CLI
    /// and a library caller get; the faces that answer agents do not wait
    /// for them ([`DecideRequest::decide_answer_first`]).
    ///
    /// The decision is a `debug` span `decide` (seam, tenant); each guard
    /// call a span inside it (see `crate::serve::logging`). A decision is
    /// written to the set's decision log, if it has one (queued: never
    /// waited on; `docs/decision-log.md`, "The decision log").
    pub async fn decide(&self, set: &PluginSet) -> Result<Decision<Verdict>, NotDecided> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "decide",
            seam = %self.event.seam(),
            tenant = self.tenant.as_deref().unwrap_or("-"),
        );
        self.decide_unspanned(set).instrument(span).await
    }

    /// [`DecideRequest::decide`] without waiting for the shadow guards:
    /// the enforced decision is returned at once, and the shadow guards
    /// run after it in a task of their own on the engine's shadow threads,
    /// if the engine's backlog has room for it (else the run is dropped and
    /// counted, [`Engine::shadow_dropped`](crate::Engine::shadow_dropped)).
    /// Their calls take only spare room — never the request's place, its
    /// account's instances or memory, nor a turn on the long lane — and a
    /// call that finds none stops the run (dropped, counted). `done` gets
    /// the decision with its `shadow` once they have run (or the run
    /// stopped); it is not called when no shadow guard subscribes to the
    /// seam or the backlog had no place for the run. What the HTTP service and the Python `Host` do.
    pub async fn decide_answer_first<F>(
        &self,
        set: &PluginSet,
        done: F,
    ) -> Result<Decision<Verdict>, NotDecided>
    where
        F: FnOnce(Decision<Verdict>) + Send + 'static,
    {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "decide",
            seam = %self.event.seam(),
            tenant = self.tenant.as_deref().unwrap_or("-"),
        );
        let decision = self.enforce(set).instrument(span.clone()).await?;
        let chain = self.chain(set);
        let ran_after = chain.shadows(self.event.seam()) && {
            let (run_chain, request, mut full) =
                (chain.clone().into_owned(), self.clone(), decision.clone());
            let (log, generation) = (set.decision_log.clone(), set.generation);
            let shadow = tracing::debug_span!(parent: &span, "shadow");
            let run = async move {
                full.shadow = run_chain
                    .shadow(&request.event, &request.state, &full.result)
                    .await;
                if let Some(log) = &log {
                    crate::serve::decision_record::record(
                        log, generation, &run_chain, &request, &full,
                    );
                }
                done(full);
            };
            chain.after_answer(self.tenant.as_deref().unwrap_or(""), run.instrument(shadow))
        };
        if !ran_after {
            // No shadow run (none subscribes, or no room for it): the
            // line is the enforced decision's alone.
            self.record(set, &decision);
        }
        Ok(decision)
    }

    async fn decide_unspanned(&self, set: &PluginSet) -> Result<Decision<Verdict>, NotDecided> {
        let mut decision = self.enforce(set).await?;
        decision.shadow = self
            .chain(set)
            .shadow(&self.event, &self.state, &decision.result)
            .await;
        self.record(set, &decision);
        Ok(decision)
    }

    /// The chain this request runs: its tenant's, masking what the
    /// server log says about its guards when `[decision_log] mask` is set
    /// (`docs/decision-log.md`, "The decision log").
    fn chain<'a>(&self, set: &'a PluginSet) -> Cow<'a, Chain> {
        let chain = set.chain(self.tenant.as_deref());
        match crate::serve::decision_record::secrets(&set.policy.decision_log.mask, self) {
            Some(secrets) => Cow::Owned(chain.masking(secrets)),
            None => chain,
        }
    }

    /// Writes `decision` to `set`'s decision log, if it has one (queued:
    /// never waited on).
    fn record(&self, set: &PluginSet, decision: &Decision<Verdict>) {
        if let Some(log) = &set.decision_log {
            let chain = set.chain(self.tenant.as_deref());
            crate::serve::decision_record::record(log, set.generation, &chain, self, decision);
        }
    }

    /// The request's admission and place in its account, and its enforced
    /// decision.
    async fn enforce(&self, set: &PluginSet) -> Result<Decision<Verdict>, NotDecided> {
        let tenant = self.tenant.as_deref();
        set.ready(tenant)?;
        let _place = match set.account(tenant) {
            None => None,
            Some(account) => {
                let key = match tenant {
                    Some(t) if set.accounts.tenants.contains_key(t) => "tenant_requests",
                    _ => "global_requests",
                };
                Some(account.enter(key).await?)
            }
        };
        let decision = self.chain(set).enforce(&self.event, &self.state).await;
        match decision.unavailable() {
            None => Ok(decision),
            Some(entry) => Err(NotDecided::Unavailable {
                plugin: entry.plugin.clone(),
                fault: entry.fault.unwrap_or(Fault::Overloaded),
                detail: entry.detail.clone().unwrap_or_default(),
                trace: decision.trace,
            }),
        }
    }
}

/// Why a request was answered without a decision: the host's doing, never
/// a guard's. The caller should retry later (HTTP: 429 or 503 with
/// `Retry-After`; Python: `toolgate.BusyError`).
#[derive(Clone, Debug, thiserror::Error)]
pub enum NotDecided {
    /// Its account had no place for it in time (HTTP 429).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// Its tenant's guards are not serving yet (or were not admitted)
    /// (HTTP 503).
    #[error(transparent)]
    NotReady(#[from] NotReady),
    /// A guard of its chain could not be run in time — no instance slot,
    /// its account's share taken, or starved of CPU on a busy host — or
    /// its state store was full (HTTP 503). The chain stopped there.
    #[error("guard `{plugin}` could not be run ({fault}): {detail}; not decided, retry later")]
    Unavailable {
        /// The guard's name.
        plugin: String,
        /// `capacity`, `share-exhausted`, `overloaded` or `state-full`.
        fault: Fault,
        /// What happened.
        detail: String,
        /// The guards consulted up to it, it last.
        trace: Vec<GuardTrace>,
    },
}

impl Decision<Verdict> {
    /// The answer's body every face sends: exactly the hook's return
    /// value, or, with `trace`, `{"result": ..., "trace": [...]}` (and
    /// `"shadow"` when the shadow guards ran before the answer).
    pub fn answer(self, trace: bool) -> Value {
        if trace {
            // A decision holds strings, numbers and JSON objects only: it
            // always serialises.
            return serde_json::to_value(self).unwrap_or(Value::Null);
        }
        serde_json::to_value(self.result).unwrap_or(Value::Null)
    }
}

// ---- the one reader -------------------------------------------------------
//
// Every face's text goes through `read`: one serde pass over the text, the
// event deserialized straight into its seam's typed event (never through a
// `Value`, so integers of any size and the key order of its maps are kept
// exactly), the state and the tenant read as `Value`s and checked after the
// pass. What the pass finds wrong with the body's shape (not an object, an
// unknown field, no event, an event that is not an object, a state or
// tenant of the wrong type) is only noted, and reported once the whole text
// has been read, in that order, so a text that is not JSON at all — or
// nested 128 levels deep — is reported as such, with its line and column.
// The pass tracks no path, so an accepted text pays nothing for the names.
// A text it refuses is read again by the same reader (`refused`): first
// without typing the event, so the body's own faults are said first, then
// typed with `serde_path_to_error` tracking, which names the event's field
// at fault (`event.narrowed_tool_names[2]`).

/// What a text holds: a request body for a seam the caller names (HTTP's
/// path, the Python argument), or a trace line naming its own.
#[derive(Clone, Copy)]
enum Shape {
    Body(Seam),
    Line,
}

impl Shape {
    fn noun(self) -> &'static str {
        match self {
            Shape::Body(_) => "request body",
            Shape::Line => "trace line",
        }
    }

    fn keys(self) -> &'static str {
        match self {
            Shape::Body(_) => "event, state, tenant",
            Shape::Line => "seam, event, state, tenant",
        }
    }

    fn form(self) -> &'static str {
        match self {
            Shape::Body(_) => r#"{"event": {...}, "state"?: {...}, "tenant"?: "..."}"#,
            Shape::Line => r#"{"seam": "...", "event": {...}, "state"?: {...}, "tenant"?: "..."}"#,
        }
    }
}

/// What one pass over a text found.
#[derive(Default)]
struct Parts {
    /// `Some(kind)`: the text is JSON, but not an object.
    not_object: Option<&'static str>,
    event: Option<EventRead>,
    state: Option<Value>,
    tenant: Option<Value>,
    /// The first field of no known name, or `event` for the second one.
    unknown: Option<String>,
}

/// The `event` field as read.
enum EventRead {
    Typed(Event),
    /// Not an object: what it is.
    NotObject(&'static str),
    /// Not typed: the seam is not known (a trace line's `seam` is missing
    /// or wrong, which is reported first).
    Untyped,
}

/// `serde_json`'s name for a number it hands over as a map (with
/// `arbitrary_precision`, which keeps every number's digits).
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

fn read(text: &[u8], shape: Shape) -> Result<DecideRequest, String> {
    let seam = match shape {
        Shape::Body(seam) => Ok(seam),
        Shape::Line => line_seam(text),
    };
    let typed = seam.as_ref().ok().copied();
    match pass(text, |de| PartsVisitor { seam: typed, shape }.read(de)) {
        Ok(parts) => request(parts, seam, shape),
        Err(_) => Err(refused(text, seam, shape)),
    }
}

/// Why the pass refused `text`, found by reading it again: first without
/// typing the event, so that what is wrong with the body itself is said
/// first (as [`request`] says it), then typed with the path tracked.
fn refused(text: &[u8], seam: Result<Seam, String>, shape: Shape) -> String {
    let untyped = PartsVisitor { seam: None, shape };
    match pass(text, |de| untyped.read(de)) {
        Err(e) => return refusal(e, None, shape),
        Ok(parts) => {
            if let Err(message) = check_shape(&parts, &seam, shape) {
                return message;
            }
        }
    }
    let mut track = serde_path_to_error::Track::new();
    let typed = PartsVisitor {
        seam: seam.as_ref().ok().copied(),
        shape,
    };
    match pass(text, |de| {
        typed.read(serde_path_to_error::Deserializer::new(de, &mut track))
    }) {
        Err(e) => refusal(e, Some((&track.path(), typed.seam)), shape),
        // Not met: the first pass refused this very text.
        Ok(parts) => request(parts, seam, shape).err().unwrap_or_default(),
    }
}

/// What is wrong with the body itself, in this order: not an object, (a
/// trace line's seam), an unknown or a second `event` field, no event, an
/// event that is not an object.
fn check_shape(parts: &Parts, seam: &Result<Seam, String>, shape: Shape) -> Result<Seam, String> {
    if parts.not_object.is_some() {
        return Err(format!(
            "{} must be a JSON object {}",
            shape.noun(),
            shape.form()
        ));
    }
    let seam = seam.clone()?;
    if let Some(unknown) = &parts.unknown {
        if unknown == "event" {
            return Err(format!("duplicate field `event` in {}", shape.noun()));
        }
        return Err(format!(
            "unknown field `{unknown}` in {} (expected {})",
            shape.noun(),
            shape.keys()
        ));
    }
    match parts.event {
        None => Err(format!("missing field `event` in {}", shape.noun())),
        Some(EventRead::NotObject(kind)) => Err(format!(
            "field `event` must be a JSON object (a {seam} event), not {kind}"
        )),
        Some(EventRead::Typed(_) | EventRead::Untyped) => Ok(seam),
    }
}

/// The request `parts` hold, checked: the body's shape, then the state and
/// the tenant.
fn request(
    parts: Parts,
    seam: Result<Seam, String>,
    shape: Shape,
) -> Result<DecideRequest, String> {
    check_shape(&parts, &seam, shape)?;
    let Some(EventRead::Typed(event)) = parts.event else {
        // Not met: a pass that knows the seam types the event.
        return Err(format!("missing field `event` in {}", shape.noun()));
    };
    let state = match parts.state {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(state @ Value::Object(_)) => state,
        Some(other) => {
            return Err(format!(
                "field `state` must be a JSON object, not {}",
                kind(&other)
            ));
        }
    };
    let tenant = match parts.tenant {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => {
            Some(TenantName::try_from(t).map_err(|e| format!("field `tenant`: {e}"))?)
        }
        Some(other) => {
            return Err(format!(
                "field `tenant` must be a string, not {}",
                kind(&other)
            ));
        }
    };
    Ok(DecideRequest {
        event,
        state,
        tenant,
    })
}

/// One pass of `read_parts` over `text`, to its end.
fn pass<F>(text: &[u8], read_parts: F) -> Result<Parts, serde_json::Error>
where
    F: FnOnce(&mut serde_json::Deserializer<SliceRead<'_>>) -> Result<Parts, serde_json::Error>,
{
    let mut de = serde_json::Deserializer::from_slice(text);
    let parts = read_parts(&mut de)?;
    de.end()?;
    Ok(parts)
}

/// The message for a text the pass refused: not JSON (with the line and
/// column), or an event field that is missing or mistyped (with its path;
/// the position is left out, the path says where).
fn refusal(
    e: serde_json::Error,
    event: Option<(&serde_path_to_error::Path, Option<Seam>)>,
    shape: Shape,
) -> String {
    match (e.classify(), event) {
        (serde_json::error::Category::Data, Some((path, Some(seam)))) => {
            let message = e.to_string();
            let at_position = format!(" at line {} column {}", e.line(), e.column());
            let message = message.strip_suffix(&at_position).unwrap_or(&message);
            format!("invalid {seam} event: `{path}`: {message}")
        }
        _ => format!("{} is not valid JSON: {e}", shape.noun()),
    }
}

/// A trace line's seam, read ahead of the pass that types its event (the
/// `seam` field may come after it). A line that is not a JSON object is
/// left to that pass to report.
fn line_seam(text: &[u8]) -> Result<Seam, String> {
    struct SeamVisitor;
    impl<'de> Visitor<'de> for SeamVisitor {
        type Value = Option<Value>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a trace line object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
            let mut seam = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == "seam" {
                    seam = Some(map.next_value()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(seam)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(text);
    match de.deserialize_map(SeamVisitor) {
        Ok(Some(Value::String(s))) => s.parse(),
        Ok(Some(other)) => Err(format!(
            "field `seam` must be a string, not {}",
            kind(&other)
        )),
        Ok(None) => Err("missing field `seam` in trace line".to_string()),
        // Not JSON, or not an object: the pass reports it first.
        Err(_) => Err("trace line must be a JSON object".to_string()),
    }
}

/// The keys of a request body (and of a trace line).
enum Key {
    Event,
    State,
    Tenant,
    Seam,
    Number,
    Other(String),
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "event" => Key::Event,
                    "state" => Key::State,
                    "tenant" => Key::Tenant,
                    "seam" => Key::Seam,
                    NUMBER_TOKEN => Key::Number,
                    other => Key::Other(other.to_string()),
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

/// Reads a whole text into [`Parts`].
#[derive(Clone, Copy)]
struct PartsVisitor {
    /// The seam to type the event for (`None`: not known).
    seam: Option<Seam>,
    shape: Shape,
}

impl PartsVisitor {
    fn read<'de, D: Deserializer<'de>>(self, d: D) -> Result<Parts, D::Error> {
        d.deserialize_any(self)
    }

    fn not_object<E>(kind: &'static str) -> Result<Parts, E> {
        Ok(Parts {
            not_object: Some(kind),
            ..Parts::default()
        })
    }
}

impl<'de> Visitor<'de> for PartsVisitor {
    type Value = Parts;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} object", self.shape.noun())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts, A::Error> {
        let mut parts = Parts::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Event if parts.event.is_some() => {
                    map.next_value::<Value>()?;
                    parts.unknown.get_or_insert_with(|| "event".to_string());
                }
                Key::Event => parts.event = Some(map.next_value_seed(EventSeed(self.seam))?),
                Key::State => parts.state = Some(map.next_value()?),
                Key::Tenant => parts.tenant = Some(map.next_value()?),
                Key::Seam if matches!(self.shape, Shape::Line) => {
                    // Read ahead by `line_seam`; read here for the depth check.
                    map.next_value::<Value>()?;
                }
                Key::Number => {
                    // A number too big or too precise for a machine type.
                    map.next_value::<IgnoredAny>()?;
                    return PartsVisitor::not_object("a number");
                }
                Key::Seam => {
                    map.next_value::<Value>()?;
                    parts.unknown.get_or_insert_with(|| "seam".to_string());
                }
                Key::Other(name) => {
                    map.next_value::<Value>()?;
                    parts.unknown.get_or_insert(name);
                }
            }
        }
        Ok(parts)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Parts, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        PartsVisitor::not_object("an array")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Parts, E> {
        PartsVisitor::not_object("a boolean")
    }

    fn visit_i64<E>(self, _: i64) -> Result<Parts, E> {
        PartsVisitor::not_object("a number")
    }

    fn visit_u64<E>(self, _: u64) -> Result<Parts, E> {
        PartsVisitor::not_object("a number")
    }

    fn visit_f64<E>(self, _: f64) -> Result<Parts, E> {
        PartsVisitor::not_object("a number")
    }

    fn visit_str<E>(self, _: &str) -> Result<Parts, E> {
        PartsVisitor::not_object("a string")
    }

    fn visit_unit<E>(self) -> Result<Parts, E> {
        PartsVisitor::not_object("null")
    }
}

/// Reads the `event` field: a seam's typed event, straight from the text.
struct EventSeed(Option<Seam>);

impl<'de> DeserializeSeed<'de> for EventSeed {
    type Value = EventRead;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<EventRead, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventSeed {
    type Value = EventRead;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EventRead, A::Error> {
        // The first key decides: a number handed over as a map is no event.
        let first = map.next_key::<String>()?;
        if first.as_deref() == Some(NUMBER_TOKEN) {
            map.next_value::<IgnoredAny>()?;
            return Ok(EventRead::NotObject("a number"));
        }
        let Some(seam) = self.0 else {
            if first.is_some() {
                map.next_value::<Value>()?;
                while map.next_entry::<String, Value>()?.is_some() {}
            }
            return Ok(EventRead::Untyped);
        };
        let d = de::value::MapAccessDeserializer::new(FirstKeyAgain { first, map });
        Ok(EventRead::Typed(match seam {
            Seam::Routing => Event::Routing(Deserialize::deserialize(d)?),
            Seam::Rewrite => Event::Rewrite(Deserialize::deserialize(d)?),
            Seam::Steering => Event::Steering(Deserialize::deserialize(d)?),
            Seam::Result => Event::Result(Deserialize::deserialize(d)?),
            Seam::Response => Event::Response(Deserialize::deserialize(d)?),
        }))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<EventRead, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        Ok(EventRead::NotObject("an array"))
    }

    fn visit_bool<E>(self, _: bool) -> Result<EventRead, E> {
        Ok(EventRead::NotObject("a boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<EventRead, E> {
        Ok(EventRead::NotObject("a number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<EventRead, E> {
        Ok(EventRead::NotObject("a number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<EventRead, E> {
        Ok(EventRead::NotObject("a number"))
    }

    fn visit_str<E>(self, _: &str) -> Result<EventRead, E> {
        Ok(EventRead::NotObject("a string"))
    }

    fn visit_unit<E>(self) -> Result<EventRead, E> {
        Ok(EventRead::NotObject("null"))
    }
}

/// An event's map with its first key, already read, handed over again.
struct FirstKeyAgain<A> {
    first: Option<String>,
    map: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FirstKeyAgain<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.first.take() {
            Some(key) => seed
                .deserialize(de::value::StringDeserializer::new(key))
                .map(Some),
            None => self.map.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn steering(event: Value) -> Result<DecideRequest, String> {
        DecideRequest::from_value(Seam::Steering, json!({ "event": event }))
    }

    #[test]
    fn event_errors_name_the_field() {
        let err = steering(json!({"run_id": "r", "tool_name": "t", "call_id": "c"}))
            .expect_err("missing args");
        assert_eq!(err, "invalid steering event: `event`: missing field `args`");
        let err = steering(json!({"run_id": "r", "tool_name": "t", "call_id": "c", "args": "x"}))
            .expect_err("args not an object");
        assert!(
            err.starts_with("invalid steering event: `event.args`: invalid type"),
            "{err}"
        );
        let err = DecideRequest::from_value(
            Seam::Routing,
            json!({"event": {"run_id": "r", "mode": "m", "intent_label": "i", "total_tools": 1, "narrowed_tool_names": ["a", 3]}}),
        )
        .expect_err("name not a string");
        assert!(err.contains("`event.narrowed_tool_names[1]`"), "{err}");
        assert!(!err.contains("column"), "the path says where: {err}");
        for (event, kind) in [
            (json!(null), "null"),
            (json!([1]), "an array"),
            (json!("x"), "a string"),
            (json!(true), "a boolean"),
            (json!(7), "a number"),
            (json!(1.5), "a number"),
        ] {
            assert_eq!(
                steering(event).expect_err(kind),
                format!("field `event` must be a JSON object (a steering event), not {kind}")
            );
        }
        let err = DecideRequest::parse(
            Seam::Steering,
            br#"{"event": 100000000000000000000000000000000}"#,
        )
        .expect_err("a big number");
        assert!(err.ends_with("not a number"), "{err}");
    }

    #[test]
    fn request_fields_are_checked() {
        let event = r#"{"run_id":"r","tool_name":"t","call_id":"c","args":{}}"#;
        let ok = DecideRequest::parse(
            Seam::Steering,
            format!(r#"{{"event":{event},"tenant":"acme"}}"#).as_bytes(),
        )
        .expect("valid");
        assert_eq!(ok.tenant.as_deref(), Some("acme"));
        assert_eq!(ok.state, json!({}));
        let object = r#"request body must be a JSON object {"event": {...}, "state"?: {...}, "tenant"?: "..."}"#;
        for (body, says) in [
            (
                format!(r#"{{"event":{event},"tenant":"../x"}}"#),
                "field `tenant`: ",
            ),
            (
                format!(r#"{{"event":{event},"tenant":7}}"#),
                "field `tenant` must be a string, not a number",
            ),
            (
                format!(r#"{{"event":{event},"state":[]}}"#),
                "field `state` must be a JSON object, not an array",
            ),
            (
                format!(r#"{{"event":{event},"x":1}}"#),
                "unknown field `x` in request body (expected event, state, tenant)",
            ),
            (
                format!(r#"{{"seam":"steering","event":{event}}}"#),
                "unknown field `seam` in request body",
            ),
            (
                r#"{"state":{}}"#.to_string(),
                "missing field `event` in request body",
            ),
            ("[]".to_string(), object),
            ("7".to_string(), object),
            ("1e400".to_string(), object),
            (
                "{".to_string(),
                "request body is not valid JSON: EOF while parsing an object at line 1 column 1",
            ),
            (
                format!(r#"{{"event":{event}}} x"#),
                "request body is not valid JSON: trailing characters",
            ),
            // Not JSON goes first, then the body's shape, then the event.
            (
                r#"{"x": 1, "event": "#.to_string(),
                "request body is not valid JSON",
            ),
            (r#"{"x": 1, "event": 5}"#.to_string(), "unknown field `x`"),
            (r#"{"event": {}, "x": 1}"#.to_string(), "unknown field `x`"),
            (
                r#"{"event": {}, "event": 1}"#.to_string(),
                "duplicate field `event`",
            ),
            (
                r#"{"event": {}, "state": 1}"#.to_string(),
                "invalid steering event: `event`: missing field `run_id`",
            ),
            (
                r#"{"state": [], "event": 5}"#.to_string(),
                "field `event` must be",
            ),
        ] {
            let err = DecideRequest::parse(Seam::Steering, body.as_bytes()).expect_err(&body);
            assert!(err.starts_with(says), "{body}: {err}");
        }
    }

    /// Ordinary and unusual well-formed bodies, each read as what it says.
    #[test]
    fn bodies_are_read_exactly() {
        let steering = r#"{"run_id":"r","tool_name":"t","call_id":"c","args":{"z":1000000000000000000000000000000000000000,"a":-18446744073709551616,"f":1.50,"e":1e+16,"s":"\u00e9\"\n"}}"#;
        let args = r#"{"z":1000000000000000000000000000000000000000,"a":-18446744073709551616,"f":1.50,"e":1e+16,"s":"é\"\n"}"#;
        let read = |seam, body: &str| {
            DecideRequest::parse(seam, body.as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"))
        };
        let args_of = |r: &DecideRequest| match &r.event {
            Event::Steering(e) => Value::Object(e.args.clone()).to_string(),
            other => panic!("{other:?}"),
        };
        let r = read(Seam::Steering, &format!(r#"{{"event":{steering}}}"#));
        assert_eq!(args_of(&r), args);
        assert_eq!((r.state, r.tenant), (json!({}), None));
        let r = read(
            Seam::Steering,
            &format!(
                r#" {{ "tenant" : "acme", "event" : {steering}, "state" : {{"b":[1,{{"y":2,"x":3}}],"a":null}} }} "#
            ),
        );
        assert_eq!(args_of(&r), args);
        assert_eq!(r.state.to_string(), r#"{"b":[1,{"y":2,"x":3}],"a":null}"#);
        assert_eq!(r.tenant.as_deref(), Some("acme"));
        let r = read(
            Seam::Steering,
            &format!(r#"{{"event":{steering},"state":null,"tenant":null}}"#),
        );
        assert_eq!((r.state, r.tenant), (json!({}), None));
        // An escaped key; a duplicate `state` keeps the last value.
        let r = read(
            Seam::Steering,
            &format!(r#"{{"\u0065vent":{steering},"state":{{"s":1}},"state":{{"t":2}}}}"#),
        );
        assert_eq!(r.state, json!({"t": 2}));
        // Unknown fields of the event are ignored; a duplicate key of its
        // args keeps the last value, in the first one's place.
        let r = read(
            Seam::Rewrite,
            r#"{"event":{"run_id":"r","iteration_index":0,"node_name":"react","call_id":"c","tool_name":"t","args":{"b":1,"a":2,"b":3},"available_tools":["t"],"extra":[1]}}"#,
        );
        let Event::Rewrite(e) = &r.event else {
            panic!("{r:?}")
        };
        assert_eq!(
            Value::Object(e.args.clone()).to_string(),
            r#"{"b":3,"a":2}"#
        );
        let r = read(
            Seam::Result,
            r#"{"event":{"run_id":"r","tool_name":"t","result":{"z":1000000000000000000000000000000000000000},"call_id":"c"}}"#,
        );
        let Event::Result(e) = &r.event else {
            panic!("{r:?}")
        };
        assert_eq!(
            e.result.to_string(),
            r#"{"z":1000000000000000000000000000000000000000}"#
        );
        // The same through a `Value`.
        let value: Value =
            serde_json::from_str(&format!(r#"{{"event":{steering}}}"#)).expect("json");
        let r = DecideRequest::from_value(Seam::Steering, value).expect("valid");
        assert_eq!(args_of(&r), args);
    }

    #[test]
    fn a_duplicate_event_or_event_field_is_refused() {
        let err = DecideRequest::parse(
            Seam::Steering,
            br#"{"event":{"run_id":"r","tool_name":"t","tool_name":"u","call_id":"c","args":{}}}"#,
        )
        .expect_err("a duplicate");
        assert_eq!(
            err,
            "invalid steering event: `event`: duplicate field `tool_name`"
        );
        let event = r#"{"run_id":"r","tool_name":"t","call_id":"c","args":{}}"#;
        for body in [
            format!(r#"{{"event":{event},"event":{event}}}"#),
            format!(r#"{{"event":{event},"event":7}}"#),
        ] {
            assert_eq!(
                DecideRequest::parse(Seam::Steering, body.as_bytes()),
                Err("duplicate field `event` in request body".to_string())
            );
        }
    }

    #[test]
    fn trace_lines_name_their_seam() {
        let event = r#"{"run_id":"r","tool_name":"t","call_id":"c","args":{}}"#;
        for line in [
            format!(r#"{{"seam":"steering","event":{event}}}"#),
            format!(r#"{{"event":{event},"state":null,"seam":"steering"}}"#),
        ] {
            let r = DecideRequest::parse_line(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(r.event.seam(), Seam::Steering);
        }
        for (line, says) in [
            (
                format!(r#"{{"event":{event}}}"#),
                "missing field `seam` in trace line",
            ),
            (
                format!(r#"{{"seam":3,"event":{event}}}"#),
                "field `seam` must be a string, not a number",
            ),
            (
                format!(r#"{{"seam":"nope","event":{event}}}"#),
                "unknown seam `nope`",
            ),
            (
                format!(r#"{{"seam":"steering","event":{event},"x":1}}"#),
                "unknown field `x` in trace line (expected seam, event, state, tenant)",
            ),
            (
                r#"{"seam":"routing","event":{"run_id":"r"}}"#.to_string(),
                "invalid routing event: `event`: missing field",
            ),
            (
                r#"{"seam":"nope","event":"#.to_string(),
                "trace line is not valid JSON",
            ),
            ("[1]".to_string(), "trace line must be a JSON object"),
        ] {
            let err = DecideRequest::parse_line(&line).expect_err(&line);
            assert!(err.starts_with(says), "{line}: {err}");
        }
    }
}
