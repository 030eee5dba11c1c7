//! Which network addresses a fetch of someone else's URL may connect to.
//!
//! Media addresses (and the redirects of feeds) come from feeds written by others: fetched
//! as they are, an enclosure at `http://169.254.169.254/…` or `http://localhost:8080/admin`
//! would make the researcher a probe of its own network. So, as podcast crawlers do, such
//! fetches connect to public addresses only: [`non_public`] lists what is refused
//! (loopback, private, link-local, unique-local, unspecified, shared CGNAT, multicast,
//! broadcast, documentation and reserved ranges, and IPv6 forms that embed one of them).
//!
//! The check is made on the address actually connected to, with no gap between check and
//! connect: a [`Client`] resolves host names itself (`PublicResolver`) and hands the
//! connector only the public addresses among the answers; a literal IP address (which
//! needs no resolving) is checked on the request's URL and at every redirect hop. A
//! refusal is a [`Refused`] error, naming the host, the address and the flag that allows it;
//! [`refused_in`] finds it in the error reqwest returns.
//!
//! Proxies: a checking client ignores the `HTTP_PROXY`/`HTTPS_PROXY` environment (a proxy
//! would resolve and connect to the media's host itself, out of reach of the check). A user
//! who needs a proxy allows private addresses and leaves the filtering to the proxy.
//!
//! `--allow-private-addresses` (a show served from a NAS, the tests) turns every check off.
//! This crate knows nothing of the command line; the flag's name is only in its messages.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// The flag that allows non-public addresses, as messages name it.
pub const ALLOW_FLAG: &str = "--allow-private-addresses";

/// Why `ip` is not a public address (the kind of address it is), or `None` if it is one.
///
/// Refused: IPv4 `0.0.0.0/8` (unspecified, "this network"), `10/8`, `172.16/12`,
/// `192.168/16` (private), `100.64/10` (shared, carrier-grade NAT), `127/8` (loopback),
/// `169.254/16` (link-local: cloud metadata services live there), `192.0.0/24` (protocol
/// assignments), `192.0.2/24`, `198.51.100/24`, `203.0.113/24` (documentation),
/// `198.18/15` (benchmarking), `224/4` (multicast), `240/4` (reserved, with the broadcast
/// address). IPv6 `::` and `::1`, `::/96` (IPv4-compatible, deprecated), `100::/64`
/// (discard), `2001:db8::/32` (documentation), `fc00::/7` (unique-local), `fe80::/10`
/// (link-local), `fec0::/10` (site-local, deprecated), `ff00::/8` (multicast); and the
/// forms that carry an IPv4 address (`::ffff:0:0/96` mapped, `64:ff9b::/96` NAT64,
/// `2002::/16` 6to4) are judged by that address.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified",
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => "private",
        (100, 64..=127, _) => "shared (carrier-grade NAT)",
        (127, _, _) => "loopback",
        (169, 254, _) => "link-local",
        (192, 0, 0) => "IETF protocol",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, _, _) => "multicast",
        (255, 255, 255) if ip.is_broadcast() => "broadcast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let embedded_v4 =
        || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    match s {
        // ::ffff:a.b.c.d, IPv4-mapped: connecting to it reaches a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff, _, _] => non_public_v4(embedded_v4()),
        // ::a.b.c.d, IPv4-compatible (deprecated, never a public address).
        [0, 0, 0, 0, 0, 0, _, _] => Some("IPv4-compatible"),
        // 64:ff9b::a.b.c.d, NAT64 of the well-known prefix: reaches a.b.c.d.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => non_public_v4(embedded_v4()),
        // 2002:AABB:CCDD::/48, 6to4 of a.b.c.d.
        [0x2002, hi, lo, ..] => non_public_v4(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        [0x100, 0, 0, 0, ..] => Some("discard"),
        [0x2001, 0xdb8, ..] => Some("documentation"),
        [x, ..] if x & 0xfe00 == 0xfc00 => Some("unique-local"),
        [x, ..] if x & 0xffc0 == 0xfe80 => Some("link-local"),
        [x, ..] if x & 0xffc0 == 0xfec0 => Some("site-local"),
        [x, ..] if x & 0xff00 == 0xff00 => Some("multicast"),
        _ => None,
    }
}

