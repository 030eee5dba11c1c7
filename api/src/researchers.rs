//! Researchers' endpoints: take a work item (a long poll), extend it, send its results,
//! finish it or give it back — each by the receipt the item came with.
//!
//! A receipt is 128 random bits, made by the gateway whatever the bus; only its hash is kept,
//! in the datastore ([`datastore::HeldItem`]), with the token that took the item, what the
//! item names (its lease, episode and clips) and the bus's own durable receipt where the bus
//! has one (the database bus, SQS), so that it outlives the gateway: a researcher carries on
//! after a restart. On the other buses (in-memory, RabbitMQ) the delivery stays in this
//! gateway's memory, and a restart loses it (the item comes back when the bus's own visibility
//! or connection runs out).
//!
//! A receipt acts only for the token that took it, and results sent with it must name its
//! item's lease, episode and clips. A receipt of another token, a guessed one, a finished one
//! and one whose visibility ran out get the same 409.
//!
//! The item stays invisible to others for [`ITEM_VISIBILITY`] after it is taken and after
//! each extension: a researcher that goes away without a word gives its item back when that
//! runs out. A token revoked while it polls or holds items has its polls ended (401) and its
//! items given back within [`Limits::revocation_check`](crate::Limits::revocation_check).

use std::sync::Arc;
use std::time::{Duration, Instant};

use archivist::messages::{self, CompletedResearchItem, PendingResearchItem};
use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use datastore::{HeldItem, PresenceKind};
use messagebus::{Delivery, ReceiptAction, Receiver};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::auth::Caller;
use crate::error::ErrorAnswer;
use crate::held::{InMemory, Names};
use crate::state::{Gateway, SendTo};
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
/// address and token); otherwise it is its token and address. A token counts as at most its
/// `max_researchers` however many names it sends.
pub const RESEARCHER_HEADER: &str = "x-archivist-researcher";

/// A held item not seen (taken or extended) for this long has long lost its visibility: its
/// record is forgotten.
const HELD_FORGOTTEN_AFTER: Duration = Duration::from_secs(600);

/// How often an extended item's record is written again (far within
/// [`HELD_FORGOTTEN_AFTER`]).
const HELD_SEEN_EVERY: Duration = Duration::from_secs(60);

/// A new receipt: 128 random bits from the operating system's generator, as hex.
fn new_receipt() -> String {
    let mut bits = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut bits);
    crate::tokens::hex(&bits)
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

/// The presence row of `token`'s researchers as this gateway sees them.
fn presence_id(gateway: &Gateway, token: &str) -> String {
    format!("researcher:{token}:{}", gateway.work.id)
}

/// Notes that `caller` is there: the token's presence counts the researchers seen behind it,
/// at most its `max_researchers`, written when the count changes or every [`PRESENCE_EVERY`].
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
    let window = gateway.limits.presence_window;
    let Some(count) = gateway.work.seen(
        &caller.name,
        &who,
        caller.max_researchers,
        window,
        presence_every(window),
    ) else {
        return;
    };
    let Ok(access) = gateway.access() else { return };
    let id = presence_id(gateway, &caller.name);
    if let Err(e) = access
        .touch_presence(&id, PresenceKind::Researcher, count, Utc::now())
        .await
    {
        tracing::debug!(error = %e, "a researcher's presence could not be written");
    }
}

/// `?wait=SECONDS`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WaitQuery {
    /// The longest to wait for an item, in seconds from 0 (the server waits at most its
    /// maximum, 20 s).
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

/// `?wait=`, range-checked before it becomes a duration: at most the server's maximum, and
/// a third of the presence window (a researcher shows it is there with each request).
fn wait_of(query: &WaitQuery, limits: &crate::Limits) -> Result<Duration, ApiError> {
    let most = limits.max_wait.min(limits.presence_window / 3);
    match query.wait {
        None => Ok(Duration::ZERO),
        Some(w) if w.is_finite() && w >= 0.0 => {
            Ok(Duration::from_secs_f64(w.min(most.as_secs_f64())))
        }
        Some(_) => Err(ApiError::BadRequest(
            "wait: a number of seconds from 0 is needed".into(),
        )),
    }
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
        (status = 400, description = "A wait that is not a number of seconds from 0", body = ErrorAnswer),
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
    let wait = wait_of(&query, &gateway.limits)?;
    let Ok(_slot) = gateway.long_polls.clone().try_acquire_owned() else {
        return Err(ApiError::Unavailable(
            "too many researchers are waiting for work at once: try again in a moment".into(),
        ));
    };
    present(&gateway, &caller, &headers).await;
    let receiver = receiver(&gateway).await?;
    let poll = gateway.work.poll(&caller.name);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // One receive for the whole wait (a receive on the database bus claims with a write:
        // no slices of it for idle polls), ended by the token's revocation. A receive ended
        // mid-claim leaves its message for the bus's visibility timeout: delayed, not lost.
        let received = tokio::select! {
            biased;
            _ = poll.cancel.cancelled() => {
                tracing::info!(token = %caller.name, "a revoked token's poll ended");
                return Err(ApiError::Unauthorized);
            }
            received = receiver.receive(1, left) => received?,
        };
        let Some(delivery) = received.into_iter().next() else {
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
        // The token may have been revoked while this poll waited: checked again with the
        // item in hand, which goes straight back if so.
        if poll.cancel.is_cancelled() || !still_valid(&gateway, &caller).await? {
            delivery.release().await?;
            tracing::info!(token = %caller.name, "a revoked token's poll ended; its item given back");
            return Err(ApiError::Unauthorized);
        }
        if let Some(taken) = hold(&gateway, &caller, &receiver, item, delivery).await? {
            return Ok(Json(taken).into_response());
        }
    }
}

