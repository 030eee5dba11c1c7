//! Reader sessions: how a person's browser reads the pages that `serve --api` guards with a
//! reader token, since a browser cannot send `Authorization: Bearer` on its own.
//!
//! A reader signs in once with a reader token (the pages' sign-in form); the server answers
//! with a cookie holding a random session id (256 bits, `HttpOnly`, `Secure`,
//! `SameSite=Strict`). The id is kept in this process's memory only, as its SHA-256 hash,
//! mapped to the hash of the token it was opened with and to when it expires
//! ([`SESSION_LIFETIME`]); the token itself is kept nowhere. Every request on a session looks
//! the token up again, as a bearer request does: a revoked token ends its sessions at their
//! next request. A restart of the server ends every session (readers sign in again).
//!
//! Signing in is limited as every token check is: a failed attempt costs the credential
//! tried one of the gateway's failed attempts, and a credential past its limit is refused
//! before it is looked up, so the form is no faster an oracle for guessing tokens than the
//! API (and, as there, readers behind one address do not lock each other out). Signing in and out are POSTs that must come from the server's own pages:
//! the cookie is `SameSite=Strict`, and the request's `Origin` must name the host the request
//! was sent to ([`ReaderSessions::same_origin`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, request::Parts, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use datastore::TokenScope;

use crate::auth::{self, Caller};
use crate::state::Gateway;
use crate::ApiError;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "archivist_session";

/// How long a session lasts from sign-in, however it is used: a working day.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Where a browser without a session is sent.
pub const SIGN_IN_PATH: &str = "/sign-in";

/// Sessions kept at most; past it, expired ones are forgotten, then the oldest.
const MAX_SESSIONS: usize = 10_000;

/// One signed-in browser.
struct Session {
    /// The SHA-256 hash of the token it signed in with (as the datastore keys tokens).
    token_hash: String,
    expires: Instant,
}

/// Why a sign-in (or sign-out) was refused: each variant one answer, its message written for
/// the person at the form.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignInRefused {
    /// The token is not one the server knows (mistyped, revoked): 401.
    #[error("that token is not valid: it may be mistyped or revoked")]
    UnknownToken,
    /// A valid token of another scope: 403.
    #[error("that is a {0} token: the pages need a reader token (archivist token create --scope reader)")]
    NotReader(TokenScope),
    /// Too many failed attempts with this credential: 429.
    #[error("too many failed attempts with this token: try again in a minute")]
    TooManyAttempts,
    /// The form was not posted from this server's own page: 403.
    #[error("the form must be sent from this server's own sign-in page")]
    CrossOrigin,
    /// The datastore could not be asked: 503.
    #[error("the datastore cannot be reached now: try again later")]
    Unavailable(#[source] ApiError),
}

