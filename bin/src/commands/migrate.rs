//! `archivist migrate`: create or upgrade the datastore's schema, and on the database bus its
//! tables and queues.

use datastore::redact_url;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;

/// Connects (which migrates) and reports.
pub(crate) async fn run(config: &Config, token: &CancellationToken) -> anyhow::Result<()> {
    let url = config.database_url();
    connect::datastore(config, &url, token).await?;
    tracing::info!(datastore = %redact_url(&url), "schema is up to date");
    if config.bus.is_database() {
        connect::database_bus(config, token, true).await?;
        tracing::info!(bus = %redact_url(&config.bus_url()), "bus tables and queues are ready");
    }
    Ok(())
}
