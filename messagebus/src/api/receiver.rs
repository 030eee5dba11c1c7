//! The work receiver: `POST /api/v1/work?wait=S`, one item a call; each delivery settled
//! with `…/finish` or `…/release` and extended by its heartbeat (`…/extend`) while held.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client::{Answer, Body};
use super::{Scope, Shared};
use crate::{Acknowledger, BusError, Delivery, Receiver};

/// The shortest time between two heartbeats of one delivery (and the first one's delay when
/// the server's visibility cannot be read).
const MIN_BEAT: Duration = Duration::from_secs(1);

/// The answer to a work request (200).
#[derive(Debug, Deserialize)]
struct Work {
    receipt: String,
    item: serde_json::Value,
    visible_until: String,
    /// How many times the server's bus handed the item out, this time included, where the
    /// server says (the researcher's last-try rule reads it); else 1.
    #[serde(default)]
    receive_count: Option<u32>,
}

/// The answer to an extension (200).
#[derive(Debug, Deserialize)]
struct Extended {
    visible_until: String,
}

/// Takes work items through the API. Each call to [`receive`](Receiver::receive) asks the
/// server for one item, waiting up to the wait asked (in whole seconds, rounded up).
pub struct WorkReceiver {
    shared: Arc<Shared>,
    queue: String,
    /// The slot's name, in each of its requests.
    slot: String,
}

impl WorkReceiver {
    pub(crate) fn new(shared: Arc<Shared>, queue: &str) -> Self {
        WorkReceiver {
            slot: shared.slot_name(),
            shared,
            queue: queue.to_string(),
        }
    }
}

#[async_trait]
impl Receiver for WorkReceiver {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, BusError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let client = &self.shared.client;
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let mut url = client.url(&["work"]);
        url.query_pairs_mut().append_pair("wait", &secs.to_string());
        let what = "taking a work item";
        let timeout = Duration::from_secs(secs) + self.shared.request_timeout();
        let answer = client
            .post(
                url,
                Body::Empty,
                Scope::Researcher,
                Some(&self.slot),
                what,
                timeout,
            )
            .await?;
        match answer.status {
            StatusCode::NO_CONTENT => Ok(Vec::new()),
            StatusCode::OK => {
                let work: Work = answer.json(what)?;
                let until = local_deadline(&answer, &work.visible_until);
                let lease = work
                    .item
                    .get("lease_id")
                    .and_then(|l| l.as_str())
                    .map(str::to_string);
                // The delivery's id: the lease, the same at every delivery of the item (an
                // item without one, poison the researcher sets aside, goes by its receipt).
                let message_id = lease.clone().unwrap_or_else(|| work.receipt.clone());
                let body = serde_json::to_vec(&work.item).map_err(|e| BusError::Rejected {
                    message: format!("{what}: the item cannot be read back ({e})"),
                    source: None,
                })?;
                if let Some(lease) = &lease {
                    self.shared.hold(lease, &work.receipt, &self.slot);
                }
                let stop = CancellationToken::new();
                let item = Item {
                    shared: self.shared.clone(),
                    receipt: work.receipt.clone(),
                    message_id: message_id.clone(),
                    slot: self.slot.clone(),
                };
                tokio::spawn(heartbeat(item.clone(), until, stop.clone()));
                tracing::debug!(lease = %message_id, "work item taken through the API");
                let acker = WorkAck {
                    item,
                    lease,
                    heartbeat: stop,
                };
                Ok(vec![Delivery::new(
                    body,
                    message_id,
                    work.receive_count.unwrap_or(1).max(1),
                    None,
                    Box::new(acker),
                )])
            }
            _ => Err(unexpected(&answer, what)),
        }
    }

    fn queue(&self) -> &str {
        &self.queue
    }
}

/// When the item's visibility ends by this process's clock: the time the server gave, less
/// the server's clock when it answered (its `Date` header: clocks of two machines differ),
/// counted from when the request was sent. `None` when the server's time cannot be read.
fn local_deadline(answer: &Answer, visible_until: &str) -> Instant {
    let Ok(until) = DateTime::parse_from_rfc3339(visible_until) else {
        tracing::warn!(
            visible_until,
            "the server's visible_until is not an RFC 3339 time; extending at once"
        );
        return answer.sent_at;
    };
    let until = until.with_timezone(&Utc);
    // The Date header counts whole seconds: the server's clock may be up to one further.
    let now = answer
        .server_date
        .map(|d| d + chrono::Duration::seconds(1))
        .unwrap_or_else(Utc::now);
    let left = (until - now).to_std().unwrap_or(Duration::ZERO);
    answer.sent_at + left
}

/// What an extension found.
enum Extension {
    /// Held until then (by this process's clock).
    Until(Instant),
    /// No longer held by this receipt (409).
    Gone,
}

/// A work item in hand: what its requests name.
#[derive(Clone)]
struct Item {
    shared: Arc<Shared>,
    receipt: String,
    /// The delivery's id (its lease, where it has one), for logs.
    message_id: String,
    /// The slot holding it.
    slot: String,
}

impl Item {
    /// POSTs to `…/work/{receipt}/{action}`.
    async fn post(&self, action: &str, what: &str) -> Result<Answer, BusError> {
        let client = &self.shared.client;
        let url = client.url(&["work", &self.receipt, action]);
        client
            .post(
                url,
                Body::Empty,
                Scope::Researcher,
                Some(&self.slot),
                what,
                self.shared.request_timeout(),
            )
            .await
    }

