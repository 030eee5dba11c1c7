//! The episodes and clips archivists: long-running ingestion loops (or `once`: drain and exit).
//! TODO(archivists helper): implement.

use std::sync::Arc;
use std::time::Duration;

use datastore::DataStore;
use messagebus::Receiver;
use tokio_util::sync::CancellationToken;

use crate::{ArchivistHandle, RetryPolicy};

/// Settings of an ingestion archivist.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Messages received and upserted together.
    pub batch_size: usize,
    /// How long one receive waits for messages.
    pub receive_wait: Duration,
    /// Stop when the queue is empty instead of waiting for more.
    pub once: bool,
    /// Backoff for passing datastore failures.
    pub retry: RetryPolicy,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            batch_size: 10,
            receive_wait: Duration::from_secs(20),
            once: false,
            retry: RetryPolicy::default(),
        }
    }
}

/// Starts the episodes archivist: `curated_episodes` into the datastore.
pub fn start_episodes(
    token: CancellationToken,
    receiver: Arc<dyn Receiver>,
    store: Arc<dyn DataStore>,
    config: IngestConfig,
) -> ArchivistHandle {
    let _ = (token, receiver, store, config);
    todo!()
}

/// Starts the clips archivist: `curated_clips` into the datastore.
pub fn start_clips(
    token: CancellationToken,
    receiver: Arc<dyn Receiver>,
    store: Arc<dyn DataStore>,
    config: IngestConfig,
) -> ArchivistHandle {
    let _ = (token, receiver, store, config);
    todo!()
}
