//! The API bus (feature `api`): [`ApiBus`], a remote participant's bus, through the HTTPS API
//! of `archivist serve --api` (the contract's *The API*) instead of the bus itself, so that a
//! researcher or a curator anywhere needs a token and no bus or database credentials. The
//! researcher runtime and the curators use it as any other bus; what the API cannot do is a
//! [`BusError::Unsupported`] that says so.
//!
//! # What each queue is
//!
//! - The pending-research queue: a [`Receiver`] whose `receive` is `POST /api/v1/work?wait=S`
//!   (one item a call, however many are asked for; 204: none within the wait). The item's
//!   receipt stays with its [`Delivery`](crate::Delivery): `ack` is `…/work/{receipt}/finish`, `release` is
//!   `…/release`, and `dead_letter` is a release too (the API has no dead-letter queue: a
//!   released item counts one more receive on the server's bus, which sets it aside itself past
//!   its receive limit, so nothing is lost). While a delivery is held a heartbeat extends it
//!   (`…/extend`) when half of its visibility (`visible_until`) is left. A 409 (the item is no
//!   longer held by that receipt: its visibility ran out and it went back to the queue) is not
//!   tried again: the heartbeat stops; `ack` and `release` let it pass with a warning, as a
//!   stale delivery passes on the database bus.
//! - The completed-research queue: a [`Sender`] that posts results to
//!   `…/work/{receipt}/results`, the receipt of the work item they answer. Results name their
//!   lease (`lease_id`), and so do work items: the bus's receivers and senders share a map
//!   from lease to the receipts held for it, filled at each receive and emptied at each
//!   settlement. A result for a lease with no item in hand cannot be sent (the API takes
//!   results only with a receipt): [`BusError::Rejected`].
//! - The curated queues (episodes, clips): a [`Sender`] posting to `POST /api/v1/episodes` or
//!   `/clips`, a batch as JSON lines in one request (cut into several past
//!   [`MAX_REQUEST_LINES`] or [`MAX_REQUEST_BYTES`], and halved when the server answers 413).
//!
//! Each receiver is one slot of a researcher, and names itself in every request it makes
//! (the header `X-Archivist-Researcher`: a random name for the process and the slot's
//! number), so that the server counts each slot as one researcher for the work-assignment
//! rule, as the buses that count consumers count a local researcher's receivers.
//!
//! # The server's holdings
//!
//! A remote researcher also reads the server's media archive (kept copies by range, an
//! episode's versions) and print store through the API, and gives back the copies and
//! prints it makes: [`ApiArchive`] is an `archive::MediaArchive`, [`ApiPrintStore`] a
//! `prints::PrintStore`, each over the API's `/api/v1/archive/…` and `/api/v1/prints/…`
//! with the researcher's token; [`ApiHoldings::offered`] says which the server has.
//!
//! # Errors
//!
//! Connection errors, timeouts, and 429/5xx answers are tried again with a doubling backoff,
//! a bounded number of times ([`ApiConfig::attempts`]), then [`BusError::Unavailable`] (which
//! callers retry as they retry any bus outage). 401 and 403 are [`BusError::Unauthorized`],
//! naming the scope the request needs (`curator`, `researcher`). 422 is
//! [`BusError::InvalidBody`] with the server's reason for each bad line. The token is never in
//! an error, a log or a `Debug` output ([`ApiToken`] masks it).
//!
//! # What a lost answer does
//!
//! A request whose answer was lost is tried again. Sending results or curated messages twice
//! is harmless (recording and upserts are idempotent). A `finish` or `release` whose answer
//! was lost and whose retry finds the item gone (409) landed the first time. A work request
//! whose answer was lost (or whose future was dropped, at shutdown) may have taken an item on
//! the server: that item comes back when its visibility runs out, as a crashed researcher's does.
//!
//! # Layout
//!
//! - `client.rs`: the HTTP requests, the retries, the answers all endpoints share.
//! - `reader.rs`: [`ApiReader`], a reader's requests (the status, the matches).
//! - `holdings.rs`: the server's media archive and print store for a remote researcher:
//!   [`ApiArchive`], [`ApiPrintStore`], and what the server offers ([`ApiHoldings`]).
//! - `receiver.rs`: the work receiver, its deliveries, their heartbeat.
//! - `sender.rs`: the results sender and the curated queues' sender.
//! - `fake.rs` (feature `api-fake`): a fake gateway for tests.

mod client;
#[cfg(feature = "api-fake")]
pub mod fake;
mod holdings;
mod reader;
mod receiver;
mod sender;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use crate::{Bus, BusError, Receiver, Sender};

pub use holdings::{ApiArchive, ApiHoldings, ApiPrintStore, Offer};
pub use reader::{ApiReader, MatchesQuery};
pub use receiver::WorkReceiver;
pub use sender::{CuratedSender, ResultsSender};

/// The most lines in one request of a curated sender or a results sender.
pub const MAX_REQUEST_LINES: usize = 500;
/// The most bytes of lines in one request (a single larger line goes alone).
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// Installs the TLS crypto provider reqwest uses (aws-lc-rs, as the rest of archivist); a
/// second call changes nothing.
fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// An API token: `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

