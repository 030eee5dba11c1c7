//! `archivist episodes`: the episodes archivist, storing curated episodes until
//! SIGINT/SIGTERM (`--once`: until its queue is drained).

use tokio_util::sync::CancellationToken;

use crate::archivists::{self, Kind};
use crate::config::Config;

pub(crate) use crate::archivists::IngestArgs;

/// Runs the episodes archivist.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: &IngestArgs,
) -> anyhow::Result<()> {
    archivists::ingest(config, token, args, Kind::Episodes).await
}
