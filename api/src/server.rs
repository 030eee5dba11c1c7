//! The gateway's connection loop: like the status page's (`net::server`), a bounded number of
//! connections and a deadline for each request head, but with the client's address on every
//! request ([`ClientAddr`], for the failed-attempt limit), room for long polls, and
//! keep-alive (a researcher makes many requests).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::ClientAddr;
use crate::tls::Tls;

/// The server's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections served at once; more are closed as they come.
    pub max_connections: usize,
    /// How long a client may take to send a request head (a slow client is cut).
    pub header_timeout: Duration,
    /// The longest one connection lives (its requests included).
    pub connection_lifetime: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 2048,
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
        let tls = tls.as_ref().and_then(|t| t.current());
        tokio::spawn(async move {
            match tls {
                None => connection(stream, router, &limits, peer, &token).await,
                Some(config) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                    match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => connection(stream, router, &limits, peer, &token).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake too slow: closed"),
                    }
                }
            }
            drop(slot);
        });
    }
}

/// Serves HTTP/1.1 on one connection, plain or TLS, within `limits`, until it ends or `token`
/// is cancelled.
async fn connection<S>(
    stream: S,
    router: Router,
    limits: &ServerLimits,
    peer: SocketAddr,
    token: &CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Every request carries the client's address (for the failed-attempt limit).
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ClientAddr(peer));
            router.clone().oneshot(request.map(axum::body::Body::new))
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
