//! Researchers' endpoints: take a work item (a long poll), extend it, send its results,
//! finish it or give it back — each by the receipt the item came with.
//!
//! A receipt is the bus's own where the bus has durable receipts (the database bus: the
//! message's row and its delivery's random receipt; SQS: the receipt handle), so that it
//! outlives the gateway: a researcher carries on after a restart. Such receipts are settled
//! only through the gateway's receiver on the work-item queue, which refuses one of another
//! queue. On the other buses (in-memory, RabbitMQ) the delivery stays in this gateway's
//! memory under a random receipt bound to the token that took it, and a restart loses it (the
//! item comes back when the bus's own visibility or connection runs out).
//!
//! Either way the item stays invisible to others for [`ITEM_VISIBILITY`] after it is taken
//! and after each extension: a researcher that goes away without a word gives its item back
//! when that runs out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use archivist::messages::{self, CompletedResearchItem, PendingResearchItem};
use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use datastore::PresenceKind;
use messagebus::{Delivery, ReceiptAction, Receiver};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::auth::Caller;
use crate::gateway::Gateway;
#[allow(unused_imports)]
use crate::openapi::ErrorAnswer;
use crate::{lines, ApiError};

/// How long a taken item stays invisible to others without an extension.
pub const ITEM_VISIBILITY: Duration = Duration::from_secs(60);

/// A researcher's presence is written at most this often (each request shows it is there),
/// or a quarter of the presence window when that is shorter.
const PRESENCE_EVERY: Duration = Duration::from_secs(10);

/// How often presence is written within `window`: [`PRESENCE_EVERY`] or a quarter of the
/// window, whichever is shorter (a presence must be written again before it lapses).
fn presence_every(window: Duration) -> Duration {
    PRESENCE_EVERY
        .min(window / 4)
        .max(Duration::from_millis(10))
}

/// The header a researcher may name itself with (one researcher of several behind one
/// address and token); otherwise it is its token and address.
pub const RESEARCHER_HEADER: &str = "x-archivist-researcher";

/// Receipts of durable bus deliveries start with this; those kept in memory with `g.`.
const DURABLE: &str = "b.";
const IN_MEMORY: &str = "g.";

/// A delivery held in this gateway's memory (buses without durable receipts).
struct Held {
    delivery: Delivery,
    token: String,
    visible_until: Instant,
}

/// The researchers' side of a gateway: its receiver on the work-item queue, the deliveries
/// it holds in memory, and when each researcher's presence was last written.
#[derive(Default)]
pub(crate) struct Work {
    receiver: OnceCell<Arc<dyn Receiver>>,
    held: Mutex<HashMap<String, Held>>,
    written: Mutex<HashMap<String, Instant>>,
    /// This gateway's presence row (its own receivers on the work-item queue).
    pub(crate) id: String,
}

impl Work {
    pub(crate) fn new() -> Self {
        Work {
            id: format!("gateway:{}", uuid::Uuid::new_v4()),
            ..Work::default()
        }
    }

    /// Whether the gateway's receiver exists (the bus counts it as a consumer).
    pub(crate) fn has_receiver(&self) -> bool {
        self.receiver.initialized()
    }
}

async fn receiver(gateway: &Gateway) -> Result<Arc<dyn Receiver>, ApiError> {
    let work = &gateway.work;
    let queue = &gateway.queues.pending_research;
    let made = work
        .receiver
        .get_or_try_init(|| async {
            let receiver = gateway.bus.receiver(queue).await?;
            // The bus counts it as a consumer from now on: said at once, so that a
            // work-assignment run does not take it for a researcher.
            if let Ok(access) = gateway.access() {
                let touched = access
                    .touch_presence(&work.id, PresenceKind::GatewayReceivers, 1, Utc::now())
                    .await;
                if let Err(e) = touched {
                    tracing::debug!(error = %e, "the gateway's presence could not be written");
                }
            }
            Ok::<_, messagebus::BusError>(receiver)
        })
        .await?
        .clone();
    Ok(made)
}