/// A connection refused because its address is not public.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused to connect to {host} ({addr}): a {kind} address, not a public one; {ALLOW_FLAG} allows it")]
pub struct Refused {
    /// The host as the URL named it.
    pub host: String,
    /// The address it resolved to.
    pub addr: IpAddr,
    /// The kind of address, from [`non_public`].
    pub kind: &'static str,
}

/// The [`Refused`] error in `e` or among its sources (reqwest wraps what a resolver or a
/// redirect policy returns).
pub fn refused_in<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e Refused> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(r) = e.downcast_ref::<Refused>() {
            return Some(r);
        }
        next = e.source();
    }
    None
}

/// Which addresses fetches may connect to; by default, public ones only.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    /// Every address (`--allow-private-addresses`).
    allow_private: bool,
    /// Addresses taken for public ones: for tests only (a test has no public address to
    /// serve a first hop from). Never set in production.
    treated_as_public: Arc<[IpAddr]>,
}

impl AddressPolicy {
    /// Any address: what the user typed is fetched as given.
    pub fn any() -> Self {
        AddressPolicy {
            allow_private: true,
            ..AddressPolicy::default()
        }
    }

    /// Public addresses, or any when `allow_private`; `treated_as_public` are taken for
    /// public addresses (for tests).
    pub fn new(allow_private: bool, treated_as_public: Vec<IpAddr>) -> Self {
        AddressPolicy {
            allow_private,
            treated_as_public: treated_as_public.into(),
        }
    }

    /// Whether `host`'s address `addr` may be connected to.
    pub fn check(&self, host: &str, addr: IpAddr) -> Result<(), Refused> {
        if self.allow_private || self.treated_as_public.contains(&addr) {
            return Ok(());
        }
        match non_public(addr) {
            None => Ok(()),
            Some(kind) => Err(Refused {
                host: host.to_string(),
                addr,
                kind,
            }),
        }
    }

    /// Checks a URL whose host is a literal IP address (a host name is checked when it is
    /// resolved, on the addresses connected to).
    pub fn check_url(&self, url: &url::Url) -> Result<(), Refused> {
        let addr = match url.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            _ => return Ok(()),
        };
        let host = url.host_str().unwrap_or_default();
        self.check(host, addr)
    }

    /// A client builder that keeps to this policy (its resolver, and no proxy from the
    /// environment unless every address is allowed); finish it with [`Client::build`].
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        crate::install_crypto();
        let builder = reqwest::Client::builder();
        if self.allow_private {
            return builder;
        }
        builder.no_proxy().dns_resolver(Arc::new(PublicResolver {
            policy: self.clone(),
        }))
    }
}

/// How a [`Client`] treats redirects.
#[derive(Debug, Clone, Copy)]
pub enum Redirects {
    /// Not followed: the caller sees them (and checks each hop with [`Client::get`]).
    Shown,
    /// Followed, up to this many, each hop checked.
    Follow(usize),
}

/// An HTTP client that connects to the addresses its [`AddressPolicy`] allows, and no other.
#[derive(Debug, Clone)]
pub struct Client {
    inner: reqwest::Client,
    policy: AddressPolicy,
}

impl Client {
    /// Builds `builder` (from [`AddressPolicy::client_builder`], with the caller's timeouts
    /// and headers) with a redirect policy that checks every hop.
    pub fn build(
        policy: &AddressPolicy,
        builder: reqwest::ClientBuilder,
        redirects: Redirects,
    ) -> reqwest::Result<Client> {
        let redirect = match redirects {
            Redirects::Shown => reqwest::redirect::Policy::none(),
            Redirects::Follow(max) => {
                let hop_policy = policy.clone();
                reqwest::redirect::Policy::custom(move |attempt| {
                    if attempt.previous().len() > max {
                        return attempt.error(format!("more than {max} redirects"));
                    }
                    match hop_policy.check_url(attempt.url()) {
                        Ok(()) => attempt.follow(),
                        Err(refused) => attempt.error(refused),
                    }
                })
            }
        };
        Ok(Client {
            inner: builder.redirect(redirect).build()?,
            policy: policy.clone(),
        })
    }