/// Whether `caller`'s token is still in force.
async fn still_valid(gateway: &Gateway, caller: &Caller) -> Result<bool, ApiError> {
    Ok(gateway
        .access()?
        .use_token(&caller.hash, Utc::now())
        .await?
        .is_some())
}

/// Makes `delivery` held by `caller` under a new receipt: `None` when its visibility ran out
/// before it could be extended (someone else's now).
async fn hold(
    gateway: &Gateway,
    caller: &Caller,
    receiver: &Arc<dyn Receiver>,
    item: PendingResearchItem,
    delivery: Delivery,
) -> Result<Option<Taken>, ApiError> {
    let receipt = new_receipt();
    let receipt_hash = crate::tokens::hash(&receipt);
    let receive_count = delivery.receive_count();
    let names = serde_json::to_string(&Names::of(&item))
        .map_err(|e| ApiError::Unavailable(format!("a work item could not be kept: {e}")))?;
    let bus_receipt = delivery.durable_receipt();
    let in_memory = match &bus_receipt {
        Some(bus_receipt) => {
            delivery.let_expire();
            let extended = receiver
                .settle_receipt(bus_receipt, ReceiptAction::Extend(ITEM_VISIBILITY))
                .await?;
            if !extended {
                return Ok(None);
            }
            None
        }
        None => Some(delivery),
    };
    let held = HeldItem {
        receipt_hash: receipt_hash.clone(),
        token: caller.name.clone(),
        bus_receipt: bus_receipt.clone(),
        item: names,
        seen_at: Utc::now(),
    };
    if let Err(e) = gateway.access()?.hold_item(&held).await {
        // Not kept: nobody could act on it, so it goes back at once.
        match (in_memory, &bus_receipt) {
            (Some(delivery), _) => delivery.release().await?,
            (None, Some(bus_receipt)) => {
                receiver
                    .settle_receipt(bus_receipt, ReceiptAction::Release)
                    .await?;
            }
            (None, None) => {}
        }
        return Err(e.into());
    }
    if let Some(delivery) = in_memory {
        if let Ok(mut all) = gateway.work.in_memory.lock() {
            all.insert(
                receipt_hash,
                InMemory {
                    delivery,
                    visible_until: Instant::now() + ITEM_VISIBILITY,
                },
            );
        }
    }
    if let Ok(mut takers) = gateway.work.takers.lock() {
        takers.insert(caller.name.clone());
    }
    tracing::info!(token = %caller.name, lease = %item.lease_id, "work item taken");
    Ok(Some(Taken {
        receipt,
        item,
        visible_until: visible_until(),
        receive_count,
    }))
}

/// What to do with an item by its receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Extend,
    Finish,
    Release,
}

/// The item `receipt` holds for `caller`, if it holds one for this token (the same answer,
/// `None`, for a receipt of another token and for an unknown one).
async fn held_for(
    gateway: &Gateway,
    caller: &Caller,
    receipt: &str,
) -> Result<Option<HeldItem>, ApiError> {
    let held = gateway
        .access()?
        .held_item(&crate::tokens::hash(receipt))
        .await?;
    Ok(held.filter(|h| h.token == caller.name))
}

