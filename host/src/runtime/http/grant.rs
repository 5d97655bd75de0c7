//! What outbound HTTP a plugin is granted: the hosts it may reach (scheme,
//! host or `*.suffix`, port), the methods it may use, and the networks on
//! the host's side it may reach besides the public internet.
//!
//! A grant is checked twice for every request: the URL against
//! [`HttpGrant::host_for`] before anything is sent (and again for every
//! redirect), and every address the name resolves to against
//! [`HttpGrant::address_allowed`] — the addresses a connection may be made
//! to, so a name cannot resolve its way onto the host's own network.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Serialize, Serializer};

/// The methods a grant allows when it names none: `GET` and `POST`.
pub const DEFAULT_METHODS: [&str; 2] = ["GET", "POST"];

/// The methods a grant may name.
const KNOWN_METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Networks that are not the public internet: loopback, private (RFC 1918,
/// unique local), link-local (cloud metadata services live at
/// 169.254.169.254), shared address space, unspecified, multicast and
/// broadcast. An address in one of them is refused unless the grant names
/// it (an IP host in `allowed_hosts`, or a network in `allowed_networks`).
pub const NON_PUBLIC: [&str; 13] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "255.255.255.255/32",
    "::/128",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
];

/// Whether `ip` is outside every [`NON_PUBLIC`] network (an IPv4-mapped
/// IPv6 address is judged as the IPv4 address it maps).
pub fn is_public(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    !NON_PUBLIC
        .iter()
        .filter_map(|n| IpNet::from_str(n).ok())
        .any(|n| n.contains(&ip))
        && !matches!(ip, IpAddr::V6(v6) if v6.is_multicast())
}

/// One entry of `allowed_hosts`: `scheme://host[:port]`, where `host` is a
/// name, `*.suffix` (any name ending in `.suffix`, not `suffix` itself), or
/// an IP address (`[...]` for IPv6). The port defaults to the scheme's (80,
/// 443).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    scheme: Scheme,
    host: HostMatch,
    port: u16,
}

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostMatch {
    /// Exactly this name (lower case).
    Name(String),
    /// Any name ending in `.` and this suffix (lower case).
    Suffix(String),
    /// This address.
    Ip(IpAddr),
}

impl HostMatch {
    /// Whether every host this matches, `other` matches too.
    fn within(&self, other: &HostMatch) -> bool {
        match (self, other) {
            (a, b) if a == b => true,
            (HostMatch::Name(n), HostMatch::Suffix(s)) => ends_with_label(n, s),
            (HostMatch::Suffix(a), HostMatch::Suffix(s)) => ends_with_label(a, s),
            _ => false,
        }
    }
}

/// Whether `name` is `suffix` (which starts with `.`) preceded by at least
/// one label.
fn ends_with_label(name: &str, suffix: &str) -> bool {
    name.strip_suffix(suffix)
        .is_some_and(|head| !head.is_empty())
}

impl FromStr for HostPattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("\"{s}\" is not `scheme://host[:port]`: {why}");
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return Err(bad("the scheme must be http or https")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(bad("a host pattern has no path, query or user"));
        }
        // `[v6]:port`, `[v6]`, `host:port`, `host`.
        let (host, port) = match rest.strip_prefix('[') {
            Some(v6) => {
                let (addr, after) = v6.split_once(']').ok_or_else(|| bad("unclosed `[`"))?;
                let port = match after {
                    "" => None,
                    p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after `]`"))?),
                };
                let ip = addr
                    .parse::<std::net::Ipv6Addr>()
                    .map_err(|_| bad("not an IPv6 address in `[...]`"))?;
                (HostMatch::Ip(IpAddr::V6(ip)), port)
            }
            None => {
                let (host, port) = match rest.rsplit_once(':') {
                    Some((h, p)) => (h, Some(p)),
                    None => (rest, None),
                };
                (host_match(host).map_err(|why| bad(&why))?, port)
            }
        };
        let port = match port {
            None => scheme.default_port(),
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| bad("the port must be 1..=65535"))?,
        };
        Ok(HostPattern { scheme, host, port })
    }
}

