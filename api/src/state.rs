//! [`Gateway`]: what every API handler shares (the datastore, the bus, the limits, what it
//! holds for researchers). The routes are in `gateway.rs`, the handlers each in a file of
//! their own; all of them read this, and this reads none of them.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datastore::{ApiAccess, DataStore};
use messagebus::{Bus, Sender};
use tokio::sync::{OnceCell, Semaphore};

use crate::held::Work;
use crate::limiter::{Buckets, Limiter};
use crate::ApiError;

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
    /// The most JSON lines in one request body (413 past it); results take at most as many
    /// lines as their item has clips.
    pub max_lines: usize,
    /// The longest a long poll waits, whatever the client asks.
    pub max_wait: Duration,
    /// Long polls waiting at once (503 past it).
    pub max_long_polls: usize,
    /// Failed attempts (an unknown or revoked token, a token of the wrong scope) one
    /// credential may make at once; one more comes back every `failure_window /
    /// max_failures`. Keyed on the credential, never on the address: clients behind one NAT
    /// do not lock each other out.
    pub max_failures: u32,
    /// See `max_failures`.
    pub failure_window: Duration,
    /// Requests a token may make in a burst; refilled at this many a second.
    pub requests_per_second: u32,
    /// Trust `X-Forwarded-For` for the client's address (behind a reverse proxy only): the
    /// right-most address not of a trusted proxy (the connection's peer and loopback).
    pub trust_proxy: bool,
    /// A researcher counts for the work-assignment rule while it was seen within this long
    /// (the same window every archivist's `pending-research` reads presence with); the
    /// gateway writes presence well within it.
    pub presence_window: Duration,
    /// How often the gateway looks for tokens revoked elsewhere (`archivist token revoke`
    /// writes the datastore) to end their polls and give back what they hold.
    pub revocation_check: Duration,
    /// The largest copy a researcher may give the media archive
    /// (`PUT /api/v1/archive/media/{sha256}`), in bytes (413 past it): by default the
    /// researcher's own `--max-media-size`.
    pub max_media_bytes: u64,
    /// The largest print a researcher may give the print store (`PUT /api/v1/prints/{key}`),
    /// in bytes, its envelope included (413 past it).
    pub max_print_bytes: usize,
}

/// [`Limits::max_media_bytes`] unless set: 2 GiB, the researcher's `--max-media-size`.
pub const DEFAULT_MAX_MEDIA_BYTES: u64 = 2 << 30;

/// [`Limits::max_print_bytes`] unless set: 64 MiB, some sixty hours of audio at the
/// analyser's target of at most 1 MB of print an hour.
pub const DEFAULT_MAX_PRINT_BYTES: usize = 64 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 16 * 1024 * 1024,
            max_lines: 10_000,
            max_wait: Duration::from_secs(20),
            max_long_polls: 1024,
            max_failures: 20,
            failure_window: Duration::from_secs(60),
            requests_per_second: 200,
            trust_proxy: false,
            presence_window: datastore::PRESENCE_WINDOW,
            revocation_check: Duration::from_secs(1),
            max_media_bytes: DEFAULT_MAX_MEDIA_BYTES,
            max_print_bytes: DEFAULT_MAX_PRINT_BYTES,
        }
    }
}

/// What the server keeps for its researchers, each offered to them through the API when
/// given: its media archive (`/api/v1/archive/…`) and its print store (`/api/v1/prints/…`).
#[derive(Debug, Clone, Default)]
pub struct Holdings {
    /// The media archive (`serve --media-archive`).
    pub archive: Option<Arc<dyn archive::MediaArchive>>,
    /// The print store (`serve --print-store`).
    pub prints: Option<Arc<dyn prints::PrintStore>>,
    /// Where a copy being given is written before the archive keeps it [default: the
    /// system's temporary directory].
    pub upload_dir: Option<PathBuf>,
}

/// The API gateway: build it once with [`Gateway::new`], serve
/// [`router`](Self::router), run [`start`](Self::start) beside it.
pub struct Gateway {
    pub(crate) store: Arc<dyn DataStore>,
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) queues: Queues,
    pub(crate) limits: Limits,
    pub(crate) limiter: Limiter,
    pub(crate) long_polls: Arc<Semaphore>,
    pub(crate) work: Arc<Work>,
    pub(crate) holdings: Holdings,
    /// The copies the archive's last check found damaged, and when they were read.
    pub(crate) damaged: Mutex<Option<(Instant, Arc<HashSet<String>>)>>,
    senders: [OnceCell<Arc<dyn Sender>>; 3],
}

/// Which of the gateway's senders: the curated queues and the results' queue.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SendTo {
    CuratedEpisodes = 0,
    CuratedClips = 1,
    CompletedResearch = 2,
}

impl Gateway {
    /// A gateway over `store` (which must keep the API's tokens: the SQL datastores do) and
    /// `bus`, keeping nothing for its researchers.
    pub fn new(
        store: Arc<dyn DataStore>,
        bus: Arc<dyn Bus>,
        queues: Queues,
        limits: Limits,
    ) -> Result<Arc<Self>, ApiError> {
        Self::with_holdings(store, bus, queues, limits, Holdings::default())
    }

    /// A gateway as [`Gateway::new`] makes it, that also offers its researchers what
    /// `holdings` holds.
    pub fn with_holdings(
        store: Arc<dyn DataStore>,
        bus: Arc<dyn Bus>,
        queues: Queues,
        limits: Limits,
        holdings: Holdings,
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
            work: Arc::new(Work::new()),
            holdings,
            damaged: Mutex::new(None),
            store,
            bus,
            queues,
            limits,
            senders: Default::default(),
        }))
    }

    /// The datastore's tokens, presence and held items.
    pub(crate) fn access(&self) -> Result<&dyn ApiAccess, ApiError> {
        // Checked in `new`.
        self.store
            .api_access()
            .ok_or_else(|| ApiError::Usage("this datastore keeps no API tokens".into()))
    }

    /// The sender for `to`, made once.
    pub(crate) async fn sender(&self, to: SendTo) -> Result<Arc<dyn Sender>, ApiError> {
        let queue = match to {
            SendTo::CuratedEpisodes => &self.queues.curated_episodes,
            SendTo::CuratedClips => &self.queues.curated_clips,
            SendTo::CompletedResearch => &self.queues.completed_research,
        };
        let cell = self
            .senders
            .get(to as usize)
            .ok_or_else(|| ApiError::Usage("no such sender".into()))?;
        Ok(cell
            .get_or_try_init(|| async { self.bus.sender(queue).await })
            .await?
            .clone())
    }
}