impl ApiToken {
    /// A token, as `archivist token create` printed it (blanks around it taken off).
    pub fn new(token: impl Into<String>) -> Self {
        ApiToken(token.into().trim().to_string())
    }

    /// The token itself, for the `Authorization` header only.
    fn secret(&self) -> &str {
        &self.0
    }

    /// Whether the token is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(***)")
    }
}

impl fmt::Display for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A token's scope, as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Sends episodes and clips.
    Curator,
    /// Takes work items and sends results.
    Researcher,
    /// Reads the status and the matches.
    Reader,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Curator => "curator",
            Scope::Researcher => "researcher",
            Scope::Reader => "reader",
        })
    }
}

/// The queue names the API's endpoints stand for: the names the participant's configuration
/// gives the four queues (the server's own names may differ; the API does not name them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiQueues {
    /// Curated episodes: `POST /api/v1/episodes`.
    pub episodes: String,
    /// Curated clips: `POST /api/v1/clips`.
    pub clips: String,
    /// Work items: `POST /api/v1/work`.
    pub pending_research: String,
    /// Results: `POST /api/v1/work/{receipt}/results`.
    pub completed_research: String,
}

impl Default for ApiQueues {
    fn default() -> Self {
        ApiQueues {
            episodes: "curated_episodes".into(),
            clips: "curated_clips".into(),
            pending_research: "pending_research".into(),
            completed_research: "completed_research".into(),
        }
    }
}

/// Settings of an [`ApiBus`].
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The server: the address of `archivist serve --api` (`https://host[:port][/prefix]`);
    /// `/api/v1/` is appended unless it ends with it.
    pub server: String,
    /// The token, of the scope the participant needs.
    pub token: ApiToken,
    /// The queue names the endpoints stand for.
    pub queues: ApiQueues,
    /// The longest wait to connect.
    pub connect_timeout: Duration,
    /// The longest wait for one answer (a work request: its wait, and this).
    pub request_timeout: Duration,
    /// Tries of one request through connection errors and overloaded answers (at least 1).
    pub attempts: u32,
    /// The wait after the first failed try; doubled after each, up to `max_backoff`.
    pub first_backoff: Duration,
    /// The longest wait between two tries.
    pub max_backoff: Duration,
    /// A PEM file of certificate authorities trusted for the server beside the system's
    /// (`--ca-cert`, `ARCHIVIST_CA_CERT`): a server with a certificate of a private CA.
    pub ca_cert: Option<std::path::PathBuf>,
}

impl ApiConfig {
    /// Settings for `server` with `token`, the default queue names and timings.
    pub fn new(server: impl Into<String>, token: ApiToken) -> Self {
        ApiConfig {
            server: server.into(),
            token,
            queues: ApiQueues::default(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            attempts: 5,
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            ca_cert: None,
        }
    }
}

/// What the bus, its receivers, senders and deliveries share.
pub(crate) struct Shared {
    pub(crate) client: client::Client,
    pub(crate) queues: ApiQueues,
    /// Per lease, the receipts of the work items in hand for it, each with the name of the
    /// slot holding it (usually one; a second when the server handed the item out again while
    /// an earlier holder still works on it). The results sender posts a lease's results to its
    /// latest receipt.
    receipts: Mutex<HashMap<String, Vec<Held>>>,
    /// This bus's researchers' names start with this (random: one process's slots).
    pub(crate) name: String,
    /// Receivers made so far (each slot's name ends with its number).
    receivers: std::sync::atomic::AtomicU64,
    /// Releases of deliveries dropped unsettled, which [`Bus::close`] waits for.
    pub(crate) abandoned: tokio_util::task::TaskTracker,
}

/// A work item in hand: its receipt, and the slot holding it.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) receipt: String,
    pub(crate) slot: String,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Held>>> {
        self.receipts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A name for a new slot (receiver), for the server's count of researchers.
    pub(crate) fn slot_name(&self) -> String {
        let n = self
            .receivers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}-{n}", self.name)
    }

    /// A work item for `lease` is in hand with `receipt`, held by `slot`.
    pub(crate) fn hold(&self, lease: &str, receipt: &str, slot: &str) {
        self.lock()
            .entry(lease.to_string())
            .or_default()
            .push(Held {
                receipt: receipt.to_string(),
                slot: slot.to_string(),
            });
    }

    /// The work item of `lease` with `receipt` is no longer in hand.
    pub(crate) fn let_go(&self, lease: &str, receipt: &str) {
        let mut map = self.lock();
        if let Some(held) = map.get_mut(lease) {
            held.retain(|h| h.receipt != receipt);
            if held.is_empty() {
                map.remove(lease);
            }
        }
    }

    /// The longest wait for one answer.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.client.request_timeout()
    }

    /// The receipt a result for `lease` goes to: the latest item in hand for it.
    pub(crate) fn receipt_of(&self, lease: &str) -> Option<Held> {
        self.lock().get(lease).and_then(|r| r.last().cloned())
    }
}

