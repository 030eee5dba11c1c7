//! The pending-research archivist: one work-assignment run.
//! TODO(archivists helper): implement.

use std::sync::Arc;
use std::time::Duration;

use datastore::DataStore;
use messagebus::Sender;
use tokio_util::sync::CancellationToken;

use crate::{ArchivistHandle, RetryPolicy};

/// Settings of a work-assignment run.
#[derive(Debug, Clone)]
pub struct PendingResearchConfig {
    /// How long a lease lasts without renewal.
    pub lease_duration: chrono::Duration,
    /// The most clips in one work item.
    pub max_clips: u32,
    /// The researcher count, for a bus that cannot count its consumers (SQS). When `None`,
    /// the bus's own consumer count is used; a bus without one ends the run with an error.
    pub researchers: Option<u64>,
    /// The run starts after a random wait of up to this long, so that cron runs on several
    /// hosts do not all hit the datastore at the same second. Zero in tests.
    pub start_jitter: Duration,
    /// Backoff for passing datastore and bus failures.
    pub retry: RetryPolicy,
}

impl Default for PendingResearchConfig {
    fn default() -> Self {
        PendingResearchConfig {
            lease_duration: chrono::Duration::hours(2),
            max_clips: 50,
            researchers: None,
            start_jitter: Duration::from_secs(5),
            retry: RetryPolicy::default(),
        }
    }
}

/// Starts one work-assignment run publishing to `sender` (the `pending_research` queue).
pub fn start(
    token: CancellationToken,
    sender: Arc<dyn Sender>,
    store: Arc<dyn DataStore>,
    config: PendingResearchConfig,
) -> ArchivistHandle {
    let _ = (token, sender, store, config);
    todo!()
}
