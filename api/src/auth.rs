//! Bearer tokens on every API request: looked up by hash (the time a look-up takes tells
//! nothing of a token), the scope checked, failed attempts limited per credential and requests
//! per token. A token never reaches a log: only its name does (or that it is unknown); nor
//! does a receipt (paths are logged with it left out).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use datastore::TokenScope;

use crate::state::Gateway;
use crate::ApiError;

/// The client's address as the connection loop saw it (inserted into every request by
/// [`crate::server`]).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

/// Who a request comes from, once its token is checked (an extension handlers read).
#[derive(Clone)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    /// Its scope.
    pub scope: TokenScope,
    /// The client's address (the proxy's word for it with `--trust-proxy`).
    pub addr: IpAddr,
    /// The most researchers the token counts as.
    pub max_researchers: u32,
    /// The token's hash, to check it again (never shown: see the `Debug` below).
    pub(crate) hash: String,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .field("addr", &self.addr)
            .field("max_researchers", &self.max_researchers)
            .finish_non_exhaustive()
    }
}

/// The client's address: the connection's, or with `trust_proxy` the right-most address of
/// `X-Forwarded-For` that is not a trusted proxy's (the connection's peer, loopback): the one
/// the proxy itself appended, which the client cannot write. The entries left of it are the
/// client's own words.
pub(crate) fn client_addr(request: &Request, trust_proxy: bool) -> IpAddr {
    let peer = request
        .extensions()
        .get::<ClientAddr>()
        .map(|c| c.0.ip())
        .or_else(|| {
            request
                .extensions()
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
        })
        .unwrap_or(IpAddr::from([0, 0, 0, 0]));
    if !trust_proxy {
        return peer;
    }
    let trusted = |addr: &IpAddr| *addr == peer || addr.is_loopback();
    let entries: Vec<&str> = request
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for entry in entries.iter().rev() {
        match entry.parse::<IpAddr>() {
            Ok(addr) if trusted(&addr) => continue,
            Ok(addr) => return addr,
            // An entry that is no address: nothing left of it can be believed either.
            Err(_) => break,
        }
    }
    peer
}

