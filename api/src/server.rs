//! The gateway's connection loop: like the status page's (`net::server`), a bounded number of
//! connections and a deadline for each request head, but with the client's address on every
//! request ([`ClientAddr`]), room for long polls, and keep-alive (a researcher makes many
//! requests).
//!
//! Places are held for work, not for being there:
//! - A connection holds one of [`ServerLimits::max_connections`] while it is open; when all are
//!   taken, the connection idle the longest (no request in flight) is closed to make room for
//!   the new one. Idle keep-alive sockets, however many, cannot keep out a client with work.
//! - An API request (`/api/v1/…`) holds one of [`ServerLimits::max_api_requests`] while it is
//!   answered (a long poll while it waits), never while its connection idles: an
//!   unauthenticated request is answered at once and lets go. Past it, 503 with `Retry-After`,
//!   so that the pages, `/metrics` and the health checks on the same address still answer
//!   however the API is flooded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::header::RETRY_AFTER;
use axum::http::HeaderValue;
use axum::response::IntoResponse;
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::ClientAddr;
use crate::tls::Tls;
use crate::ApiError;

/// The server's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections open at once; past it the longest idle is closed for a new one, and with
    /// every connection at work the new one is closed.
    pub max_connections: usize,
    /// API requests (`/api/v1/…`) answered at once, long polls included: fewer than the
    /// connections, so that the rest of the server (pages, `/metrics`, `/healthz`) still
    /// answers while the API is flooded. Past it, 503 with `Retry-After`.
    pub max_api_requests: usize,
    /// How long a client may take to send a request head (a slow client is cut).
    pub header_timeout: Duration,
    /// The longest one connection lives (its requests included).
    pub connection_lifetime: Duration,
}

/// Connections kept for the rest of the server by [`ServerLimits::for_api`].
pub const RESERVED_CONNECTIONS: usize = 64;

impl ServerLimits {
    /// At most `api` API requests at once, and [`RESERVED_CONNECTIONS`] more connections for
    /// the rest.
    pub fn for_api(api: usize) -> Self {
        let api = api.max(1);
        ServerLimits {
            max_connections: api.saturating_add(RESERVED_CONNECTIONS),
            max_api_requests: api,
            ..ServerLimits::default()
        }
    }
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 2048,
            max_api_requests: 2048 - RESERVED_CONNECTIONS,
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

/// The connections being served: each one's state, so that the longest idle can be closed when
/// a new one needs its place.
#[derive(Default)]
struct Connections {
    next: AtomicU64,
    all: Mutex<HashMap<u64, Arc<Connection>>>,
}

/// One connection's state.
struct Connection {
    /// Requests in flight on it.
    busy: AtomicUsize,
    /// When its last request ended (or it opened).
    idle_since: Mutex<Instant>,
    /// Cancelled to close it once its request in flight, if any, is answered.
    close: CancellationToken,
}

impl Connections {
    fn open(&self) -> (u64, Arc<Connection>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Connection {
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            close: CancellationToken::new(),
        });
        if let Ok(mut all) = self.all.lock() {
            all.insert(id, conn.clone());
        }
        (id, conn)
    }

    fn closed(&self, id: u64) {
        if let Ok(mut all) = self.all.lock() {
            all.remove(&id);
        }
    }

