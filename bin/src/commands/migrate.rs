//! `archivist migrate`: create or upgrade the datastore's schema, and on the database bus its
//! tables and queues.

use datastore::redact_url;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;

/// Connects (which migrates) and reports.
pub(crate) async fn run(config: &Config, token: &CancellationToken) -> anyhow::Result<()> {
    let url = config.database_url();
    let applied = connect::migrate_datastore(config, &url, token).await?;
    let shown = redact_url(&url);
    match applied.len() {
        0 => tracing::info!(datastore = %shown, "schema is up to date"),
        n => tracing::info!(
            datastore = %shown,
            "applied {n} migration{}: {}",
            if n == 1 { "" } else { "s" },
            applied.join(", ")
        ),
    }
    if config.bus.is_database() {
        connect::database_bus(config, token, true).await?;
        tracing::info!(bus = %redact_url(&config.bus_url()), "bus tables and queues are ready");
    }
    Ok(())
}
