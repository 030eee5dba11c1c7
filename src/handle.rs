//! What a started archivist hands back: [`ArchivistHandle`], the [`Report`] of its run, how
//! the run [`Ended`], and the non-fatal [`ArchivistError`]s it met on the way.

use tokio::sync::{mpsc, oneshot};

/// How many non-fatal errors wait unread before newer ones are dropped (and counted).
/// Bounded so that an archivist never blocks because its host stopped reading errors.
pub const ERROR_CHANNEL_CAPACITY: usize = 256;

/// A non-fatal problem an archivist met and dealt with (a poison message set aside, a
/// datastore failure retried). Fatal problems end the run and come back in [`Report::ended`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchivistError {
    /// A message was poison and went to the dead-letter queue.
    #[error("message {message_id} dead-lettered: {reason}")]
    DeadLettered {
        /// The bus's id for the message.
        message_id: String,
        /// Why.
        reason: String,
    },
    /// A passing failure; the work will be retried.
    #[error("transient failure, will retry: {0}")]
    Transient(String),
    /// The bus failed.
    #[error(transparent)]
    Bus(#[from] messagebus::BusError),
    /// The datastore failed.
    #[error(transparent)]
    DataStore(#[from] datastore::DataStoreError),
    /// The archivist cannot run as configured (the bus cannot count researchers and no count
    /// was given, say). Lasting: the host should say what to change (exit code 2).
    #[error("configuration: {0}")]
    Config(String),
}

impl ArchivistError {
    /// Whether the failed operation may succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        match self {
            ArchivistError::DeadLettered { .. } => false,
            ArchivistError::Transient(_) => true,
            ArchivistError::Bus(e) => e.is_retryable(),
            ArchivistError::DataStore(e) => e.is_retryable(),
            ArchivistError::Config(_) => false,
        }
    }
}

/// How a run ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Ended {
    /// The run did all there was to do (a drained queue, no more capacity or work).
    Finished,
    /// The cancellation token fired; the message in hand was finished or released.
    Cancelled,
    /// A fatal error: the datastore or bus stayed unreachable after retries, or a lasting
    /// configuration problem.
    Failed(ArchivistError),
}

/// What one run of an archivist did.
#[derive(Debug)]
pub struct Report {
    /// How the run ended.
    pub ended: Ended,
    /// Messages taken off the bus.
    pub received: u64,
    /// Messages whose content was stored (upserted or recorded; duplicates included).
    pub stored: u64,
    /// Results that were already recorded (duplicate deliveries).
    pub duplicates: u64,
    /// Messages set aside in the dead-letter queue.
    pub dead_lettered: u64,
    /// Messages released for retry.
    pub released: u64,
    /// Work items published (pending research).
    pub published: u64,
    /// Leases created (pending research).
    pub leases_created: u64,
    /// Pairs leased that had been held by expired leases (pending research).
    pub pairs_reclaimed: u64,
    /// Leases renewed (completed research).
    pub leases_renewed: u64,
    /// Leases ended: revoked by a researcher's last result (the lease then ends once all its
    /// results are in), or cancelled because publishing failed.
    pub leases_revoked: u64,
    /// Episodes announced fully researched (completed research, when announcing).
    pub announced: u64,
    /// Non-fatal errors dropped because the errors channel was full.
    pub errors_dropped: u64,
}

impl Report {
    /// An empty report that ended with `ended`.
    pub fn new(ended: Ended) -> Self {
        Report {
            ended,
            received: 0,
            stored: 0,
            duplicates: 0,
            dead_lettered: 0,
            released: 0,
            published: 0,
            leases_created: 0,
            pairs_reclaimed: 0,
            leases_renewed: 0,
            leases_revoked: 0,
            announced: 0,
            errors_dropped: 0,
        }
    }
}

/// What a started archivist hands back.
#[derive(Debug)]
pub struct ArchivistHandle {
    /// Non-fatal errors as they happen. Reading is optional: when the channel is full, newer
    /// errors are dropped and counted in [`Report::errors_dropped`].
    pub errors: mpsc::Receiver<ArchivistError>,
    /// Resolves once with the run's report when the archivist stops. Dropping it stops the
    /// run where it is (a host that gave up waiting): the messages it held are dropped, and
    /// buses that can release them do (see `messagebus::Delivery`).
    pub done: oneshot::Receiver<Report>,
}
