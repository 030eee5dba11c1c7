//! `/readyz`: whether the datastore and every queue answer now (`/healthz`, the process is
//! up, needs no module).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::app::{App, CHECK_TIMEOUT};

/// `/readyz`: 200 when the datastore and every queue answer within the check timeout, else
/// 503 naming which did not (without its URL).
pub(super) async fn readyz(State(app): State<Arc<App>>) -> impl IntoResponse {
    let sources = &app.sources;
    let check = async {
        sources
            .store
            .status(chrono::Utc::now())
            .await
            .map_err(|_| "datastore unreachable".to_string())?;
        let Some(bus) = sources
            .bus
            .get()
            .map_err(|why| format!("bus unreachable ({why})"))?
        else {
            return Ok(());
        };
        for queue in &sources.queues {
            // A queue not created yet is no outage: readiness is about answering, and
            // `archivist queues` creates queues (the page names the missing ones).
            let sender = match bus.sender(queue).await {
                Ok(sender) => sender,
                Err(messagebus::BusError::QueueNotFound(_)) => continue,
                Err(_) => return Err(format!("bus unreachable (queue {queue})")),
            };
            sender
                .inspect()
                .await
                .map_err(|_| format!("bus unreachable (queue {queue})"))?;
        }
        Ok::<(), String>(())
    };
    match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(Ok(())) => (StatusCode::OK, "ready\n".to_string()),
        Ok(Err(why)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the datastore or the bus did not answer in time\n".to_string(),
        ),
    }
}
