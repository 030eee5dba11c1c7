//! What a started researcher hands back: [`ResearcherHandle`], the [`Report`] of its run and
//! how the run [`Ended`]; the archivists' shape (`archivist::ArchivistHandle`).

use tokio::sync::{mpsc, oneshot};

use crate::status::Status;
use crate::ResearchError;

/// How many non-fatal errors wait unread before newer ones are dropped (and counted).
/// Bounded so that a researcher never blocks because its host stopped reading errors.
pub const ERROR_CHANNEL_CAPACITY: usize = 256;

/// How a run ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Ended {
    /// With [`ResearcherSettings::once`](crate::ResearcherSettings::once): every slot found
    /// the queue empty, and finished the items it had.
    Finished,
    /// The cancellation token fired; the items in hand were finished within the drain
    /// timeout or released.
    Cancelled,
    /// A fatal error: a receive that failed for good, the bus unreachable past the retry
    /// budget (`once`), no slots.
    Failed(ResearchError),
}

/// What one run of a researcher did.
#[derive(Debug)]
#[non_exhaustive]
pub struct Report {
    /// How the run ended.
    pub ended: Ended,
    /// Work items taken off the queue (poison included).
    pub received: u64,
    /// Work items finished: every result sent, the delivery acknowledged.
    pub finished: u64,
    /// Work items skipped because their lease had expired (acknowledged unread).
    pub skipped: u64,
    /// Work items released for another try: failed, asked for later, or stopped by the
    /// drain.
    pub released: u64,
    /// Work items set aside in the dead-letter queue: poison, or failed on their last
    /// allowed try.
    pub dead_lettered: u64,
    /// Results (`CompletedResearchItem`s) sent to the results queue; one sent again to end
    /// a lease counts again.
    pub results_sent: u64,
    /// Non-fatal errors dropped because the errors channel was full.
    pub errors_dropped: u64,
}

impl Report {
    /// An empty report that ended with `ended`.
    pub fn new(ended: Ended) -> Self {
        Report {
            ended,
            received: 0,
            finished: 0,
            skipped: 0,
            released: 0,
            dead_lettered: 0,
            results_sent: 0,
            errors_dropped: 0,
        }
    }
}

/// What a started researcher hands back.
#[derive(Debug)]
pub struct ResearcherHandle {
    /// Non-fatal errors as they happen. Reading is optional: when the channel is full, newer
    /// errors are dropped and counted in [`Report::errors_dropped`].
    pub errors: mpsc::Receiver<ResearchError>,
    /// Resolves once with the run's report when the researcher stops. Dropping it stops the
    /// run where it is (a host that gave up waiting): the items in hand are dropped, which
    /// asks the bus to release them, and their analysers are killed.
    pub done: oneshot::Receiver<Report>,
    /// What each slot is working on, for a status page (see [`crate::status`]).
    pub status: Status,
}