/// Does `act` to `held` on the bus (or in memory): `false` when the item is no longer held
/// (its visibility ran out), and then its record goes.
async fn settle(gateway: &Gateway, held: &HeldItem, act: Act) -> Result<bool, ApiError> {
    let access = gateway.access()?;
    let done = match &held.bus_receipt {
        Some(bus_receipt) => {
            let action = match act {
                Act::Extend => ReceiptAction::Extend(ITEM_VISIBILITY),
                Act::Finish => ReceiptAction::Ack,
                Act::Release => ReceiptAction::Release,
            };
            match receiver(gateway)
                .await?
                .settle_receipt(bus_receipt, action)
                .await
            {
                Ok(done) => done,
                // Kept by a gateway over another bus: nothing this one can settle.
                Err(messagebus::BusError::Unsupported(_)) => false,
                Err(e) => return Err(e.into()),
            }
        }
        None => settle_in_memory(gateway, &held.receipt_hash, act).await?,
    };
    if done && act == Act::Extend {
        // The record's time only keeps it from being forgotten: written again at most every
        // [`HELD_SEEN_EVERY`], not with each of an item's results.
        let now = Utc::now();
        let every = chrono::Duration::from_std(HELD_SEEN_EVERY).unwrap_or_default();
        if now - held.seen_at >= every {
            let seen = HeldItem {
                seen_at: now,
                ..held.clone()
            };
            access.hold_item(&seen).await?;
        }
    } else {
        access.drop_held(&held.receipt_hash).await?;
    }
    Ok(done)
}

