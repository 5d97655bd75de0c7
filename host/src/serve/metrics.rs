//! Prometheus metrics of a serving host, recorded from each decision's
//! trace (data flows one way: the chain never touches a metric).
//!
//! Series (all prefixed `toolgate_`):
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `guard_calls_total` | counter | plugin, seam | guard calls made |
//! | `guard_outcomes_total` | counter | plugin, seam, outcome, cause | what each call did; `cause` is the fault (`out-of-fuel`, `deadline`, ...) or `none` |
//! | `guard_fuel` | histogram | plugin, seam | fuel burnt per call, start-up included |
//! | `guard_latency_seconds` | histogram | plugin, seam | wall-clock time per call, fresh instance included |
//! | `shadow_verdicts_total` | counter | plugin, outcome | what each shadow guard's call (`mode = "shadow"`) would have done: `proceed`, `skip`, `rewrite`, `narrow`, `observed`, `malformed`, `fault`, `unavailable` — recorded, never applied; its calls are counted here only, never in `guard_*` |
//! | `shadow_decisions_total` | counter | seam, agrees | shadow chains run, and whether each one's would-be answer was the enforced one (`true`, `false`; `undecided`: it met a guard the host could not run in time) |
//! | `shadow_dropped_total` | counter | | shadow runs dropped, since start: never started because the backlog of runs after the answer was full (the host's, or the account's quarter of it), or stopped at a call that found no spare room (a pool slot and memory no share reserves) |
//! | `observations_total` | counter | | lifecycle observations delivered, since start (each to every guard that observes its hook) |
//! | `observations_dropped_total` | counter | | lifecycle observations dropped: their run's queue (1,024) or all runs' (65,536) full |
//! | `observe_faults_total` | counter | | observer calls that faulted (logged and skipped) |
//! | `observe_waits_expired_total` | counter | | decisions that waited their bound for their run's observations and went on without the rest |
//! | `decisions_total` | counter | seam, verdict | chain answers: `proceed`, `skip`, `rewrite`, `narrow`, `observed`, and `timeout` for a call cut by the request timeout |
//! | `http_requests_total` | counter | endpoint, status | requests answered, by route and status code |
//! | `http_request_duration_seconds` | histogram | endpoint | time to answer, by route |
//! | `http_request_timeouts_total` | counter | endpoint | requests cut by the request timeout (answered 503); a cut seam call also counts in `decisions_total` with verdict `timeout` |
//! | `http_reloads_accepted_total` | counter | | `POST /v1/reload` requests answered 202 Accepted: their reload was not done within the reload wait and went on in the background |
//! | `http_connections_open` | gauge | | connections open now |
//! | `http_connections_refused_total` | counter | | connections closed at once because `max_connections` were open |
//! | `http_connections_timed_out_total` | counter | reason | connections closed by the `header` (read) or `idle` timeout |
//! | `plugins_loaded` | gauge | chain | global plugins (those restricted to some tenants too) and each tenant's own |
//! | `plugin_load_errors` | gauge | | files the last reload could not load |
//! | `plugin_fetch_failures_total` | counter | plugin | fetches of the plugin's remote source (`url`, `oci`) that failed — not fetched after their tries, or refused for their digest — since start (its last good version, if any, kept serving) |
//! | `plugins_generation` | gauge | | the plugin set generation serving |
//! | `set_info` | gauge | source, digest | 1 for the policy set version serving (`serve --set`) |
//! | `set_generation` | gauge | | policy set versions swapped in since start (0: no set followed) |
//! | `set_refused_total` | counter | | policy set versions refused (not verified, not a set, not loaded whole), each version and reason once; the version serving kept |
//! | `set_poll_failures_total` | counter | | polls that could not resolve the set's tag (the registry unreachable, the tag missing) |
//! | `decision_log_dropped_total` | counter | | decision log lines dropped since start: the queue was full (the sink slow or down) or the HTTP sink gave a batch up after its retries; decisions never wait on the log |
//! | `tenants_pending` | gauge | | tenants whose directory has not loaded yet (their calls answered 503) |
//! | `tenants_refused` | gauge | | tenants not admitted: their share did not fit, or their directory has not loaded whole (their calls answered 503) |
//! | `reloads_unsettled` | gauge | | directory reloads made because a directory kept changing without settling (see `watch::MAX_DELAY`) |
//! | `plugin_quarantined` | gauge | plugin | 1 while the plugin is quarantined (or being probed) for any account, else 0 |
//! | `plugin_quarantines` | gauge | plugin | times the plugin was quarantined since it was loaded |
//! | `share_instances` | gauge | account | instances the account (`global` or a tenant) has alive now |
//! | `share_instances_max` | gauge | account | the most it may have |
//! | `share_memory_mib` | gauge | account | memory its instances have committed now, MiB |
//! | `share_memory_mib_max` | gauge | account | the most they may commit |
//! | `share_refused` | gauge | account | calls refused (`share-exhausted`) since the account was made |
//! | `share_requests` | gauge | account | requests the account has in progress now |
//! | `share_requests_max` | gauge | account | the most it may have in progress |
//! | `share_busy` | gauge | account | requests refused (HTTP 429) since the account was made because no place came free in time |
//! | `share_rate` | gauge | account | requests the account may start a second (0: any) |
//! | `share_over_rate` | gauge | account | requests refused (HTTP 429) since the account was made because their turn at its rate was too far away |
//! | `share_log_kib_per_s` | gauge | account | guest log the account's calls may write a second, KiB (0: any) |
//! | `share_log_dropped_bytes` | gauge | account | guest log lines dropped over that budget since the account was made, bytes |
//! | `outbound_requests` | gauge | plugin, host, outcome | outbound HTTP requests the plugin's guards made since it was loaded, by granted host (`-`: refused before one matched) and outcome (`ok`, `http-denied`, `http-budget`, `http-failed`) |
//! | `outbound_bytes` | gauge | plugin, host, direction | body bytes they `sent` and `received` |
//! | `state_keys` | gauge | account | guard state keys the account's calls (`global`: calls without a tenant) hold in the memory store |
//! | `state_bytes` | gauge | account | guard state bytes (keys and values) they hold |
//! | `long_lane_running` | gauge | | long guard calls (past their first tick) holding a turn now |
//! | `long_lane_waiting` | gauge | | long guard calls waiting for a turn now |
//! | `long_lane_width` | gauge | | the most long guard calls that may run at once |
//! | `long_lane_overdue` | gauge | | long guard calls given up 10 ms past their deadline for want of CPU (answered `deadline`), since start |
//!
//! A quarantined guard's calls are counted in `guard_outcomes_total` with
//! `outcome="fault"` and `cause="quarantined"`; calls refused for want of
//! share with `cause="share-exhausted"`.
//!
//! Label values are escaped as the text format says (`\` as `\\`, `"` as
//! `\"`, a newline as `\n`), which `prometheus-client` does not
//! do itself: whatever a name holds, it cannot end a label or a line, so it
//! can neither forge a series nor break the page. (Names are checked where
//! they enter too — see [`crate::tenant::is_valid_name`] — so today none
//! holds such characters; the escaping does not rely on that.)