/// A host as written in a pattern: an IPv4 address, `*.suffix` or a name.
fn host_match(host: &str) -> Result<HostMatch, String> {
    if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
        return Ok(HostMatch::Ip(IpAddr::V4(ip)));
    }
    let lower = host.to_ascii_lowercase();
    let (wild, name) = match lower.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, lower.as_str()),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "\"{host}\" is not a host name (letters, digits, `-` and `.`; `*.` only in front)"
        ));
    }
    Ok(match wild {
        true => HostMatch::Suffix(format!(".{name}")),
        false => HostMatch::Name(name.to_owned()),
    })
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        match &self.host {
            HostMatch::Name(n) => f.write_str(n)?,
            HostMatch::Suffix(s) => write!(f, "*{s}")?,
            HostMatch::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostMatch::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        if self.port != self.scheme.default_port() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

impl Serialize for HostPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl HostPattern {
    /// Whether this pattern allows `url`'s scheme, host and port.
    fn matches(&self, url: &reqwest::Url) -> bool {
        let scheme = match url.scheme() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return false,
        };
        if scheme != self.scheme || url.port_or_known_default() != Some(self.port) {
            return false;
        }
        match (url.host(), &self.host) {
            (Some(url::Host::Domain(d)), HostMatch::Name(n)) => d.eq_ignore_ascii_case(n),
            (Some(url::Host::Domain(d)), HostMatch::Suffix(s)) => {
                ends_with_label(&d.to_ascii_lowercase(), s)
            }
            (Some(url::Host::Ipv4(ip)), HostMatch::Ip(want)) => IpAddr::V4(ip) == *want,
            (Some(url::Host::Ipv6(ip)), HostMatch::Ip(want)) => {
                IpAddr::V6(ip).to_canonical() == want.to_canonical()
            }
            _ => false,
        }
    }

    /// Whether every URL this allows, `other` allows too.
    fn within(&self, other: &HostPattern) -> bool {
        self.scheme == other.scheme && self.port == other.port && self.host.within(&other.host)
    }

    /// The address this pattern names, if its host is one.
    fn ip(&self) -> Option<IpAddr> {
        match self.host {
            HostMatch::Ip(ip) => Some(ip.to_canonical()),
            _ => None,
        }
    }
}

/// The outbound HTTP a plugin is granted (see the module docs). The
/// default grants nothing: a plugin has no network unless its manifest
/// entry lists `allowed_hosts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HttpGrant {
    /// Where requests may go (`allowed_hosts`). Empty: nowhere.
    pub hosts: Vec<HostPattern>,
    /// The methods allowed (`http_methods`), upper case. Default:
    /// `GET` and `POST`.
    pub methods: Vec<String>,
    /// Networks on the host's side that names may resolve to
    /// (`allowed_networks`), besides public addresses. Default: none.
    #[serde(serialize_with = "display_all")]
    pub networks: Vec<IpNet>,
}

fn display_all<S: Serializer, T: fmt::Display>(items: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(items.iter().map(ToString::to_string))
}

impl Default for HttpGrant {
    fn default() -> Self {
        HttpGrant {
            hosts: Vec::new(),
            methods: DEFAULT_METHODS.map(String::from).to_vec(),
            networks: Vec::new(),
        }
    }
}

impl HttpGrant {
    /// Whether this grants any request at all.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The grant with `hosts`, `methods` and `networks` as written in a
    /// manifest, each checked; an error names the entry at fault, by key.
    pub fn parse(
        hosts: &[String],
        methods: Option<&[String]>,
        networks: &[String],
    ) -> Result<HttpGrant, (&'static str, String)> {
        let hosts = hosts
            .iter()
            .map(|h| h.parse())
            .collect::<Result<_, String>>()
            .map_err(|e| ("allowed_hosts", e))?;
        let methods = match methods {
            None => DEFAULT_METHODS.map(String::from).to_vec(),
            Some(ms) => ms
                .iter()
                .map(|m| {
                    let up = m.to_ascii_uppercase();
                    match KNOWN_METHODS.contains(&up.as_str()) {
                        true => Ok(up),
                        false => Err(format!(
                            "\"{m}\" is not one of {}",
                            KNOWN_METHODS.join(", ")
                        )),
                    }
                })
                .collect::<Result<_, String>>()
                .map_err(|e| ("http_methods", e))?,
        };
        let networks = networks
            .iter()
            .map(|n| {
                IpNet::from_str(n)
                    .or_else(|_| IpAddr::from_str(n).map(IpNet::from))
                    .map(|n| n.trunc())
                    .map_err(|_| {
                        format!("\"{n}\" is not a network (`10.0.0.0/8`, `::1/128`) or an address")
                    })
            })
            .collect::<Result<_, String>>()
            .map_err(|e| ("allowed_networks", e))?;
        Ok(HttpGrant {
            hosts,
            methods,
            networks,
        })
    }