/// Writes that `caller` is there, at most every [`PRESENCE_EVERY`].
async fn present(gateway: &Gateway, caller: &Caller, headers: &HeaderMap) {
    let who = headers
        .get(RESEARCHER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.chars()
                .filter(|c| !c.is_control())
                .take(64)
                .collect::<String>()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| caller.addr.to_string());
    let id = format!("researcher:{}:{who}", caller.name);
    let now = Instant::now();
    {
        let Ok(mut written) = gateway.work.written.lock() else {
            return;
        };
        if written.get(&id).is_some_and(|&at| {
            now.duration_since(at) < presence_every(gateway.limits.presence_window)
        }) {
            return;
        }
        written.insert(id.clone(), now);
    }
    let Ok(access) = gateway.access() else { return };
    if let Err(e) = access
        .touch_presence(&id, PresenceKind::Researcher, 1, Utc::now())
        .await
    {
        tracing::debug!(error = %e, "a researcher's presence could not be written");
    }
}

/// `?wait=SECONDS`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WaitQuery {
    /// The longest to wait for an item, in seconds (at most the server's maximum, 20 s).
    wait: Option<f64>,
}

/// 200's body of `POST /api/v1/work`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Taken {
    /// Extends, answers, finishes or gives back the item.
    receipt: String,
    /// The work item (a `PendingResearchItem`).
    #[schema(value_type = Object)]
    item: PendingResearchItem,
    /// Until when the item is invisible to others unless extended.
    visible_until: DateTime<Utc>,
    /// How many times the bus has handed this item out, this time included: a researcher
    /// gives its last try's failures as answers rather than releasing the item again.
    receive_count: u32,
}

/// 200's body of `…/extend`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Extended {
    /// Until when the item is invisible to others unless extended again.
    visible_until: DateTime<Utc>,
}

/// 200's body of `…/results`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Sent {
    /// Results now durably on `completed_research`.
    sent: usize,
}

fn visible_until() -> DateTime<Utc> {
    Utc::now() + chrono::Duration::from_std(ITEM_VISIBILITY).unwrap_or_default()
}