    /// A GET of `url`, refused at once if its host is a literal address the policy refuses.
    pub fn get(&self, url: url::Url) -> Result<reqwest::RequestBuilder, Refused> {
        self.policy.check_url(&url)?;
        Ok(self.inner.get(url))
    }

    /// The policy this client keeps to.
    pub fn policy(&self) -> &AddressPolicy {
        &self.policy
    }
}

/// Resolves host names with the system's resolver and keeps the addresses the policy
/// allows; refuses a name that has none.
struct PublicResolver {
    policy: AddressPolicy,
}

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check(&host, a.ip()) {
                    Ok(()) => true,
                    Err(r) => {
                        refused.get_or_insert(r);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                if let Some(r) = refused {
                    return Err(Box::new(r) as Box<dyn std::error::Error + Send + Sync>);
                }
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn kind(s: &str) -> Option<&'static str> {
        non_public(s.parse().unwrap())
    }

    #[test]
    fn what_is_not_public() {
        for (addr, what) in [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("100.127.255.255", "shared (carrier-grade NAT)"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "link-local"),
            ("192.0.0.8", "IETF protocol"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("224.0.0.251", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:10.0.0.1", "private"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:c0a8:0101::1", "private"),
            ("100::1", "discard"),
            ("2001:db8::1", "documentation"),
            ("fc00::1", "unique-local"),
            ("fd12:3456::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
        ] {
            assert_eq!(kind(addr), Some(what), "{addr}");
        }
    }

    #[test]
    fn what_is_public() {
        for addr in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.0.1",
            "192.0.1.1",
            "198.17.0.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert_eq!(kind(addr), None, "{addr}");
        }
    }

    #[test]
    fn the_policy_checks_literal_hosts_and_names_the_flag() {
        let strict = AddressPolicy::default();
        let url = url::Url::parse("http://[::ffff:7f00:1]:8080/a.mp3").unwrap();
        let refused = strict.check_url(&url).unwrap_err();
        assert_eq!(refused.kind, "loopback");
        let text = refused.to_string();
        assert!(
            text.contains("127.0.0.1") || text.contains("::ffff:127.0.0.1"),
            "{text}"
        );
        assert!(text.contains(ALLOW_FLAG), "{text}");
        // Names are checked when resolved, not here.
        let named = url::Url::parse("http://localhost/a.mp3").unwrap();
        assert!(strict.check_url(&named).is_ok());
        assert!(AddressPolicy::any().check_url(&url).is_ok());
        let test = AddressPolicy::new(false, vec!["127.0.0.2".parse().unwrap()]);
        assert!(test.check("x", "127.0.0.2".parse().unwrap()).is_ok());
        assert!(test.check("x", "127.0.0.1".parse().unwrap()).is_err());
    }

    /// A name that resolves to loopback is refused on the address connected to; the error
    /// reqwest returns carries the refusal.
    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_when_connecting() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let policy = AddressPolicy::default();
        // A bound on the test: a connection the check let through would wait for an answer.
        let builder = policy
            .client_builder()
            .timeout(std::time::Duration::from_secs(10));
        let client = Client::build(&policy, builder, Redirects::Follow(5)).unwrap();
        let url = url::Url::parse(&format!("http://localhost:{port}/")).unwrap();
        let err = client.get(url.clone()).unwrap().send().await.unwrap_err();
        let refused = refused_in(&err).unwrap();
        assert_eq!(refused.host, "localhost");
        assert_eq!(refused.kind, "loopback");
        // Nothing connected.
        let accepted =
            tokio::time::timeout(std::time::Duration::from_millis(50), listener.accept()).await;
        assert!(accepted.is_err());
    }
}
