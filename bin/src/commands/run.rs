//! `archivist run`: the four archivists in one process until SIGINT/SIGTERM, with the status
//! page, metrics and health checks on `--metrics-addr`.

use std::time::Duration;

use archivist::RetryPolicy;
use clap::Args;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::archivists::{self, AllTotals, Pipeline};
use crate::config::Config;
use crate::values::{parse_interval, MediaArchiveArgs};
use crate::web;

/// `run --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist run                               # everything on ./archivist.sqlite\n  \
        DATABASE_URL=postgres://archivist@db/archive archivist run --every 30s";

/// Options of `run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Work assignment runs at once when capacity frees (an item taken, a lease ended, new
    /// episodes or clips stored), and at least this often (expired leases, pairs freed by
    /// other processes); result recording pauses this long between drains
    #[arg(
        long,
        env = "ARCHIVIST_EVERY",
        hide_env_values = true,
        default_value = "1s",
        value_parser = parse_interval
    )]
    pub(crate) every: Duration,
    /// The pages on --metrics-addr play the archive's kept copies and show its figures
    #[command(flatten)]
    pub(crate) media_archive: MediaArchiveArgs,
}

/// Runs the four archivists; running together, they are long-running and ride out outages.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: &RunArgs,
) -> anyhow::Result<()> {
    let every = args.every;
    archivists::require_researcher_count(config)?;
    let archive = crate::connect::media_archive(&args.media_archive).await?;
    let (bus, store) = archivists::open_with_archive(
        config,
        &token,
        "run",
        web::Routes::Everything,
        &[
            "episodes",
            "clips",
            "pending-research",
            "completed-research",
        ],
        archive,
    )
    .await?;
    let mut set = JoinSet::new();
    let pipeline = Pipeline {
        every,
        pending: archivists::pending_config(config, RetryPolicy::forever()),
        completed: archivists::completed_config(RetryPolicy::forever()),
        // More recorders are more processes (`completed-research`), each its own pool.
        recorders: 1,
        ingest_wait: archivists::INGEST_WAIT,
        wake: true,
    };
    archivists::spawn_all(
        &mut set,
        &token,
        &*bus,
        store,
        config,
        pipeline,
        &AllTotals::default(),
    )
    .await?;
    tracing::info!(every = %humantime::format_duration(every), "archivists running; SIGINT or SIGTERM stops them");
    archivists::supervise_then_close(&token, set, config, &*bus).await
}