impl SignInRefused {
    /// The status code the refusal is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            SignInRefused::UnknownToken => StatusCode::UNAUTHORIZED,
            SignInRefused::NotReader(_) | SignInRefused::CrossOrigin => StatusCode::FORBIDDEN,
            SignInRefused::TooManyAttempts => StatusCode::TOO_MANY_REQUESTS,
            SignInRefused::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// A successful sign-in: the cookie to set and the token's name (for the page to show).
#[derive(Debug)]
pub struct SignedIn {
    /// The `Set-Cookie` header's value.
    pub cookie: HeaderValue,
    /// The token's name.
    pub name: String,
}

/// The reader sessions of one server, and the guard of its pages (see the module's
/// documentation). Build it once over the gateway: [`ReaderSessions::new`].
pub struct ReaderSessions {
    gateway: Arc<Gateway>,
    /// By the SHA-256 hash of the session id.
    sessions: Mutex<HashMap<String, Session>>,
}

impl ReaderSessions {
    /// No sessions yet, over `gateway`'s tokens and failed-attempt limits.
    pub fn new(gateway: Arc<Gateway>) -> Arc<Self> {
        Arc::new(ReaderSessions {
            gateway,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// Whether the request comes from a page of this server: its `Origin` names the host it
    /// was sent to (`Host`, or with `--trust-proxy` the proxy's `X-Forwarded-Host`). The
    /// scheme is not compared: behind a TLS-terminating proxy the page is `https` and the
    /// request reaches the server as `http`. A request without `Origin` is refused (every
    /// browser sends it with a POST).
    pub fn same_origin(&self, head: &Parts) -> bool {
        let headers = &head.headers;
        let Some(origin) = headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once("://"))
            .map(|(_, authority)| authority.trim_end_matches('/'))
        else {
            return false;
        };
        let forwarded = self
            .gateway
            .limits
            .trust_proxy
            .then(|| headers.get("x-forwarded-host"))
            .flatten();
        let host = forwarded
            .or_else(|| headers.get(header::HOST))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim);
        host.is_some_and(|host| !host.is_empty() && host.eq_ignore_ascii_case(origin))
    }

    /// Signs in with `token` (read from the form of the request whose head is `head`): checks
    /// the origin, the credential's failed attempts, the token and its scope, then opens a
    /// session.
    pub async fn sign_in(&self, head: &Parts, token: &str) -> Result<SignedIn, SignInRefused> {
        if !self.same_origin(head) {
            tracing::info!(path = %head.uri.path(), "sign-in refused: not sent from this server's page");
            return Err(SignInRefused::CrossOrigin);
        }
        let addr = auth::client_addr(
            &Request::from_parts(head.clone(), axum::body::Body::empty()),
            self.gateway.limits.trust_proxy,
        );
        // The API's failed-attempt limit, on the same key: the credential tried.
        let token = token.trim();
        let hash = crate::tokens::hash(token);
        let failures = &self.gateway.limiter.failures;
        if failures.allows(&hash).is_err() {
            tracing::debug!(%addr, "sign-in refused: a credential that keeps failing");
            return Err(SignInRefused::TooManyAttempts);
        }
        let found = if token.is_empty() {
            None
        } else {
            self.look_up(&hash).await?
        };
        let Some((name, scope)) = found else {
            let _ = failures.take(&hash);
            tracing::info!(%addr, "sign-in refused: no valid token");
            return Err(SignInRefused::UnknownToken);
        };
        if scope != TokenScope::Reader {
            let _ = failures.take(&hash);
            tracing::info!(%addr, token = %name, %scope, "sign-in refused: wrong scope");
            return Err(SignInRefused::NotReader(scope));
        }
        let id = new_session_id();
        self.insert(
            crate::tokens::hash(&id),
            Session {
                token_hash: hash,
                expires: Instant::now() + SESSION_LIFETIME,
            },
        );
        tracing::info!(%addr, token = %name, "signed in to the pages");
        Ok(SignedIn {
            cookie: session_cookie(&id, SESSION_LIFETIME),
            name,
        })
    }

    /// Ends the request's session, if it has one; the `Set-Cookie` value that clears it.
    pub fn sign_out(&self, headers: &HeaderMap) -> HeaderValue {
        if let Some(key) = session_key(headers) {
            let ended = self
                .sessions
                .lock()
                .map(|mut s| s.remove(&key).is_some())
                .unwrap_or(false);
            if ended {
                tracing::info!("signed out of the pages");
            }
        }
        session_cookie("", Duration::ZERO)
    }

    /// The name of the reader token behind the request's session, while it is valid.
    pub async fn signed_in_as(&self, headers: &HeaderMap) -> Option<String> {
        let key = session_key(headers)?;
        match self.session_token(&key).await {
            Ok(Some((name, _, _))) => Some(name),
            _ => None,
        }
    }

    /// The token behind the session keyed `key`: its name and scope while the session lasts
    /// and the token is still valid (a session whose token was revoked ends here).
    async fn session_token(
        &self,
        key: &str,
    ) -> Result<Option<(String, TokenScope, String)>, SignInRefused> {
        let now = Instant::now();
        let hash = {
            let Ok(mut sessions) = self.sessions.lock() else {
                return Ok(None);
            };
            match sessions.get(key) {
                Some(s) if s.expires > now => s.token_hash.clone(),
                Some(_) => {
                    sessions.remove(key);
                    return Ok(None);
                }
                None => return Ok(None),
            }
        };
        let found = self.look_up(&hash).await?;
        match found {
            Some((name, TokenScope::Reader)) => Ok(Some((name, TokenScope::Reader, hash))),
            _ => {
                if let Ok(mut sessions) = self.sessions.lock() {
                    sessions.remove(key);
                }
                tracing::info!("a session ended: its token is no longer valid");
                Ok(None)
            }
        }
    }

    /// The token whose hash is `hash`: its name and scope.
    async fn look_up(&self, hash: &str) -> Result<Option<(String, TokenScope)>, SignInRefused> {
        let access = self.gateway.access().map_err(SignInRefused::Unavailable)?;
        let found = access
            .use_token(hash, chrono::Utc::now())
            .await
            .map_err(|e| SignInRefused::Unavailable(ApiError::DataStore(e)))?;
        Ok(found.map(|info| (info.name, info.scope)))
    }

    fn insert(&self, key: String, session: Session) {
        let Ok(mut sessions) = self.sessions.lock() else {
            return;
        };
        if sessions.len() >= MAX_SESSIONS {
            let now = Instant::now();
            sessions.retain(|_, s| s.expires > now);
        }
        if sessions.len() >= MAX_SESSIONS {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(key, session);
    }
}

/// A new session id: 32 random bytes, hex.
fn new_session_id() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `Set-Cookie` value for session `id`, lasting `max_age` (zero clears it).
fn session_cookie(id: &str, max_age: Duration) -> HeaderValue {
    let cookie = format!(
        "{SESSION_COOKIE}={id}; Path=/; Max-Age={}; HttpOnly; Secure; SameSite=Strict",
        max_age.as_secs()
    );
    // Hex and fixed text only: always a valid header value.
    HeaderValue::from_str(&cookie).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The key (hash) of the session id the request's cookie carries, if any.
fn session_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == SESSION_COOKIE && !value.is_empty())
        .map(|(_, id)| crate::tokens::hash(id.trim()))
}

/// Whether the request is a browser's page load (a GET or HEAD that accepts HTML).
fn wants_html(request: &Request) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        && request
            .headers()
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("text/html"))
}

