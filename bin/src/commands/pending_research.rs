//! `archivist pending-research [--every D]`: one work-assignment run (for cron), or one every
//! D until SIGINT/SIGTERM.

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::archivists;
use crate::config::Config;
use crate::web;

pub(crate) use crate::archivists::RepeatArgs;

/// `pending-research --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist pending-research                  # one run (cron), researchers counted by the bus\n  \
        archivist pending-research --every 1m       # repeat every minute until SIGINT/SIGTERM\n  \
        ARCHIVIST_BUS=sqs ARCHIVIST_RESEARCHERS=8 archivist pending-research";

/// Runs work assignment once, or every `--every`.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: &RepeatArgs,
) -> anyhow::Result<()> {
    archivists::require_researcher_count(config)?;
    let name = "pending-research";
    let (bus, store) =
        archivists::open(config, &token, name, web::Routes::MetricsAndHealth, &[name]).await?;
    let mut set = JoinSet::new();
    let pending = archivists::pending_config(config, config.retry(args.every.is_some()));
    archivists::spawn_pending(
        &mut set,
        &token,
        &*bus,
        store,
        config,
        pending,
        args.every,
        None,
        Default::default(),
    )
    .await?;
    archivists::supervise_then_close(&token, set, config, &*bus).await
}