/// A bus through the API of `archivist serve --api`. Cloning is cheap; clones share the
/// HTTP connections and the receipts of the items in hand.
#[derive(Clone)]
pub struct ApiBus {
    shared: Arc<Shared>,
}

impl fmt::Debug for ApiBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiBus")
            .field("client", &self.shared.client)
            .finish()
    }
}

impl ApiBus {
    /// A bus through the API at `config.server`. Connects to nothing yet; a server address
    /// that is not an http(s) URL is [`BusError::Rejected`].
    pub fn new(config: ApiConfig) -> Result<ApiBus, BusError> {
        let client = client::Client::new(&config)?;
        Ok(ApiBus {
            shared: Arc::new(Shared {
                client,
                queues: config.queues,
                receipts: Mutex::new(HashMap::new()),
                name: format!("{:016x}", rand::random::<u64>()),
                receivers: std::sync::atomic::AtomicU64::new(0),
                abandoned: tokio_util::task::TaskTracker::new(),
            }),
        })
    }

    /// The server as messages show it (credentials in its URL masked).
    pub fn server(&self) -> &str {
        &self.shared.client.shown
    }

    /// Checks that an archivist API answers at the server: its OpenAPI document
    /// (`GET /api/v1/openapi.json`, no token needed). Connection errors are
    /// [`BusError::Unavailable`] after the configured tries; an answer that is no archivist
    /// API's is [`BusError::Rejected`]. The token is not checked (the API has no request
    /// every scope may make): the first request of the participant's scope does that.
    pub async fn probe(&self) -> Result<(), BusError> {
        let client = &self.shared.client;
        let url = client.url(&["openapi.json"]);
        let answer = client.get_public(url, "reaching the API").await?;
        if answer.status.is_success() {
            return Ok(());
        }
        Err(BusError::Rejected {
            message: format!(
                "no archivist API at {}: GET /api/v1/openapi.json answered HTTP {} ({}); is it \
                 `archivist serve --api`, and is the address the server's own (a reverse \
                 proxy's path prefix included)?",
                client.shown,
                answer.status.as_u16(),
                answer.reason()
            ),
            source: None,
        })
    }

    fn unsupported_queue(&self, queue: &str, role: &str) -> BusError {
        let q = &self.shared.queues;
        BusError::Unsupported(format!(
            "the API cannot {role} queue {queue:?}: a remote participant sends to {} and {} \
             (curators) and {} (researchers), and receives from {} (researchers) only",
            q.episodes, q.clips, q.completed_research, q.pending_research
        ))
    }
}

#[async_trait]
impl Bus for ApiBus {
    async fn sender(&self, queue: &str) -> Result<Arc<dyn Sender>, BusError> {
        let q = &self.shared.queues;
        if queue == q.completed_research {
            return Ok(Arc::new(ResultsSender::new(self.shared.clone(), queue)));
        }
        let endpoint = if queue == q.episodes {
            "episodes"
        } else if queue == q.clips {
            "clips"
        } else {
            return Err(self.unsupported_queue(queue, "send to"));
        };
        Ok(Arc::new(CuratedSender::new(
            self.shared.clone(),
            queue,
            endpoint,
        )))
    }

    async fn receiver(&self, queue: &str) -> Result<Arc<dyn Receiver>, BusError> {
        if queue == self.shared.queues.pending_research {
            return Ok(Arc::new(WorkReceiver::new(self.shared.clone(), queue)));
        }
        Err(self.unsupported_queue(queue, "receive from"))
    }

    /// The server's queues exist on the server: harmless for the four the API stands for.
    async fn create_queue(&self, queue: &str) -> Result<(), BusError> {
        let q = &self.shared.queues;
        if [
            &q.episodes,
            &q.clips,
            &q.pending_research,
            &q.completed_research,
        ]
        .contains(&&queue.to_string())
        {
            return Ok(());
        }
        Err(BusError::Unsupported(format!(
            "the API cannot create queues ({queue:?}): the server's administrator does, with \
             `archivist queues`"
        )))
    }

    async fn redrive(&self, queue: &str, _max: u64) -> Result<u64, BusError> {
        Err(BusError::Unsupported(format!(
            "the API cannot redrive dead letters ({queue:?}): run `archivist redrive` where \
             the bus is"
        )))
    }

    async fn redrivable(&self, queue: &str) -> Result<u64, BusError> {
        Err(BusError::Unsupported(format!(
            "the API does not show dead letters ({queue:?}): run `archivist queues` where the \
             bus is"
        )))
    }

    /// Waits for the releases of deliveries dropped unsettled.
    async fn close(&self) -> Result<(), BusError> {
        let tracker = &self.shared.abandoned;
        tracker.close();
        tracker.wait().await;
        tracker.reopen();
        Ok(())
    }
}

/// The error of a Sender method the API has no request for.
pub(crate) fn no_inspect(queue: &str) -> BusError {
    BusError::Unsupported(format!(
        "the API does not show queue {queue:?}'s depths or dead letters: the server's status \
         does (`GET /api/v1/status` with a reader token, or the status page)"
    ))
}