    /// Closes the connection idle the longest (no request in flight, not closing already):
    /// `false` when every connection is at work.
    fn close_idlest(&self) -> bool {
        let Ok(all) = self.all.lock() else {
            return false;
        };
        let idlest = all
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0 && !c.close.is_cancelled())
            .min_by_key(|c| {
                c.idle_since
                    .lock()
                    .map(|at| *at)
                    .unwrap_or_else(|_| Instant::now())
            });
        match idlest {
            Some(conn) => {
                conn.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// How long a new connection waits for the place of an idle one being closed.
const EVICTION_WAIT: Duration = Duration::from_secs(2);

async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    tls: Option<Arc<Tls>>,
    token: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let api_slots = Arc::new(Semaphore::new(limits.max_api_requests));
    let connections = Arc::new(Connections::default());
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
        // Every place taken: the connection idle the longest makes room (an idle keep-alive
        // connection must not keep out one with work); with every connection at work, the new
        // one is closed.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Some(slot),
            Err(_) if connections.close_idlest() => None,
            Err(_) => {
                tracing::debug!(%peer, "too many connections at work: closed");
                drop(stream);
                continue;
            }
        };
        let router = router.clone();
        let limits = limits.clone();
        let token = token.clone();
        let api_slots = api_slots.clone();
        let slots = slots.clone();
        let connections = connections.clone();
        let tls = tls.as_ref().and_then(|t| t.current());
        tokio::spawn(async move {
            let slot = match slot {
                Some(slot) => slot,
                None => match tokio::time::timeout(EVICTION_WAIT, slots.acquire_owned()).await {
                    Ok(Ok(slot)) => slot,
                    _ => return,
                },
            };
            let (id, conn) = connections.open();
            let served = Served {
                router,
                limits: &limits,
                api_slots,
                peer,
                conn,
                token: &token,
            };
            match tls {
                None => served.run(stream).await,
                Some(config) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                    match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => served.run(stream).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake too slow: closed"),
                    }
                }
            }
            connections.closed(id);
            drop(slot);
        });
    }
}

/// Counts a request in flight on its connection until dropped.
struct Busy(Arc<Connection>);

impl Busy {
    fn new(conn: &Arc<Connection>) -> Self {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Busy(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut at) = self.0.idle_since.lock() {
            *at = Instant::now();
        }
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One connection to serve.
struct Served<'a> {
    router: Router,
    limits: &'a ServerLimits,
    api_slots: Arc<Semaphore>,
    peer: SocketAddr,
    conn: Arc<Connection>,
    token: &'a CancellationToken,
}

impl Served<'_> {
    /// Serves HTTP/1.1 on the connection, plain or TLS, until it ends, it is closed to make
    /// room, its time is up or the token is cancelled.
    async fn run<S>(self, stream: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Served {
            router,
            limits,
            api_slots,
            peer,
            conn,
            token,
        } = self;
        let close = conn.close.clone();
        let watched = conn.clone();
        let busy = &watched.busy;
        // Every request carries the client's address; an API request holds one of the API's
        // places while it is answered (not while its connection idles).
        let service = hyper::service::service_fn(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ClientAddr(peer));
                let router = router.clone();
                let busy = Busy::new(&conn);
                let place = if request.uri().path().starts_with("/api/v1/") {
                    api_slots.clone().try_acquire_owned().map(Some)
                } else {
                    Ok(None)
                };
                async move {
                    let Ok(_place) = place else {
                        tracing::debug!(%peer, "too many API requests at once: 503");
                        let mut refused = ApiError::Unavailable(
                            "too many API requests at once: try again in a moment".into(),
                        )
                        .into_response();
                        refused
                            .headers_mut()
                            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                        drop(busy);
                        return Ok::<_, std::convert::Infallible>(refused);
                    };
                    let answer = router.oneshot(request.map(axum::body::Body::new)).await?;
                    // In flight until its body is written whole (hyper drops it then).
                    Ok(answer.map(move |body| {
                        axum::body::Body::new(body.map_frame(move |frame| {
                            let _ = &busy;
                            frame
                        }))
                    }))
                }
            },
        );
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .keep_alive(true);
        let connection = http.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        let lifetime = tokio::time::sleep(limits.connection_lifetime);
        tokio::pin!(lifetime);
        let mut closing = false;
        loop {
            tokio::select! {
                done = connection.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(%peer, error = %e, "connection ended");
                    }
                    return;
                }
                _ = close.cancelled(), if !closing => {
                    // Its place is wanted: closed now if nothing is in flight (a half-sent
                    // head is nothing), else once what is in flight is answered.
                    if busy.load(Ordering::Acquire) == 0 {
                        tracing::debug!(%peer, "idle connection closed to make room");
                        return;
                    }
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
                _ = &mut lifetime => {
                    tracing::debug!(%peer, "connection closed: its time is up");
                    return;
                }
                _ = token.cancelled() => return,
            }
        }
    }
}
