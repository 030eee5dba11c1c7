//! `archivist completed-research [--every D]`: drain the completed-research queue once
//! (record results, renew or end leases), or every D until SIGINT/SIGTERM.

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::archivists;
use crate::config::Config;
use crate::web;

pub(crate) use crate::archivists::RepeatArgs;

/// Runs the recorder once, or every `--every`.
pub(crate) async fn run(
    config: &Config,
    token: CancellationToken,
    args: &RepeatArgs,
) -> anyhow::Result<()> {
    let name = "completed-research";
    let (bus, store) =
        archivists::open(config, &token, name, web::Routes::MetricsAndHealth, &[name]).await?;
    let mut set = JoinSet::new();
    let completed = archivists::completed_config(config.retry(args.every.is_some()));
    archivists::spawn_completed(
        &mut set,
        &token,
        &*bus,
        store,
        config,
        completed,
        args.every,
        Default::default(),
    )
    .await?;
    archivists::supervise_then_close(&token, set, config, &*bus).await
}