    /// Finishes or releases the item (`action`); a 409 passes (see the module's docs).
    async fn settle(&self, action: &str, what: &str) -> Result<(), BusError> {
        let answer = self.post(action, what).await?;
        let lease = &self.message_id;
        match answer.status {
            s if s.is_success() => Ok(()),
            // As a stale delivery on the database bus: nothing to settle, no error.
            StatusCode::CONFLICT if answer.retried => {
                tracing::debug!(lease = %lease, "{what}: the first try landed (its answer was lost)");
                Ok(())
            }
            StatusCode::CONFLICT => {
                tracing::warn!(lease = %lease, "{what}: the item was no longer held by this researcher (HTTP 409: its visibility ran out and it went back to the queue); nothing done");
                Ok(())
            }
            _ => Err(unexpected(&answer, what)),
        }
    }

    /// Extends the item.
    async fn extend(&self) -> Result<Extension, BusError> {
        let what = "extending a work item";
        let answer = self.post("extend", what).await?;
        match answer.status {
            StatusCode::OK => {
                let extended: Extended = answer.json(what)?;
                Ok(Extension::Until(local_deadline(
                    &answer,
                    &extended.visible_until,
                )))
            }
            StatusCode::CONFLICT => Ok(Extension::Gone),
            _ => Err(unexpected(&answer, what)),
        }
    }
}

/// Extends `item` whenever half of its visibility is left, until `stop`.
async fn heartbeat(item: Item, mut until: Instant, stop: CancellationToken) {
    let lease = &item.message_id;
    loop {
        let now = Instant::now();
        let left = until.saturating_duration_since(now);
        let at = now + (left / 2).max(MIN_BEAT);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(at) => {}
        }
        let extended = tokio::select! {
            _ = stop.cancelled() => return,
            r = item.extend() => r,
        };
        match extended {
            Ok(Extension::Until(next)) => until = next,
            Ok(Extension::Gone) => {
                tracing::warn!(lease = %lease, "the work item is no longer held (the server answered 409 to an extension: its visibility ran out and it went back to the queue); it may be researched again elsewhere");
                return;
            }
            // Tried again at the next beat (the server may be restarting: receipts are the
            // bus's, and survive it).
            Err(e) => {
                tracing::warn!(lease = %lease, error = %e, "could not extend the work item; trying again")
            }
        }
    }
}

/// An answer an endpoint does not give, as an error with the server's reason: a failure
/// inside the server (5xx) may pass, and is [`BusError::Unavailable`] (the caller tries again
/// later, as through any outage); anything else is [`BusError::Rejected`].
pub(crate) fn unexpected(answer: &Answer, what: &str) -> BusError {
    let status = answer.status.as_u16();
    if answer.status.is_server_error() {
        return BusError::Unavailable {
            message: format!(
                "{what}: the API server answered HTTP {status} ({})",
                answer.reason()
            ),
            source: None,
        };
    }
    let hint = match answer.status {
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
            "; is the server `archivist serve --api`, of a version with this API (v1)?"
        }
        _ => "",
    };
    BusError::Rejected {
        message: format!(
            "{what}: the API server answered HTTP {status} ({}){hint}",
            answer.reason()
        ),
        source: None,
    }
}

/// A delivery's settlement through the API.
struct WorkAck {
    item: Item,
    /// The item's lease, when it has one (its results go to this receipt).
    lease: Option<String>,
    /// Stops the heartbeat.
    heartbeat: CancellationToken,
}

impl WorkAck {
    /// Stops extending the item and forgets its receipt (its results can no longer be sent).
    fn let_go(&self) {
        self.heartbeat.cancel();
        if let Some(lease) = &self.lease {
            self.item.shared.let_go(lease, &self.item.receipt);
        }
    }

    async fn settle(&self, action: &str, what: &str) -> Result<(), BusError> {
        self.let_go();
        self.item.settle(action, what).await
    }
}

impl Drop for WorkAck {
    fn drop(&mut self) {
        self.let_go();
    }
}

#[async_trait]
impl Acknowledger for WorkAck {
    async fn ack(self: Box<Self>) -> Result<(), BusError> {
        self.settle("finish", "finishing a work item").await
    }

    async fn release(self: Box<Self>) -> Result<(), BusError> {
        self.settle("release", "releasing a work item").await
    }

    /// A release: the API has no dead-letter queue (a researcher must not decide what the
    /// server sets aside). The released item counts one more receive on the server's bus,
    /// which sets it aside in its dead-letter queue past its receive limit, so nothing is
    /// lost; the researcher has already sent the item's unanswered pairs as failed research
    /// on its last try.
    async fn dead_letter(self: Box<Self>, reason: &str) -> Result<(), BusError> {
        tracing::warn!(lease = %self.item.message_id, reason, "the API has no dead-letter queue: the work item is released instead; the server's bus sets it aside past its receive limit");
        self.settle(
            "release",
            "releasing a work item (in place of setting it aside)",
        )
        .await
    }

    fn settled_elsewhere(self: Box<Self>) {
        self.let_go();
    }

    fn abandoned(self: Box<Self>) {
        self.let_go();
        // Outside a runtime nothing can be sent: the visibility brings it back.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let item = self.item.clone();
        let tracker = item.shared.abandoned.clone();
        runtime.spawn(tracker.track_future(async move {
            if let Err(e) = item.settle("release", "releasing a dropped work item").await {
                tracing::debug!(lease = %item.message_id, error = %e, "could not release a dropped work item; it comes back when its visibility runs out");
            }
        }));
    }

    fn stop_heartbeat(&mut self) {
        self.heartbeat.cancel();
    }
}