/// `/sign-in?next=PATH` for the request's path and query.
fn sign_in_location(request: &Request) -> String {
    let next = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut location = format!("{SIGN_IN_PATH}?next=");
    for byte in next.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            location.push(char::from(byte));
        } else {
            location.push_str(&format!("%{byte:02X}"));
        }
    }
    location
}

/// Middleware for the pages and `/metrics` of `serve --api`: lets through a request with a
/// reader token (`Authorization: Bearer`, checked as the API checks it) or with a valid
/// session of a reader token. Without either, a browser's page load is sent to the sign-in
/// page (303), anything else gets the API's JSON 401. Use with
/// `axum::middleware::from_fn_with_state(sessions, api::require_reader_or_session)`.
pub async fn require_reader_or_session(
    State(sessions): State<Arc<ReaderSessions>>,
    mut request: Request,
    next: Next,
) -> Response {
    let gateway = &sessions.gateway;
    if request.headers().contains_key(header::AUTHORIZATION) {
        return auth::check(gateway, &[TokenScope::Reader], request, next).await;
    }
    let addr = auth::client_addr(&request, gateway.limits.trust_proxy);
    let mut stale_cookie = false;
    if let Some(key) = session_key(request.headers()) {
        // Failed attempts are limited per credential, here the session id (as its hash).
        if let Err(wait) = gateway.limiter.failures.allows(&key) {
            return ApiError::TooManyRequests {
                retry_after: wait.as_secs().saturating_add(1),
            }
            .into_response();
        }
        match sessions.session_token(&key).await {
            Ok(Some((name, scope, hash))) => {
                if let Err(wait) = gateway.limiter.requests.take(&name) {
                    tracing::debug!(token = %name, "refused: over the token's request rate");
                    return ApiError::TooManyRequests {
                        retry_after: wait.as_secs().saturating_add(1),
                    }
                    .into_response();
                }
                request.extensions_mut().insert(Caller {
                    name,
                    scope,
                    addr,
                    max_researchers: 0,
                    hash,
                });
                return next.run(request).await;
            }
            Ok(None) => {
                // An unknown id costs a failed attempt, as an unknown token does.
                let _ = gateway.limiter.failures.take(&key);
                stale_cookie = true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "a session could not be checked");
                return (
                    e.status(),
                    axum::Json(serde_json::json!({ "error": e.to_string() })),
                )
                    .into_response();
            }
        }
    }
    if wants_html(&request) {
        let location = sign_in_location(&request);
        let mut response = (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, location),
                (header::CACHE_CONTROL, "no-store".into()),
            ],
        )
            .into_response();
        if stale_cookie {
            response
                .headers_mut()
                .insert(header::SET_COOKIE, session_cookie("", Duration::ZERO));
        }
        return response;
    }
    auth::check(gateway, &[TokenScope::Reader], request, next).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn request(uri: &str, accept: Option<&str>) -> Request {
        let mut builder = axum::http::Request::builder().uri(uri);
        if let Some(accept) = accept {
            builder = builder.header(header::ACCEPT, accept);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn the_way_back_is_kept_encoded() {
        let r = request("/clips?q=a+b&x=%2F", None);
        assert_eq!(
            sign_in_location(&r),
            "/sign-in?next=/clips%3Fq%3Da%2Bb%26x%3D%252F"
        );
    }

    #[test]
    fn only_page_loads_want_html() {
        let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        assert!(wants_html(&request("/", Some(browser))));
        assert!(!wants_html(&request("/", Some("application/json"))));
        assert!(!wants_html(&request("/", None)));
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; archivist_session=abc ; b=2"),
        );
        assert_eq!(session_key(&headers), Some(crate::tokens::hash("abc")));
        let cookie = session_cookie("abc", SESSION_LIFETIME);
        let cookie = cookie.to_str().unwrap();
        for part in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
            assert!(cookie.contains(part), "{cookie}");
        }
    }
}
