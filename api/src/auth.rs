//! Bearer tokens on every API request: looked up by hash (the time a look-up takes tells
//! nothing of a token), the scope checked, failed attempts limited per client address and
//! requests limited per token. A token never reaches a log: only its name does.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use datastore::TokenScope;

use crate::gateway::Gateway;
use crate::ApiError;

/// The client's address as the connection loop saw it (inserted into every request by
/// [`crate::server`]).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

/// Who a request comes from, once its token is checked (an extension handlers read).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    /// Its scope.
    pub scope: TokenScope,
    /// The client's address (the proxy's word for it with `--trust-proxy`).
    pub addr: IpAddr,
}

/// Token buckets by key: `burst` at once, refilled at `per_second`. Bounded: past
/// [`MAX_KEYS`] keys, full buckets are forgotten (they hold no debt).
pub(crate) struct Buckets<K> {
    burst: f64,
    per_second: f64,
    buckets: Mutex<HashMap<K, (f64, Instant)>>,
}

/// Keys kept at most before full buckets are forgotten.
const MAX_KEYS: usize = 10_000;

impl<K: std::hash::Hash + Eq + Clone> Buckets<K> {
    pub(crate) fn new(burst: u32, per: Duration) -> Self {
        let burst = f64::from(burst.max(1));
        Buckets {
            burst,
            per_second: burst / per.as_secs_f64().max(0.001),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn level(&self, entry: (f64, Instant), now: Instant) -> f64 {
        let (tokens, at) = entry;
        (tokens + now.duration_since(at).as_secs_f64() * self.per_second).min(self.burst)
    }

    /// Whether `key` has a token left, without taking it.
    pub(crate) fn allows(&self, key: &K) -> bool {
        let now = Instant::now();
        let Ok(buckets) = self.buckets.lock() else {
            return true;
        };
        buckets
            .get(key)
            .is_none_or(|&entry| self.level(entry, now) >= 1.0)
    }

    /// Takes a token of `key`'s bucket; `false` when there is none left.
    pub(crate) fn take(&self, key: &K) -> bool {
        let now = Instant::now();
        let Ok(mut buckets) = self.buckets.lock() else {
            return true;
        };
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(key) {
            buckets.retain(|_, entry| {
                let (tokens, at) = *entry;
                (tokens + now.duration_since(at).as_secs_f64() * self.per_second) < self.burst
            });
        }
        let level = buckets
            .get(key)
            .map_or(self.burst, |&entry| self.level(entry, now));
        if level < 1.0 {
            buckets.insert(key.clone(), (level, now));
            return false;
        }
        buckets.insert(key.clone(), (level - 1.0, now));
        true
    }
}

/// The rate limits of one gateway.
pub(crate) struct Limiter {
    /// Failed attempts per client address.
    pub(crate) failures: Buckets<IpAddr>,
    /// Requests per token (by name).
    pub(crate) requests: Buckets<String>,
}

/// The client's address: the connection's, or with `trust_proxy` the first address of
/// `X-Forwarded-For` (the one the proxy saw).
pub(crate) fn client_addr(request: &Request, trust_proxy: bool) -> IpAddr {
    if trust_proxy {
        let forwarded = request
            .headers()
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.trim().parse::<IpAddr>().ok());
        if let Some(addr) = forwarded {
            return addr;
        }
    }
    request
        .extensions()
        .get::<ClientAddr>()
        .map(|c| c.0.ip())
        .or_else(|| {
            request
                .extensions()
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
        })
        .unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

/// The bearer token of the request, if it carries one.
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (kind, token) = value.trim().split_once(' ')?;
    kind.eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

/// Checks the request's token against `scopes` (any of them will do): 401 without a valid
/// one, 403 with another scope, 429 past the limits; inserts the [`Caller`].
pub(crate) async fn check(
    gateway: &Gateway,
    scopes: &[TokenScope],
    mut request: Request,
    next: Next,
) -> Response {
    let addr = client_addr(&request, gateway.limits.trust_proxy);
    let limiter = &gateway.limiter;
    if !limiter.failures.allows(&addr) {
        tracing::debug!(%addr, "refused: too many failed attempts from this address");
        return ApiError::TooManyRequests.into_response();
    }
    let found = match bearer(&request) {
        None => None,
        Some(token) => {
            let hash = crate::tokens::hash(token);
            let access = match gateway.access() {
                Ok(access) => access,
                Err(e) => return e.into_response(),
            };
            match access.use_token(&hash, chrono::Utc::now()).await {
                Ok(found) => found,
                Err(e) => return ApiError::DataStore(e).into_response(),
            }
        }
    };
    let Some(info) = found else {
        limiter.failures.take(&addr);
        tracing::info!(%addr, path = %request.uri().path(), "refused: no valid token");
        return ApiError::Unauthorized.into_response();
    };
    if !scopes.contains(&info.scope) {
        limiter.failures.take(&addr);
        tracing::info!(%addr, token = %info.name, scope = %info.scope, "refused: wrong scope");
        let needed = scopes.first().copied().unwrap_or(TokenScope::Reader);
        return ApiError::Forbidden { needed }.into_response();
    }
    if !limiter.requests.take(&info.name) {
        tracing::debug!(token = %info.name, "refused: over the token's request rate");
        return ApiError::TooManyRequests.into_response();
    }
    request.extensions_mut().insert(Caller {
        name: info.name,
        scope: info.scope,
        addr,
    });
    next.run(request).await
}

/// Middleware state: the gateway and the scopes a route group takes.
#[derive(Clone)]
pub(crate) struct Needs {
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) scopes: &'static [TokenScope],
}

/// [`check`] as axum middleware.
pub(crate) async fn require(State(needs): State<Needs>, request: Request, next: Next) -> Response {
    check(&needs.gateway, needs.scopes, request, next).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refuse_past_the_burst() {
        let buckets = Buckets::new(3, Duration::from_secs(3600));
        let key = "a".to_string();
        assert!(buckets.take(&key) && buckets.take(&key) && buckets.take(&key));
        assert!(!buckets.allows(&key));
        assert!(!buckets.take(&key));
        assert!(buckets.take(&"b".to_string()));
    }
}