    /// The pattern that allows `url`, or why none does.
    pub(crate) fn host_for(&self, url: &reqwest::Url) -> Option<&HostPattern> {
        self.hosts.iter().find(|p| p.matches(url))
    }

    /// Whether `method` (upper case) is allowed.
    pub(crate) fn allows_method(&self, method: &str) -> bool {
        self.methods.iter().any(|m| m == method)
    }

    /// Whether a connection may be made to `ip`: a public address, one in
    /// `allowed_networks`, or one an `allowed_hosts` entry names.
    pub fn address_allowed(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        is_public(ip)
            || self.networks.iter().any(|n| n.contains(&ip))
            || self.hosts.iter().any(|h| h.ip() == Some(ip))
    }

    /// The first part of this grant that `ceiling` does not cover — a host
    /// pattern, a method or a network, as (key, message) — or `None` when
    /// this grant is within it: what a tenant's plugin may be granted.
    pub fn beyond(&self, ceiling: &HttpGrant) -> Option<(&'static str, String)> {
        let listed = |items: Vec<String>| match items.is_empty() {
            true => "none".to_string(),
            false => items.join(", "),
        };
        if let Some(h) = self
            .hosts
            .iter()
            .find(|h| !ceiling.hosts.iter().any(|c| h.within(c)))
        {
            let grant = listed(ceiling.hosts.iter().map(ToString::to_string).collect());
            return Some((
                "allowed_hosts",
                format!(
                    "{h} is not within the operator's grant for tenant plugins ({grant}; `[ceilings] allowed_hosts` in the global manifest)"
                ),
            ));
        }
        if let Some(m) = self.methods.iter().find(|m| !ceiling.allows_method(m)) {
            let grant = listed(ceiling.methods.clone());
            return Some((
                "http_methods",
                format!(
                    "{m} is not within the operator's grant for tenant plugins ({grant}; `[ceilings] http_methods` in the global manifest)"
                ),
            ));
        }
        // A network, or an address a host pattern names outside the
        // public internet, must be within the ceiling's networks or names.
        let covered = |n: &IpNet| {
            ceiling.networks.iter().any(|c| c.contains(n))
                || ceiling
                    .hosts
                    .iter()
                    .any(|h| h.ip().map(IpNet::from) == Some(*n))
        };
        let named = self.hosts.iter().filter_map(HostPattern::ip);
        if let Some(n) = self
            .networks
            .iter()
            .copied()
            .chain(named.filter(|ip| !is_public(*ip)).map(IpNet::from))
            .find(|n| !covered(n))
        {
            let grant = listed(ceiling.networks.iter().map(ToString::to_string).collect());
            return Some((
                "allowed_networks",
                format!(
                    "{n} is not within the operator's grant for tenant plugins ({grant}; `[ceilings] allowed_networks` in the global manifest)"
                ),
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(hosts: &[&str], networks: &[&str]) -> HttpGrant {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        HttpGrant::parse(&s(hosts), None, &s(networks)).expect("a valid grant")
    }

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).expect("a URL")
    }

    #[test]
    fn a_pattern_matches_its_scheme_host_and_port_only() {
        let g = grant(
            &["https://api.example.com", "http://*.corp.example:8080"],
            &[],
        );
        assert!(g.host_for(&url("https://api.example.com/v1?q=1")).is_some());
        assert!(g.host_for(&url("https://API.Example.com:443/")).is_some());
        assert!(g.host_for(&url("http://api.example.com/")).is_none());
        assert!(g.host_for(&url("https://api.example.com:8443/")).is_none());
        assert!(
            g.host_for(&url("https://api.example.com.evil.net/"))
                .is_none()
        );
        assert!(g.host_for(&url("http://a.corp.example:8080/")).is_some());
        assert!(g.host_for(&url("http://b.a.corp.example:8080/")).is_some());
        assert!(g.host_for(&url("http://corp.example:8080/")).is_none());
        assert!(g.host_for(&url("http://evilcorp.example:8080/")).is_none());
        assert!(g.host_for(&url("ftp://api.example.com/")).is_none());
    }

    #[test]
    fn addresses_off_the_public_internet_need_naming() {
        let g = grant(
            &["https://api.example.com", "http://127.0.0.1:9000"],
            &["10.1.0.0/16"],
        );
        assert!(g.address_allowed("93.184.216.34".parse().expect("ip")));
        assert!(g.address_allowed("127.0.0.1".parse().expect("ip")));
        assert!(g.address_allowed("10.1.2.3".parse().expect("ip")));
        for refused in [
            "127.0.0.2",
            "::1",
            "::ffff:127.0.0.2",
            "10.2.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "fd00::1",
            "fe80::1",
            "0.0.0.0",
            "100.64.0.1",
        ] {
            assert!(
                !g.address_allowed(refused.parse().expect("ip")),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_tenant_grant_must_be_within_the_ceiling() {
        let ceiling = grant(
            &["https://*.example.com", "http://127.0.0.1:9000"],
            &["10.0.0.0/8"],
        );
        assert_eq!(
            grant(&["https://api.example.com"], &[]).beyond(&ceiling),
            None
        );
        assert_eq!(
            grant(&["https://*.eu.example.com"], &["10.1.0.0/16"]).beyond(&ceiling),
            None
        );
        assert_eq!(
            grant(&["http://127.0.0.1:9000"], &[]).beyond(&ceiling),
            None
        );
        for (wider, key) in [
            (grant(&["https://example.com"], &[]), "allowed_hosts"),
            (grant(&["https://*.com"], &[]), "allowed_hosts"),
            (grant(&["http://api.example.com"], &[]), "allowed_hosts"),
            (
                grant(&["https://api.example.com:444"], &[]),
                "allowed_hosts",
            ),
            (
                grant(&["https://api.example.com"], &["192.168.0.0/16"]),
                "allowed_networks",
            ),
            (
                grant(&["https://api.example.com"], &["0.0.0.0/0"]),
                "allowed_networks",
            ),
        ] {
            assert_eq!(
                wider.beyond(&ceiling).map(|(k, _)| k),
                Some(key),
                "{wider:?}"
            );
        }
        let methods = HttpGrant::parse(
            &["https://api.example.com".into()],
            Some(&["DELETE".into()]),
            &[],
        )
        .expect("a valid grant");
        assert_eq!(
            methods.beyond(&ceiling).map(|(k, _)| k),
            Some("http_methods")
        );
        // No ceiling: a tenant plugin may be granted nothing.
        assert!(
            grant(&["https://api.example.com"], &[])
                .beyond(&HttpGrant::default())
                .is_some()
        );
        assert_eq!(HttpGrant::default().beyond(&HttpGrant::default()), None);
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        for bad in [
            "api.example.com",
            "ftp://x.example",
            "https://x.example/path",
            "https://user@x.example",
            "https://x.example:0",
            "https://x.example:99999",
            "https://*",
            "https://a.*.example",
            "https://[::1",
        ] {
            let s = [bad.to_string()];
            let e = HttpGrant::parse(&s, None, &[]).expect_err(bad);
            assert_eq!(e.0, "allowed_hosts");
            assert!(e.1.contains(bad), "{e:?}");
        }
        let e = HttpGrant::parse(&[], Some(&["FETCH".into()]), &[]).expect_err("a bad method");
        assert_eq!(e.0, "http_methods");
        let e = HttpGrant::parse(&[], None, &["10.0.0.0/33".into()]).expect_err("a bad network");
        assert_eq!(e.0, "allowed_networks");
        assert_eq!(
            "https://[::1]:8443"
                .parse::<HostPattern>()
                .map(|p| p.to_string()),
            Ok("https://[::1]:8443".into())
        );
    }
}
