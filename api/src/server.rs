//! The gateway's connection loop: like the status page's (`net::server`), a bounded number of
//! connections and a deadline for each request head, but with the client's address on every
//! request ([`ClientAddr`], for the failed-attempt limit), room for long polls, and
//! keep-alive (a researcher makes many requests).
//!
//! The API cannot take every connection: a connection that asks for `/api/v1/…` holds one of
//! [`ServerLimits::max_api_connections`] for the rest of its life (503 and closed when none is
//! left), so that however the API is flooded (long polls, keep-alive clients), the pages,
//! `/metrics` and the health checks on the same address still get a connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::header::CONNECTION;
use axum::http::HeaderValue;
use axum::response::IntoResponse;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::ClientAddr;
use crate::tls::Tls;
use crate::ApiError;

/// The server's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections served at once; more are closed as they come.
    pub max_connections: usize,
    /// Of those, connections that have asked for the API (`/api/v1/…`): fewer, so that the
    /// rest of the server (pages, `/metrics`, `/healthz`) still answers while the API is
    /// flooded. An API request on a connection past it is answered 503 and the connection
    /// closed.
    pub max_api_connections: usize,
    /// How long a client may take to send a request head (a slow client is cut).
    pub header_timeout: Duration,
    /// The longest one connection lives (its requests included).
    pub connection_lifetime: Duration,
}

/// Connections kept for the rest of the server by [`ServerLimits::for_api`].
pub const RESERVED_CONNECTIONS: usize = 64;

impl ServerLimits {
    /// At most `api` connections for the API, and [`RESERVED_CONNECTIONS`] more for the rest.
    pub fn for_api(api: usize) -> Self {
        let api = api.max(1);
        ServerLimits {
            max_connections: api.saturating_add(RESERVED_CONNECTIONS),
            max_api_connections: api,
            ..ServerLimits::default()
        }
    }
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 2048,
            max_api_connections: 2048 - RESERVED_CONNECTIONS,
            header_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(600),
        }
    }
}

/// Serves `router` on `listener` until `token` is cancelled, in a task of its own; returns
/// the bound address.
///
/// With `tls`, every connection is TLS (its handshake within the head's deadline), with the
/// certificate [`Tls`] holds when the connection comes.
pub fn spawn(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    tls: Option<Arc<Tls>>,
    token: &CancellationToken,
) -> std::io::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    // On loopback, the same DNS-rebinding guard as every other server of archivist's.
    let router = net::server::guard_host(router, bound);
    tokio::spawn(serve(listener, router, limits, tls, token.clone()));
    Ok(bound)
}

async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    tls: Option<Arc<Tls>>,
    token: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let api_slots = Arc::new(Semaphore::new(limits.max_api_connections));
    loop {
        let (stream, peer) = tokio::select! {
            _ = token.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: pass, and let the next one try.
                    tracing::debug!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "too many connections: closed");
            drop(stream);
            continue;
        };
        let router = router.clone();
        let limits = limits.clone();
        let token = token.clone();
        let api_slots = api_slots.clone();
        let tls = tls.as_ref().and_then(|t| t.current());
        tokio::spawn(async move {
            match tls {
                None => connection(stream, router, &limits, api_slots, peer, &token).await,
                Some(config) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                    match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => {
                            connection(stream, router, &limits, api_slots, peer, &token).await
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake too slow: closed"),
                    }
                }
            }
            drop(slot);
        });
    }
}

/// Whether the connection holding `held` may make an API request: it holds an API slot
/// already, or takes one now.
fn admit(held: &Mutex<Option<OwnedSemaphorePermit>>, api_slots: &Arc<Semaphore>) -> bool {
    let Ok(mut held) = held.lock() else {
        return false;
    };
    if held.is_some() {
        return true;
    }
    match api_slots.clone().try_acquire_owned() {
        Ok(slot) => {
            *held = Some(slot);
            true
        }
        Err(_) => false,
    }
}

/// Serves HTTP/1.1 on one connection, plain or TLS, within `limits`, until it ends or `token`
/// is cancelled.
async fn connection<S>(
    stream: S,
    router: Router,
    limits: &ServerLimits,
    api_slots: Arc<Semaphore>,
    peer: SocketAddr,
    token: &CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // The API slot this connection holds once it asked for the API, until it ends.
    let held: Arc<Mutex<Option<OwnedSemaphorePermit>>> = Arc::default();
    // Every request carries the client's address (for the failed-attempt limit).
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ClientAddr(peer));
            let router = router.clone();
            let admitted =
                !request.uri().path().starts_with("/api/v1/") || admit(&held, &api_slots);
            async move {
                if !admitted {
                    tracing::debug!(%peer, "too many API connections: 503 and closed");
                    let mut refused = ApiError::Unavailable(
                        "too many API connections at once: try again in a moment".into(),
                    )
                    .into_response();
                    refused
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                    return Ok(refused);
                }
                router.oneshot(request.map(axum::body::Body::new)).await
            }
        });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let connection = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        done = tokio::time::timeout(limits.connection_lifetime, connection.as_mut()) => match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "connection ended"),
            Err(_) => tracing::debug!(%peer, "connection closed: its time is up"),
        },
        _ = token.cancelled() => {}
    }
}
