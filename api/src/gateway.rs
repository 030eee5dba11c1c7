//! [`Gateway`]: what every API handler shares (the datastore, the bus, the limits), and
//! [`Gateway::router`], the API's routes behind their token checks.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use datastore::{ApiAccess, DataStore, TokenScope};
use messagebus::{Bus, Sender};
use tokio::sync::{OnceCell, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Buckets, Limiter, Needs};
use crate::{curators, ApiError};

/// The queues the API reads and writes (the archivists' own, as configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queues {
    /// Where `POST /api/v1/episodes` sends.
    pub curated_episodes: String,
    /// Where `POST /api/v1/clips` sends.
    pub curated_clips: String,
    /// Where researchers' work items come from.
    pub pending_research: String,
    /// Where their results go.
    pub completed_research: String,
}

/// The gateway's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body, in bytes (413 past it).
    pub max_body_bytes: usize,
    /// The longest a long poll waits, whatever the client asks.
    pub max_wait: Duration,
    /// Long polls waiting at once (503 past it).
    pub max_long_polls: usize,
    /// Failed attempts (no token, unknown or revoked, wrong scope) a client address may make
    /// at once; one more comes back every `failure_window / max_failures`.
    pub max_failures: u32,
    /// See `max_failures`.
    pub failure_window: Duration,
    /// Requests a token may make in a burst; refilled at this many a second.
    pub requests_per_second: u32,
    /// Trust `X-Forwarded-For` for the client's address (behind a reverse proxy only).
    pub trust_proxy: bool,
    /// A researcher counts for the work-assignment rule while it was seen within this long
    /// (the same window every archivist's `pending-research` reads presence with); the
    /// gateway writes presence well within it.
    pub presence_window: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 16 * 1024 * 1024,
            max_wait: Duration::from_secs(20),
            max_long_polls: 1024,
            max_failures: 20,
            failure_window: Duration::from_secs(60),
            requests_per_second: 200,
            trust_proxy: false,
            presence_window: datastore::PRESENCE_WINDOW,
        }
    }
}

/// The API gateway: build it once, serve [`router`](Self::router).
pub struct Gateway {
    pub(crate) store: Arc<dyn DataStore>,
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) queues: Queues,
    pub(crate) limits: Limits,
    pub(crate) limiter: Limiter,
    pub(crate) long_polls: Arc<Semaphore>,
    pub(crate) work: crate::researchers::Work,
    senders: [OnceCell<Arc<dyn Sender>>; 3],
}

impl Gateway {
    /// A gateway over `store` (which must keep the API's tokens: the SQL datastores do) and
    /// `bus`.
    pub fn new(
        store: Arc<dyn DataStore>,
        bus: Arc<dyn Bus>,
        queues: Queues,
        limits: Limits,
    ) -> Result<Arc<Self>, ApiError> {
        if store.api_access().is_none() {
            return Err(ApiError::Usage(
                "this datastore keeps no API tokens: the API needs an SQL datastore".into(),
            ));
        }
        let rate = limits.requests_per_second.max(1);
        Ok(Arc::new(Gateway {
            limiter: Limiter {
                failures: Buckets::new(limits.max_failures, limits.failure_window),
                requests: Buckets::new(rate, Duration::from_secs(1)),
            },
            long_polls: Arc::new(Semaphore::new(limits.max_long_polls)),
            work: crate::researchers::Work::new(),
            store,
            bus,
            queues,
            limits,
            senders: Default::default(),
        }))
    }

    /// The datastore's tokens and presence.
    pub(crate) fn access(&self) -> Result<&dyn ApiAccess, ApiError> {
        // Checked in `new`.
        self.store
            .api_access()
            .ok_or_else(|| ApiError::Usage("this datastore keeps no API tokens".into()))
    }

    /// The sender for `queue` (one of [`Queues`]), made once.
    pub(crate) async fn sender(
        &self,
        which: usize,
        queue: &str,
    ) -> Result<Arc<dyn Sender>, ApiError> {
        let cell = self
            .senders
            .get(which)
            .ok_or_else(|| ApiError::Usage("no such sender".into()))?;
        Ok(cell
            .get_or_try_init(|| async { self.bus.sender(queue).await })
            .await?
            .clone())
    }

    /// Starts what the gateway does in the background until `token` is cancelled: gives back
    /// items held in memory whose researcher went away, keeps its own presence (see
    /// [`datastore::PresenceKind::GatewayReceivers`]); on the way out, lets go of both.
    /// Returns the task, for the caller to wait for at shutdown.
    pub fn start(self: &Arc<Self>, token: &CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(crate::researchers::keep(self.clone(), token.clone()))
    }

    /// The API's routes, each behind its token check.
    pub fn router(self: &Arc<Self>) -> Router {
        let needs = |scopes: &'static [TokenScope]| Needs {
            gateway: self.clone(),
            scopes,
        };
        let curators = Router::new()
            .route("/api/v1/episodes", post(curators::episodes))
            .route("/api/v1/clips", post(curators::clips))
            .route_layer(axum::middleware::from_fn_with_state(
                needs(&[TokenScope::Curator]),
                auth::require,
            ))
            .with_state(self.clone());
        let researchers = Router::new()
            .route("/api/v1/work", post(crate::researchers::take))
            .route(
                "/api/v1/work/{receipt}/extend",
                post(crate::researchers::extend),
            )
            .route(
                "/api/v1/work/{receipt}/results",
                post(crate::researchers::results),
            )
            .route(
                "/api/v1/work/{receipt}/finish",
                post(crate::researchers::finish),
            )
            .route(
                "/api/v1/work/{receipt}/release",
                post(crate::researchers::release),
            )
            .route_layer(axum::middleware::from_fn_with_state(
                needs(&[TokenScope::Researcher]),
                auth::require,
            ))
            .with_state(self.clone());
        let readers = Router::new()
            .route("/api/v1/status", get(crate::readers::status))
            .route("/api/v1/matches", get(crate::readers::matches))
            .route_layer(axum::middleware::from_fn_with_state(
                needs(&[TokenScope::Reader]),
                auth::require,
            ))
            .with_state(self.clone());
        Router::new()
            .route("/api/v1/openapi.json", get(crate::openapi::document))
            .merge(curators)
            .merge(researchers)
            .merge(readers)
    }
}

/// Middleware that lets through only requests with a reader token: for the pages and
/// `/metrics` of a server reachable from other hosts. Use with
/// `axum::middleware::from_fn_with_state(gateway, api::require_reader)`.
pub async fn require_reader(
    axum::extract::State(gateway): axum::extract::State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    auth::check(&gateway, &[TokenScope::Reader], request, next).await
}