use std::time::Duration;

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::call::chain::{Decision, GuardTrace, Verdict};
use crate::event::Seam;
use crate::load::registry::PluginSet;
use crate::runtime::shares::Usage;
use crate::runtime::turns::LaneUsage;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A label value from a name (a plugin's, an account's, a route's),
/// written escaped per the Prometheus / OpenMetrics text format.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Label(String);

impl From<&str> for Label {
    fn from(value: &str) -> Self {
        Label(value.to_string())
    }
}

impl From<String> for Label {
    fn from(value: String) -> Self {
        Label(value)
    }
}

impl EncodeLabelValue for Label {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GuardLabels {
    plugin: Label,
    seam: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    plugin: Label,
    seam: &'static str,
    outcome: &'static str,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutboundLabels {
    plugin: Label,
    host: Label,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutboundBytesLabels {
    plugin: Label,
    host: Label,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    plugin: Label,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgreementLabels {
    seam: &'static str,
    agrees: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    seam: &'static str,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: Label,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChainLabels {
    chain: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountLabels {
    account: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SetLabels {
    source: Label,
    digest: Label,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 5 µs .. ~5 s, ×2.5 per bucket.
    Histogram::new(exponential_buckets(5e-6, 2.5, 16))
}

fn fuel_histogram() -> Histogram {
    // 10k .. ~2.6G instructions, ×4 per bucket.
    Histogram::new(exponential_buckets(1e4, 4.0, 10))
}

/// Declares the fixed series: each field of [`Metrics`], what makes it, and
/// the name and help it is registered under (in this order, which is the
/// order of [`Metrics::encode`]'s output).
macro_rules! series {
    ($( $field:ident: $ty:ty = $make:expr, $name:literal, $help:literal; )*) => {
        /// The metrics of one serving host. Cheap to share (`Arc`); every method
        /// takes `&self`.
        pub struct Metrics {
            registry: Registry,
            $( $field: $ty, )*
            /// One family per [`SHARE_GAUGES`] entry.
            shares: Vec<Family<AccountLabels, Gauge>>,
            /// One gauge per [`LANE_GAUGES`] entry.
            lane: Vec<Gauge>,
        }

        impl Metrics {
            /// A fresh set of series, registered under the `toolgate` prefix.
            pub fn new() -> Metrics {
                let mut registry = Registry::with_prefix("toolgate");
                $(
                    let $field: $ty = $make;
                    registry.register($name, $help, $field.clone());
                )*
                let shares: Vec<Family<AccountLabels, Gauge>> =
                    SHARE_GAUGES.iter().map(|_| Family::default()).collect();
                for (r, family) in SHARE_GAUGES.iter().zip(&shares) {
                    registry.register(r.name, r.help, family.clone());
                }
                let lane: Vec<Gauge> = LANE_GAUGES.iter().map(|_| Gauge::default()).collect();
                for (r, gauge) in LANE_GAUGES.iter().zip(&lane) {
                    registry.register(r.name, r.help, gauge.clone());
                }
                Metrics { registry, $( $field, )* shares, lane }
            }
        }
    };
}

series! {
    guard_calls: Family<GuardLabels, Counter> = Family::default(),
        "guard_calls", "Guard calls made, per plugin and seam";
    guard_outcomes: Family<OutcomeLabels, Counter> = Family::default(),
        "guard_outcomes",
        "What each guard call did (proceed, skip, rewrite, narrow, observed, malformed, fault); cause is the fault or none";
    guard_fuel: HistogramFamily<GuardLabels> = Family::new_with_constructor(fuel_histogram),
        "guard_fuel", "Fuel burnt per guard call, start-up included";
    guard_latency: HistogramFamily<GuardLabels> = Family::new_with_constructor(latency_histogram),
        "guard_latency_seconds", "Wall-clock time per guard call, fresh instance included";
    decisions: Family<DecisionLabels, Counter> = Family::default(),
        "decisions", "Chain answers per seam and verdict";
    shadow_verdicts: Family<ShadowLabels, Counter> = Family::default(),
        "shadow_verdicts",
        "What each shadow guard's call would have done (recorded, never applied), per plugin and outcome";
    shadow_decisions: Family<AgreementLabels, Counter> = Family::default(),
        "shadow_decisions",
        "Shadow chains run, per seam and whether their would-be answer was the enforced one (true, false, undecided)";
    shadow_dropped: Counter = Counter::default(),
        "shadow_dropped",
        "Shadow runs dropped for want of room: the backlog of runs after the answer full, or no spare pool slot or memory for a call";
    observations: Counter = Counter::default(),
        "observations",
        "Lifecycle observations delivered, each to every guard that observes its hook";
    observations_dropped: Counter = Counter::default(),
        "observations_dropped",
        "Lifecycle observations dropped: their run's queue (1,024) or all runs' (65,536) full";
    observe_faults: Counter = Counter::default(),
        "observe_faults",
        "Observer calls that faulted (logged and skipped)";
    observe_waits_expired: Counter = Counter::default(),
        "observe_waits_expired",
        "Decisions that waited their bound for their run's observations and went on without the rest";
    requests: Family<RequestLabels, Counter> = Family::default(),
        "http_requests", "HTTP requests answered, per endpoint and status code";
    request_duration: HistogramFamily<EndpointLabels> = Family::new_with_constructor(latency_histogram),
        "http_request_duration_seconds", "Time to answer an HTTP request, per endpoint";
    request_timeouts: Family<EndpointLabels, Counter> = Family::default(),
        "http_request_timeouts",
        "HTTP requests cut by the request timeout (answered 503), per endpoint";
    reloads_accepted: Counter = Counter::default(),
        "http_reloads_accepted",
        "POST /v1/reload requests answered 202 Accepted (the reload went on in the background)";
    connections_open: Gauge = Gauge::default(),
        "http_connections_open", "HTTP connections open now";
    connections_refused: Counter = Counter::default(),
        "http_connections_refused",
        "HTTP connections closed at once because the connection cap was reached";
    connections_timed_out: Family<ReasonLabels, Counter> = Family::default(),
        "http_connections_timed_out", "HTTP connections closed by the header-read or idle timeout";
    plugins_loaded: Family<ChainLabels, Gauge> = Family::default(),
        "plugins_loaded", "Plugins loaded, in the global chain and in each tenant's own";
    load_errors: Gauge = Gauge::default(),
        "plugin_load_errors",
        "Files the last reload could not load (their previous version, if any, keeps serving)";
    fetch_failures: Family<PluginLabels, Counter> = Family::default(),
        "plugin_fetch_failures",
        "Fetches of the plugin's remote source (url, oci) that failed: not fetched, or refused for their digest";
    decision_log_dropped: Counter = Counter::default(),
        "decision_log_dropped",
        "Decision log lines dropped: the queue was full (the sink slow or down) or the HTTP sink gave a batch up; decisions never wait";
    tenants_pending: Gauge = Gauge::default(),
        "tenants_pending",
        "Tenants whose directory has not loaded yet (their calls are answered 503)";
    tenants_refused: Gauge = Gauge::default(),
        "tenants_refused",
        "Tenants not admitted: their share did not fit, or their directory has not loaded whole (their calls are answered 503)";
    reloads_unsettled: Gauge = Gauge::default(),
        "reloads_unsettled",
        "Directory reloads made because the directory kept changing without settling";
    generation: Gauge = Gauge::default(),
        "plugins_generation", "The plugin set generation serving";
    set_info: Family<SetLabels, Gauge> = Family::default(),
        "set_info", "1 for the policy set version serving (serve --set): its source and digest";
    set_generation: Gauge = Gauge::default(),
        "set_generation", "Policy set versions swapped in since start (0: no set followed)";
    set_refused: Counter = Counter::default(),
        "set_refused",
        "Policy set versions refused (not verified, not a set, not loaded whole), each version and reason once";
    set_poll_failures: Counter = Counter::default(),
        "set_poll_failures", "Polls that could not resolve the policy set's tag (registry unreachable, tag missing)";
    quarantined: Family<PluginLabels, Gauge> = Family::default(),
        "plugin_quarantined", "1 while the plugin is quarantined or being probed, else 0";
    quarantines: Family<PluginLabels, Gauge> = Family::default(),
        "plugin_quarantines", "Times the plugin was quarantined since it was loaded";
    outbound_requests: Family<OutboundLabels, Gauge> = Family::default(),
        "outbound_requests", "Outbound HTTP requests the plugin's guards made since it was loaded, by granted host and outcome";
    outbound_bytes: Family<OutboundBytesLabels, Gauge> = Family::default(),
        "outbound_bytes", "Body bytes the plugin's outbound HTTP requests sent and received since it was loaded";
    state_keys: Family<AccountLabels, Gauge> = Family::default(),
        "state_keys", "Guard state keys a tenant's calls hold in the memory store";
    state_bytes: Family<AccountLabels, Gauge> = Family::default(),
        "state_bytes", "Guard state bytes (keys and values) a tenant's calls hold in the memory store";
}

/// A gauge whose value is read from a usage report `U`.
struct Reading<U> {
    name: &'static str,
    help: &'static str,
    read: fn(&U) -> i64,
}

/// The per-account gauges.
const SHARE_GAUGES: [Reading<Usage>; 12] = [
    Reading {
        name: "share_instances",
        help: "Guard instances the account has alive now",
        read: |u| i64::from(u.instances),
    },
    Reading {
        name: "share_instances_max",
        help: "The most guard instances the account may have alive",
        read: |u| i64::from(u.instances_max),
    },
    Reading {
        name: "share_memory_mib",
        help: "Memory the account's instances have committed now, MiB",
        read: |u| i64::from(u.memory_mib),
    },
    Reading {
        name: "share_memory_mib_max",
        help: "The most memory the account's instances may commit, MiB",
        read: |u| i64::from(u.memory_mib_max),
    },
    Reading {
        name: "share_refused",
        help: "Calls refused (share-exhausted) since the account was made",
        read: |u| i64::try_from(u.refused).unwrap_or(i64::MAX),
    },
    Reading {
        name: "share_requests",
        help: "Requests the account has in progress now",
        read: |u| i64::from(u.requests),
    },
    Reading {
        name: "share_requests_max",
        help: "The most requests the account may have in progress",
        read: |u| i64::from(u.requests_max),
    },
    Reading {
        name: "share_busy",
        help: "Requests refused (HTTP 429) for no place coming free in time",
        read: |u| i64::try_from(u.busy).unwrap_or(i64::MAX),
    },
    Reading {
        name: "share_rate",
        help: "Requests the account may start a second (0: any)",
        read: |u| i64::from(u.rate_per_s),
    },
    Reading {
        name: "share_over_rate",
        help: "Requests refused (HTTP 429) for their turn at the account's rate being too far away",
        read: |u| i64::try_from(u.over_rate).unwrap_or(i64::MAX),
    },
    Reading {
        name: "share_log_kib_per_s",
        help: "Guest log the account's calls may write a second, KiB (0: any)",
        read: |u| i64::from(u.log_kib_per_s),
    },
    Reading {
        name: "share_log_dropped_bytes",
        help: "Guest log dropped over the account's log budget since the account was made, bytes",
        read: |u| i64::try_from(u.log_dropped_bytes).unwrap_or(i64::MAX),
    },
];

/// The long-call lane's gauges.
const LANE_GAUGES: [Reading<LaneUsage>; 4] = [
    Reading {
        name: "long_lane_running",
        help: "Long guard calls (past their first tick) holding a turn now",
        read: |u| i64::from(u.running),
    },
    Reading {
        name: "long_lane_waiting",
        help: "Long guard calls waiting for a turn now",
        read: |u| i64::from(u.waiting),
    },
    Reading {
        name: "long_lane_width",
        help: "The most long guard calls that may run at once",
        read: |u| i64::from(u.width),
    },
    Reading {
        name: "long_lane_overdue",
        help: "Long guard calls given up past their deadline for want of CPU, since start",
        read: |u| i64::try_from(u.overdue).unwrap_or(i64::MAX),
    },
];

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Records one decision: each guard's call, outcome, fuel and latency,
    /// and the chain's verdict.
    pub fn record_decision(&self, decision: &Decision<Verdict>) {
        let seam = decision.result.seam();
        for entry in &decision.trace {
            self.record_guard(seam, entry);
        }
        self.decisions
            .get_or_create(&DecisionLabels {
                seam: seam.as_str(),
                verdict: decision.result.as_str(),
            })
            .inc();
    }

    /// Records a decision's shadow run, if it has one: each shadow guard's
    /// outcome, and whether the shadow chain agreed.
    pub fn record_shadow(&self, decision: &Decision<Verdict>) {
        let Some(shadow) = &decision.shadow else {
            return;
        };
        for entry in &shadow.trace {
            self.shadow_verdicts
                .get_or_create(&ShadowLabels {
                    plugin: entry.plugin.as_str().into(),
                    outcome: entry.outcome.as_str(),
                })
                .inc();
        }
        let agrees = match shadow.agrees {
            Some(true) => "true",
            Some(false) => "false",
            None => "undecided",
        };
        self.shadow_decisions
            .get_or_create(&AgreementLabels {
                seam: decision.result.seam().as_str(),
                agrees,
            })
            .inc();
    }

    /// Records the guard calls of a request at `seam` that was not decided
    /// (its chain met a guard the host could not run in time): each guard's
    /// outcome, the last one `unavailable`; no decision.
    pub fn record_undecided(&self, seam: Seam, trace: &[GuardTrace]) {
        for entry in trace {
            self.record_guard(seam, entry);
        }
    }

    fn record_guard(&self, seam: Seam, entry: &GuardTrace) {
        let guard = GuardLabels {
            plugin: entry.plugin.as_str().into(),
            seam: seam.as_str(),
        };
        self.guard_calls.get_or_create(&guard).inc();
        self.guard_outcomes
            .get_or_create(&OutcomeLabels {
                plugin: entry.plugin.as_str().into(),
                seam: seam.as_str(),
                outcome: entry.outcome.as_str(),
                cause: entry.fault.map_or("none", |f| f.as_str()),
            })
            .inc();
        // Fuel counts up to a few billion: exact enough as f64.
        #[allow(
            clippy::cast_precision_loss,
            reason = "fuel is at most a few billion, well inside f64's exact range"
        )]
        self.guard_fuel
            .get_or_create(&guard)
            .observe(entry.fuel_used as f64);
        self.guard_latency
            .get_or_create(&guard)
            .observe(Duration::from_micros(entry.micros).as_secs_f64());
    }

    /// Records one answered HTTP request.
    pub fn record_request(&self, endpoint: &str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.into(),
                status,
            })
            .inc();
        self.request_duration
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Records a request cut by the request timeout; when it was a call at
    /// `seam`, the chain's answer is counted as verdict `timeout`.
    pub fn record_request_timeout(&self, endpoint: &str, seam: Option<Seam>) {
        self.request_timeouts
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.into(),
            })
            .inc();
        if let Some(seam) = seam {
            self.decisions
                .get_or_create(&DecisionLabels {
                    seam: seam.as_str(),
                    verdict: "timeout",
                })
                .inc();
        }
    }

    /// Records a `POST /v1/reload` answered 202 Accepted: its reload was
    /// not done within the reload wait and goes on in the background.
    pub fn record_reload_accepted(&self) {
        self.reloads_accepted.inc();
    }

    /// Records a connection closed at once because the cap was reached.
    pub fn record_connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// Records a connection accepted and served.
    pub fn connection_opened(&self) {
        self.connections_open.inc();
    }

    /// Records a connection closed; `timed_out` names the timeout that
    /// closed it (`header` or `idle`), if one did.
    pub fn connection_closed(&self, timed_out: Option<&'static str>) {
        self.connections_open.dec();
        if let Some(reason) = timed_out {
            self.connections_timed_out
                .get_or_create(&ReasonLabels { reason })
                .inc();
        }
    }

    /// Sets the gauges from `registry`: the plugin set serving now and the
    /// engine's long-call lane.
    pub fn observe(&self, registry: &crate::Registry) {
        let lane = registry.engine().long_lane().usage();
        for (r, gauge) in LANE_GAUGES.iter().zip(&self.lane) {
            gauge.set((r.read)(&lane));
        }
        self.observe_plugin_set(&registry.plugin_set());
        // The engine, the log and the registry count; the counters catch up.
        let dropped = registry.engine().shadow_dropped();
        self.shadow_dropped
            .inc_by(dropped.saturating_sub(self.shadow_dropped.get()));
        let engine = registry.engine();
        for (counter, total) in [
            (&self.observations, engine.observations_delivered()),
            (&self.observations_dropped, engine.observations_dropped()),
            (&self.observe_faults, engine.observe_faults()),
            (&self.observe_waits_expired, engine.observe_waits_expired()),
        ] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        let dropped = crate::runtime::log_writer::dropped_total();
        self.decision_log_dropped
            .inc_by(dropped.saturating_sub(self.decision_log_dropped.get()));
        for (plugin, failed) in registry.fetch_failures() {
            let counter = self.fetch_failures.get_or_create(&PluginLabels {
                plugin: plugin.into(),
            });
            counter.inc_by(failed.saturating_sub(counter.get()));
        }
        self.state_keys.clear();
        self.state_bytes.clear();
        for (tenant, usage) in registry.engine().state().usage() {
            let labels = AccountLabels {
                account: if tenant.is_empty() {
                    crate::tenant::GLOBAL_ACCOUNT.into()
                } else {
                    tenant.to_string().into()
                },
            };
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            self.state_keys.get_or_create(&labels).set(n(usage.keys));
            self.state_bytes.get_or_create(&labels).set(n(usage.bytes));
        }
    }

    /// Sets the policy set series from `set`'s status.
    pub fn observe_set(&self, set: &crate::load::remote::set::SetStatus) {
        self.set_info.clear();
        self.set_info
            .get_or_create(&SetLabels {
                source: set.source.clone().into(),
                digest: set.digest.clone().into(),
            })
            .set(1);
        self.set_generation
            .set(i64::try_from(set.generation).unwrap_or(i64::MAX));
        for (counter, total) in [
            (&self.set_refused, set.refused),
            (&self.set_poll_failures, set.poll_failures),
        ] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// Sets the plugin and share gauges from the plugin set serving now.
    fn observe_plugin_set(&self, set: &PluginSet) {
        // Counted from the description `GET /v1/plugins` answers, so the
        // two never disagree.
        let described = set.describe();
        self.plugins_loaded.clear();
        self.plugins_loaded
            .get_or_create(&ChainLabels {
                chain: "global".into(),
            })
            .set(gauge_value(described.global.len()));
        for (tenant, own) in &described.tenants {
            self.plugins_loaded
                .get_or_create(&ChainLabels {
                    chain: format!("tenant:{tenant}").into(),
                })
                .set(gauge_value(own.len()));
        }
        self.load_errors.set(gauge_value(described.errors.len()));
        self.tenants_pending.set(gauge_value(set.pending.len()));
        self.tenants_refused.set(gauge_value(set.refused.len()));
        self.reloads_unsettled
            .set(i64::try_from(crate::load::watch::unsettled_reloads()).unwrap_or(i64::MAX));
        self.quarantined.clear();
        self.quarantines.clear();
        self.outbound_requests.clear();
        self.outbound_bytes.clear();
        for plugin in described.plugins() {
            for r in plugin.http.iter().flat_map(|h| &h.requests) {
                let (name, host) = (|| plugin.name.into(), || r.host.as_str().into());
                self.outbound_requests
                    .get_or_create(&OutboundLabels {
                        plugin: name(),
                        host: host(),
                        outcome: r.outcome,
                    })
                    .inc_by(i64::try_from(r.count).unwrap_or(i64::MAX));
                for (direction, bytes) in [("sent", r.sent), ("received", r.received)] {
                    self.outbound_bytes
                        .get_or_create(&OutboundBytesLabels {
                            plugin: name(),
                            host: host(),
                            direction,
                        })
                        .inc_by(i64::try_from(bytes).unwrap_or(i64::MAX));
                }
            }
            let labels = PluginLabels {
                plugin: plugin.name.into(),
            };
            let health = &plugin.health;
            self.quarantined.get_or_create(&labels).set(i64::from(
                health.state != crate::call::quarantine::HealthState::Ok,
            ));
            self.quarantines
                .get_or_create(&labels)
                .set(i64::try_from(health.quarantines).unwrap_or(i64::MAX));
        }
        for family in &self.shares {
            family.clear();
        }
        let accounts = set
            .accounts
            .global
            .iter()
            .chain(set.accounts.tenants.values());
        for account in accounts {
            let labels = AccountLabels {
                account: account.name().into(),
            };
            let usage = account.usage();
            for (r, family) in SHARE_GAUGES.iter().zip(&self.shares) {
                family.get_or_create(&labels).set((r.read)(&usage));
            }
        }
        self.generation
            .set(i64::try_from(set.generation).unwrap_or(i64::MAX));
    }

    /// The metrics in the OpenMetrics text format (which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
