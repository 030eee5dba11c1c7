//! `archivist clips`: the clips archivist, storing curated clips until SIGINT/SIGTERM
//! (`--once`: until its queue is drained).

use tokio_util::sync::CancellationToken;

use crate::archivists::{self, Kind};
use crate::config::Config;

pub(crate) use crate::archivists::IngestArgs;

/// Runs the clips archivist.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: &IngestArgs,
) -> anyhow::Result<()> {
    archivists::ingest(config, token, args, Kind::Clips).await
}
