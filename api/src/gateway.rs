//! The API's routes, each group behind its token check ([`Gateway::router`]), what the
//! gateway does in the background ([`Gateway::start`]), and [`require_reader`] for pages served
//! beside the API. The shared state is in `state.rs`.

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use datastore::TokenScope;
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Needs};
use crate::curators;
use crate::state::Gateway;

impl Gateway {
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
            .route("/api/v1/archive", get(crate::media::offered))
            .route(
                "/api/v1/archive/episodes/{key}",
                get(crate::media::versions),
            )
            .route(
                "/api/v1/archive/episodes/{key}/versions",
                post(crate::media::record),
            )
            // `get` answers HEAD too.
            .route(
                "/api/v1/archive/media/{sha256}",
                get(crate::media::read).put(crate::media::give),
            )
            .route(
                "/api/v1/prints/{key}",
                get(crate::episode_prints::get).put(crate::episode_prints::put),
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