#[utoipa::path(
    post,
    path = "/api/v1/work",
    tag = "researchers",
    description = "Takes a work item: a long poll of at most `wait` seconds.",
    params(WaitQuery),
    responses(
        (status = 200, description = "An item, held by its receipt", body = Taken),
        (status = 204, description = "None arrived within the wait"),
        (status = 503, description = "Too many long polls at once", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn take(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Query(query): Query<WaitQuery>,
) -> Result<Response, ApiError> {
    let wait = query
        .wait
        .filter(|w| w.is_finite() && *w > 0.0)
        .map_or(Duration::ZERO, Duration::from_secs_f64)
        .min(gateway.limits.max_wait)
        // A researcher shows it is there with each request: it must poll again well within
        // the presence window (a third of the default window is the 20 s maximum).
        .min(gateway.limits.presence_window / 3);
    let Ok(_poll) = gateway.long_polls.clone().try_acquire_owned() else {
        return Err(ApiError::Unavailable(
            "too many researchers are waiting for work at once: try again in a moment".into(),
        ));
    };
    present(&gateway, &caller, &headers).await;
    let receiver = receiver(&gateway).await?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Some(delivery) = receiver.receive(1, left).await?.into_iter().next() else {
            return Ok(StatusCode::NO_CONTENT.into_response());
        };
        let item = match messages::decode::<PendingResearchItem>(delivery.body()) {
            Ok(item) => item,
            Err(e) => {
                // Not a work item archivist wrote: poison, set aside as a local researcher would.
                let reason = e.to_string();
                tracing::warn!(%reason, "a work item that is not one: dead-lettered");
                delivery.dead_letter(&reason).await?;
                continue;
            }
        };
        let receive_count = delivery.receive_count();
        let receipt = match delivery.durable_receipt() {
            Some(bus_receipt) => {
                delivery.let_expire();
                let extended = receiver
                    .settle_receipt(&bus_receipt, ReceiptAction::Extend(ITEM_VISIBILITY))
                    .await?;
                if !extended {
                    // Its visibility ran out between the receive and here: someone else's now.
                    continue;
                }
                format!("{DURABLE}{bus_receipt}")
            }
            None => {
                let receipt = format!(
                    "{IN_MEMORY}{}",
                    crate::tokens::hex(&rand::random::<[u8; 16]>())
                );
                let held = Held {
                    delivery,
                    token: caller.name.clone(),
                    visible_until: Instant::now() + ITEM_VISIBILITY,
                };
                if let Ok(mut all) = gateway.work.held.lock() {
                    all.insert(receipt.clone(), held);
                }
                receipt
            }
        };
        tracing::info!(token = %caller.name, lease = %item.lease_id, "work item taken");
        return Ok(Json(Taken {
            receipt,
            item,
            visible_until: visible_until(),
            receive_count,
        })
        .into_response());
    }
}

/// What to do with an item by its receipt.
#[derive(Debug, Clone, Copy)]
enum Act {
    Extend,
    Finish,
    Release,
}

/// Does `act` to the item of `receipt`: `Ok(false)` when the receipt does not hold it (409).
async fn by_receipt(
    gateway: &Gateway,
    caller: &Caller,
    receipt: &str,
    act: Act,
) -> Result<bool, ApiError> {
    if let Some(bus_receipt) = receipt.strip_prefix(DURABLE) {
        let receiver = receiver(gateway).await?;
        let action = match act {
            Act::Extend => ReceiptAction::Extend(ITEM_VISIBILITY),
            Act::Finish => ReceiptAction::Ack,
            Act::Release => ReceiptAction::Release,
        };
        return match receiver.settle_receipt(bus_receipt, action).await {
            Ok(done) => Ok(done),
            // A gateway over a bus without durable receipts never made this one.
            Err(messagebus::BusError::Unsupported(_)) => Ok(false),
            Err(e) => Err(e.into()),
        };
    }
    // Decided under the lock; the bus is called after it is let go.
    let settle = {
        let Ok(mut all) = gateway.work.held.lock() else {
            return Ok(false);
        };
        let holds = all
            .get(receipt)
            .is_some_and(|h| h.token == caller.name && h.visible_until > Instant::now());
        if !holds {
            return Ok(false);
        }
        match act {
            Act::Extend => {
                if let Some(held) = all.get_mut(receipt) {
                    held.visible_until = Instant::now() + ITEM_VISIBILITY;
                }
                None
            }
            Act::Finish | Act::Release => all.remove(receipt).map(|h| h.delivery),
        }
    };
    match (act, settle) {
        (Act::Extend, _) => Ok(true),
        (Act::Finish, Some(delivery)) => delivery.ack().await.map(|()| true).map_err(Into::into),
        (Act::Release, Some(delivery)) => {
            delivery.release().await.map(|()| true).map_err(Into::into)
        }
        (_, None) => Ok(false),
    }
}

fn not_held(receipt: &str) -> ApiError {
    let shown: String = receipt.chars().take(80).collect();
    ApiError::Conflict(format!(
        "receipt {shown:?} holds no item: finished, given back, or its visibility ran out (take \
         another with POST /api/v1/work)"
    ))
}

#[utoipa::path(
    post,
    path = "/api/v1/work/{receipt}/extend",
    tag = "researchers",
    description = "Keeps the item invisible to others for another while.",
    params(("receipt" = String, Path, description = "The receipt the item came with")),
    responses(
        (status = 200, description = "Extended", body = Extended),
        (status = 409, description = "The receipt holds no item (any more)", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn extend(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(receipt): Path<String>,
) -> Result<Response, ApiError> {
    present(&gateway, &caller, &headers).await;
    if !by_receipt(&gateway, &caller, &receipt, Act::Extend).await? {
        return Err(not_held(&receipt));
    }
    Ok(Json(Extended {
        visible_until: visible_until(),
    })
    .into_response())
}

#[utoipa::path(
    post,
    path = "/api/v1/work/{receipt}/results",
    tag = "researchers",
    description = "Sends results: CompletedResearchItem JSON lines, each checked before any is sent.",
    params(("receipt" = String, Path, description = "The receipt the item came with")),
    request_body(content = String, content_type = "application/x-ndjson", description = "CompletedResearchItem JSON lines"),
    responses(
        (status = 200, description = "All durably on completed_research", body = Sent),
        (status = 409, description = "The receipt holds no item (any more)", body = ErrorAnswer),
        (status = 422, description = "Lines that break the rules; nothing sent", body = ErrorAnswer),
        (status = 400, description = "Not JSON (the line named), or no message", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 413, description = "The body is over the limit", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn results(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(receipt): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    present(&gateway, &caller, &headers).await;
    let body = lines::read(body, gateway.limits.max_body_bytes).await?;
    let lines = lines::split(&body)?;
    lines::decode_all::<CompletedResearchItem>(&lines, |_| Ok(()))?;
    // Still held (and extended, since its researcher is at work on it).
    if !by_receipt(&gateway, &caller, &receipt, Act::Extend).await? {
        return Err(not_held(&receipt));
    }
    let bodies: Vec<Vec<u8>> = lines.iter().map(|l| l.bytes.to_vec()).collect();
    let sent = bodies.len();
    let queue = gateway.queues.completed_research.clone();
    gateway.sender(2, &queue).await?.send_batch(bodies).await?;
    tracing::debug!(token = %caller.name, sent, "results sent");
    Ok(Json(Sent { sent }).into_response())
}

#[utoipa::path(
    post,
    path = "/api/v1/work/{receipt}/finish",
    tag = "researchers",
    description = "The item is done: acknowledged.",
    params(("receipt" = String, Path, description = "The receipt the item came with")),
    responses(
        (status = 204, description = "Acknowledged"),
        (status = 409, description = "The receipt holds no item (any more)", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn finish(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(receipt): Path<String>,
) -> Result<Response, ApiError> {
    if !by_receipt(&gateway, &caller, &receipt, Act::Finish).await? {
        return Err(not_held(&receipt));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(
    post,
    path = "/api/v1/work/{receipt}/release",
    tag = "researchers",
    description = "Gives the item back for another try, at once.",
    params(("receipt" = String, Path, description = "The receipt the item came with")),
    responses(
        (status = 204, description = "Given back"),
        (status = 409, description = "The receipt holds no item (any more)", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn release(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(receipt): Path<String>,
) -> Result<Response, ApiError> {
    if !by_receipt(&gateway, &caller, &receipt, Act::Release).await? {
        return Err(not_held(&receipt));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// How often the keeper runs (or more often: see [`presence_every`]).
const KEEPER_EVERY: Duration = Duration::from_secs(10);

/// Until `token` is cancelled: gives back deliveries held in memory whose visibility ran out,
/// writes this gateway's own receivers into the presence (so that the work-assignment rule
/// does not count them as researchers), and forgets presence long gone. On the way out, the
/// gateway's presence is removed and what it holds in memory released.
pub(crate) async fn keep(gateway: Arc<Gateway>, token: CancellationToken) {
    let every = KEEPER_EVERY.min(presence_every(gateway.limits.presence_window));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            _ = tick.tick() => {}
        }
        let lapsed: Vec<Delivery> = match gateway.work.held.lock() {
            Ok(mut all) => {
                let now = Instant::now();
                let gone: Vec<String> = all
                    .iter()
                    .filter(|(_, h)| h.visible_until <= now)
                    .map(|(r, _)| r.clone())
                    .collect();
                gone.iter()
                    .filter_map(|r| all.remove(r))
                    .map(|h| h.delivery)
                    .collect()
            }
            Err(_) => Vec::new(),
        };
        for delivery in lapsed {
            if let Err(e) = delivery.release().await {
                tracing::debug!(error = %e, "could not give back a lapsed work item");
            }
        }
        if let Ok(mut written) = gateway.work.written.lock() {
            written.retain(|_, at| at.elapsed() < gateway.limits.presence_window);
        }
        let Ok(access) = gateway.access() else {
            continue;
        };
        let now = Utc::now();
        if gateway.work.has_receiver() {
            if let Err(e) = access
                .touch_presence(&gateway.work.id, PresenceKind::GatewayReceivers, 1, now)
                .await
            {
                tracing::debug!(error = %e, "the gateway's presence could not be written");
            }
        }
        let old = now - chrono::Duration::hours(1);
        if let Err(e) = access.forget_presence(old).await {
            tracing::debug!(error = %e, "old presence could not be forgotten");
        }
    }
    let held: Vec<Delivery> = match gateway.work.held.lock() {
        Ok(mut all) => all.drain().map(|(_, h)| h.delivery).collect(),
        Err(_) => Vec::new(),
    };
    for delivery in held {
        let _ = delivery.release().await;
    }
    if let Ok(access) = gateway.access() {
        let _ = access.leave_presence(&gateway.work.id).await;
    }
}
