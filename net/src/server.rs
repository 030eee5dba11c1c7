//! What keeps the server answering whoever else talks to it: a bounded number of
//! connections, a deadline for each connection's request head and for each request, one
//! request per connection, and, on a loopback address, only requests for this server's own
//! host name (a web page elsewhere cannot reach it through a name that resolves to 127.0.0.1:
//! DNS rebinding).
//!
//! Every server of archivist goes through here: [`bind`], then [`spawn`] (the status page,
//! the archivists' and the researcher's `--metrics-addr`, the curator's page).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Connections served at once; more are closed as they come (a scraper and a few browsers
/// need a handful).
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take to answer (each read inside is bounded at 5 s already).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest a connection lives, however slowly its client reads the answer.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// Why a server could not start listening.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// The address cannot be used here: in use, not this machine's, or not allowed. A matter
    /// of configuration (another address is the fix), not an outage.
    #[error("cannot listen on {setting} {addr}: {source}{hint}")]
    Unusable {
        /// The flag and variable the address came from.
        setting: String,
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
        /// A hint when the address is taken.
        hint: &'static str,
    },
    /// Any other failure to listen.
    #[error("cannot listen on {setting} {addr}")]
    Io {
        /// The flag and variable the address came from.
        setting: String,
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
}

impl BindError {
    /// Whether another address is the fix (a usage error, exit 2, to the command line).
    pub fn is_configuration(&self) -> bool {
        matches!(self, BindError::Unusable { .. })
    }
}

/// Listens on `addr`; `setting` names the flag and variable the address came from, for the
/// error when it cannot be bound.
pub async fn bind(addr: SocketAddr, setting: &str) -> Result<TcpListener, BindError> {
    match TcpListener::bind(addr).await {
        Ok(listener) => Ok(listener),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::AddrInUse
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                " (another program, or another archivist, listens there: choose another \
                 port, or 0 for any free one)"
            } else {
                ""
            };
            Err(BindError::Unusable {
                setting: setting.to_owned(),
                addr,
                source: e,
                hint,
            })
        }
        Err(e) => Err(BindError::Io {
            setting: setting.to_owned(),
            addr,
            source: e,
        }),
    }
}

/// Serves `router` on `listener` until `token` is cancelled, in a task of its own, with every
/// protection above: each request within its deadline, the host names checked on a loopback
/// address, connections bounded in number, head time and lifetime. Returns the bound address.
pub fn spawn(
    listener: TcpListener,
    router: Router,
    token: &CancellationToken,
) -> std::io::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    let router = guard_host(router.layer(axum::middleware::from_fn(deadline)), bound);
    tokio::spawn(serve(listener, router, token.clone()));
    Ok(bound)
}

/// `router` with the host-name check of a loopback-bound server (421 for a `Host` that is
/// not a loopback name and this port: DNS rebinding), when `bound` is a loopback address;
/// unchanged elsewhere. [`spawn`] applies it; a server with a connection loop of its own
/// (the API's, with TLS) applies it with this.
pub fn guard_host(router: Router, bound: SocketAddr) -> Router {
    match Hosts::for_bound(bound) {
        Some(hosts) => router.layer(axum::middleware::from_fn_with_state(hosts, check_host)),
        None => router,
    }
}

/// Serves `router` on `listener` until `token` is cancelled, within the bounds above.
async fn serve(listener: TcpListener, router: Router, token: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false);
            let connection = http.serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "connection ended"),
                Err(_) => tracing::debug!(%peer, "connection closed: too slow"),
            }
            drop(slot);
        });
    }
}

/// Each request within [`REQUEST_TIMEOUT`].
async fn deadline(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the answer took too long\n",
        )
            .into_response(),
    }
}

/// The host names a loopback-bound server answers to.
#[derive(Clone)]
pub struct Hosts {
    port: u16,
}

impl Hosts {
    /// `Some` when `bound` is a loopback address (elsewhere the host name is the network's
    /// business: a proxy may name it as it likes).
    pub fn for_bound(bound: SocketAddr) -> Option<Self> {
        bound
            .ip()
            .is_loopback()
            .then_some(Hosts { port: bound.port() })
    }

    fn allows(&self, host: &str) -> bool {
        let (name, port) = match host.rsplit_once(':') {
            // `[::1]:9898`, `localhost:9898`; a bare IPv6 address has no brackets to split at.
            Some((name, port)) if !name.is_empty() && !port.contains(']') => {
                (name, port.parse::<u16>().ok())
            }
            _ => (host, Some(80)),
        };
        let name = name.to_ascii_lowercase();
        port == Some(self.port)
            && (name == "localhost"
                || name.ends_with(".localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback()))
    }
}

/// Refuses a request whose `Host` is not a loopback name and this port (421), when bound to
/// loopback.
async fn check_host(
    axum::extract::State(hosts): axum::extract::State<Hosts>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if hosts.allows(host) {
        return next.run(request).await;
    }
    (
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "this server answers to localhost:{0} and 127.0.0.1:{0} only (it is bound to \
             loopback; another host name is refused against DNS rebinding)\n",
            hosts.port
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_on_the_bound_port_only() {
        let hosts = Hosts { port: 9898 };
        for ok in [
            "localhost:9898",
            "127.0.0.1:9898",
            "[::1]:9898",
            "LOCALHOST:9898",
            "app.localhost:9898",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for refused in [
            "evil.example:9898",
            "127.0.0.1.evil.example:9898",
            "localhost:9899",
            "localhost",
            "",
            "[::1]",
            "10.0.0.1:9898",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
        assert!(Hosts { port: 80 }.allows("localhost"));
    }
}