/// [`settle`] for a delivery held in this gateway's memory.
async fn settle_in_memory(
    gateway: &Gateway,
    receipt_hash: &str,
    act: Act,
) -> Result<bool, ApiError> {
    // Decided under the lock; the bus is called after it is let go.
    let delivery = {
        let Ok(mut all) = gateway.work.in_memory.lock() else {
            return Ok(false);
        };
        let now = Instant::now();
        match all.get_mut(receipt_hash) {
            Some(held) if held.visible_until > now => {
                if act == Act::Extend {
                    held.visible_until = now + ITEM_VISIBILITY;
                    return Ok(true);
                }
            }
            _ => return Ok(false),
        }
        all.remove(receipt_hash).map(|h| h.delivery)
    };
    match (act, delivery) {
        (Act::Finish, Some(delivery)) => delivery.ack().await?,
        (Act::Release, Some(delivery)) => delivery.release().await?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Does `act` to the item of `receipt` for `caller`; 409 when the receipt holds none for it.
async fn by_receipt(
    gateway: &Gateway,
    caller: &Caller,
    receipt: &str,
    act: Act,
) -> Result<HeldItem, ApiError> {
    let Some(held) = held_for(gateway, caller, receipt).await? else {
        return Err(not_held());
    };
    if settle(gateway, &held, act).await? {
        Ok(held)
    } else {
        Err(not_held())
    }
}

fn not_held() -> ApiError {
    ApiError::Conflict(
        "this receipt holds no item of yours: finished, given back, or its visibility ran out \
         (take another with POST /api/v1/work)"
            .into(),
    )
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
    by_receipt(&gateway, &caller, &receipt, Act::Extend).await?;
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
        (status = 422, description = "Lines that break the rules or name another item's lease, episode or clips; nothing sent", body = ErrorAnswer),
        (status = 400, description = "Not JSON (the line named), or no message", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 413, description = "The body is over the limit, or holds more lines than the item has clips", body = ErrorAnswer),
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
    // The body is read within its limit (so that the connection stays usable), then the
    // receipt is checked: lines are split and decoded only for an item this token holds.
    let body = lines::read(body, gateway.limits.max_body_bytes).await?;
    let Some(held) = held_for(&gateway, &caller, &receipt).await? else {
        return Err(not_held());
    };
    let names: Names = serde_json::from_str(&held.item)
        .map_err(|e| ApiError::Unavailable(format!("a held item could not be read: {e}")))?;
    let lines = lines::split(&body, names.clip_count().max(1))?;
    lines::decode_all::<CompletedResearchItem>(&lines, |result| {
        names.refuses(result).map_or(Ok(()), Err)
    })?;
    // Still held (and extended, since its researcher is at work on it).
    if !settle(&gateway, &held, Act::Extend).await? {
        return Err(not_held());
    }
    let bodies: Vec<Vec<u8>> = lines.iter().map(|l| l.bytes.to_vec()).collect();
    let sent = bodies.len();
    gateway
        .sender(SendTo::CompletedResearch)
        .await?
        .send_batch(bodies)
        .await?;
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
    by_receipt(&gateway, &caller, &receipt, Act::Finish).await?;
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
    by_receipt(&gateway, &caller, &receipt, Act::Release).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// How often the keeper does its slower rounds (or more often: see [`presence_every`]).
const KEEPER_EVERY: Duration = Duration::from_secs(10);

/// Ends the polls of every watched token no longer in force and gives back what it holds.
async fn end_revoked(gateway: &Gateway) -> Result<(), ApiError> {
    let watched = gateway.work.watched();
    if watched.is_empty() {
        return Ok(());
    }
    let access = gateway.access()?;
    let in_force: std::collections::HashSet<String> =
        access.tokens().await?.into_iter().map(|t| t.name).collect();
    for name in watched.difference(&in_force) {
        let polls = gateway.work.end_polls(name);
        let mut given_back = 0;
        for held in access.held_by(name).await? {
            if settle(gateway, &held, Act::Release).await? {
                given_back += 1;
            }
        }
        if let Ok(mut takers) = gateway.work.takers.lock() {
            takers.remove(name);
        }
        if let Ok(mut seen) = gateway.work.seen.lock() {
            seen.remove(name);
        }
        access.leave_presence(&presence_id(gateway, name)).await?;
        tracing::info!(token = %name, polls, given_back, "token revoked: its polls ended and its items given back");
    }
    Ok(())
}

/// Gives back deliveries held in memory whose visibility ran out, and forgets their records
/// and those of items long unseen.
async fn give_back_lapsed(gateway: &Gateway) -> Result<(), ApiError> {
    let lapsed: Vec<(String, Delivery)> = match gateway.work.in_memory.lock() {
        Ok(mut all) => {
            let now = Instant::now();
            let gone: Vec<String> = all
                .iter()
                .filter(|(_, h)| h.visible_until <= now)
                .map(|(r, _)| r.clone())
                .collect();
            gone.into_iter()
                .filter_map(|r| all.remove(&r).map(|h| (r, h.delivery)))
                .collect()
        }
        Err(_) => Vec::new(),
    };
    let access = gateway.access()?;
    for (receipt_hash, delivery) in lapsed {
        if let Err(e) = delivery.release().await {
            tracing::debug!(error = %e, "could not give back a lapsed work item");
        }
        access.drop_held(&receipt_hash).await?;
    }
    let old = Utc::now() - chrono::Duration::from_std(HELD_FORGOTTEN_AFTER).unwrap_or_default();
    access.forget_held(old).await?;
    Ok(())
}

/// Writes this gateway's own receivers into the presence (so that the work-assignment rule
/// does not count them as researchers), and forgets presence long gone.
async fn keep_presence(gateway: &Gateway) -> Result<(), ApiError> {
    if let Ok(mut seen) = gateway.work.seen.lock() {
        let window = gateway.limits.presence_window;
        seen.retain(|_, s| s.who.values().any(|at| at.elapsed() < window));
    }
    let access = gateway.access()?;
    let now = Utc::now();
    if gateway.work.has_receiver() {
        access
            .touch_presence(&gateway.work.id, PresenceKind::GatewayReceivers, 1, now)
            .await?;
    }
    access
        .forget_presence(now - chrono::Duration::hours(1))
        .await?;
    Ok(())
}

/// Until `token` is cancelled: ends revoked tokens' polls and gives back what they hold (every
/// [`Limits::revocation_check`](crate::Limits::revocation_check)), gives back lapsed
/// deliveries and keeps the presence (every [`KEEPER_EVERY`] or sooner). On the way out, the
/// gateway's presence is removed and what it holds in memory released.
pub(crate) async fn keep(gateway: Arc<Gateway>, token: CancellationToken) {
    let every = KEEPER_EVERY.min(presence_every(gateway.limits.presence_window));
    let mut slow = tokio::time::interval(every);
    slow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut fast = tokio::time::interval(
        gateway
            .limits
            .revocation_check
            .max(Duration::from_millis(10)),
    );
    fast.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            _ = fast.tick() => {
                if let Err(e) = end_revoked(&gateway).await {
                    tracing::debug!(error = %e, "revoked tokens could not be checked");
                }
            }
            _ = slow.tick() => {
                if let Err(e) = give_back_lapsed(&gateway).await {
                    tracing::debug!(error = %e, "lapsed work items could not be given back");
                }
                if let Err(e) = keep_presence(&gateway).await {
                    tracing::debug!(error = %e, "the presence could not be kept");
                }
            }
        }
    }
    let held: Vec<(String, Delivery)> = match gateway.work.in_memory.lock() {
        Ok(mut all) => all.drain().map(|(r, h)| (r, h.delivery)).collect(),
        Err(_) => Vec::new(),
    };
    let access = gateway.access().ok();
    for (receipt_hash, delivery) in held {
        let _ = delivery.release().await;
        if let Some(access) = access {
            let _ = access.drop_held(&receipt_hash).await;
        }
    }
    if let Some(access) = access {
        let _ = access.leave_presence(&gateway.work.id).await;
        let names: Vec<String> = gateway
            .work
            .seen
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default();
        for name in names {
            let _ = access.leave_presence(&presence_id(&gateway, &name)).await;
        }
    }
}