/// The bearer token of the request, if it carries one.
pub(crate) fn bearer(request: &Request) -> Option<&str> {
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

/// `path` as it may be logged: a receipt (`/api/v1/work/{receipt}/…`) left out.
pub(crate) fn loggable(path: &str) -> String {
    match path.strip_prefix("/api/v1/work/") {
        Some(rest) if !rest.is_empty() => match rest.split_once('/') {
            Some((_, action)) => format!("/api/v1/work/…/{action}"),
            None => "/api/v1/work/…".into(),
        },
        _ => path.chars().take(200).collect(),
    }
}

/// 429 with how long to wait.
fn too_many(wait: Duration) -> Response {
    ApiError::TooManyRequests {
        retry_after: wait.as_secs().saturating_add(1),
    }
    .into_response()
}

/// Checks `token` against `scopes` (any of them will do): the [`Caller`], or the answer:
/// 401 without a valid token, 403 with another scope, 429 past the limits (with
/// `Retry-After`).
pub(crate) async fn authenticate(
    gateway: &Gateway,
    scopes: &[TokenScope],
    token: Option<&str>,
    addr: IpAddr,
    path: &str,
) -> Result<Caller, Response> {
    let limiter = &gateway.limiter;
    let Some(token) = token else {
        // Costs nothing to answer and guesses nothing: not limited, not logged at INFO.
        tracing::debug!(%addr, path = %loggable(path), "refused: no token");
        return Err(ApiError::Unauthorized.into_response());
    };
    let hash = crate::tokens::hash(token);
    if let Err(wait) = limiter.failures.allows(&hash) {
        tracing::debug!(%addr, "refused: a credential that keeps failing");
        return Err(too_many(wait));
    }
    let access = gateway.access().map_err(IntoResponse::into_response)?;
    let found = access
        .use_token(&hash, chrono::Utc::now())
        .await
        .map_err(|e| ApiError::DataStore(e).into_response())?;
    let Some(info) = found else {
        let first = limiter.failures.take(&hash).is_ok();
        match access.revoked_token(&hash).await {
            Ok(Some(name)) => tracing::info!(
                %addr, token = %name, path = %loggable(path), first,
                "refused: a revoked token"
            ),
            _ => tracing::info!(%addr, path = %loggable(path), first, "refused: an unknown token"),
        }
        return Err(ApiError::Unauthorized.into_response());
    };
    if !scopes.contains(&info.scope) {
        let _ = limiter.failures.take(&hash);
        tracing::info!(%addr, token = %info.name, scope = %info.scope, path = %loggable(path), "refused: wrong scope");
        let needed = scopes.first().copied().unwrap_or(TokenScope::Reader);
        return Err(ApiError::Forbidden { needed }.into_response());
    }
    if let Err(wait) = limiter.requests.take(&info.name) {
        tracing::debug!(token = %info.name, "refused: over the token's request rate");
        return Err(too_many(wait));
    }
    Ok(Caller {
        name: info.name,
        scope: info.scope,
        addr,
        max_researchers: info.max_researchers,
        hash,
    })
}

/// Checks the request's bearer token against `scopes` and inserts the [`Caller`]; else
/// answers as [`authenticate`] says.
pub(crate) async fn check(
    gateway: &Gateway,
    scopes: &[TokenScope],
    mut request: Request,
    next: Next,
) -> Response {
    let addr = client_addr(&request, gateway.limits.trust_proxy);
    let path = request.uri().path().to_string();
    match authenticate(gateway, scopes, bearer(&request), addr, &path).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refused) => refused,
    }
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

    fn request(forwarded: &[&str]) -> Request {
        let mut builder = axum::http::Request::builder().uri("/api/v1/status");
        for f in forwarded {
            builder = builder.header("x-forwarded-for", *f);
        }
        let mut request = builder.body(axum::body::Body::empty()).unwrap_or_default();
        request
            .extensions_mut()
            .insert(ClientAddr(SocketAddr::from(([10, 0, 0, 1], 4000))));
        request
    }

    #[test]
    fn the_proxy_s_own_entry_is_believed_not_the_client_s() {
        let ip = |s: &str| s.parse::<IpAddr>().ok();
        // The client wrote "6.6.6.6"; the proxy appended what it saw.
        let r = request(&["6.6.6.6, 203.0.113.9"]);
        assert_eq!(Some(client_addr(&r, true)), ip("203.0.113.9"));
        // Chained proxies on loopback and the peer are passed over.
        let r = request(&["6.6.6.6, 203.0.113.9, 127.0.0.1", "10.0.0.1"]);
        assert_eq!(Some(client_addr(&r, true)), ip("203.0.113.9"));
        // Without trust, or without the header, the connection's peer.
        assert_eq!(Some(client_addr(&r, false)), ip("10.0.0.1"));
        assert_eq!(Some(client_addr(&request(&[]), true)), ip("10.0.0.1"));
        // Garbage the client wrote is passed over with the rest of its words.
        assert_eq!(
            Some(client_addr(&request(&["nonsense, 203.0.113.9"]), true)),
            ip("203.0.113.9")
        );
        assert_eq!(
            Some(client_addr(&request(&["203.0.113.9, nonsense"]), true)),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn receipts_never_reach_a_log() {
        assert_eq!(
            loggable("/api/v1/work/0123456789abcdef0123456789abcdef/results"),
            "/api/v1/work/…/results"
        );
        assert_eq!(
            loggable("/api/v1/work/b.56.7276/extend"),
            "/api/v1/work/…/extend"
        );
        assert_eq!(loggable("/api/v1/work"), "/api/v1/work");
        assert_eq!(loggable("/api/v1/status"), "/api/v1/status");
    }
}
