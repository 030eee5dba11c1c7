//! `archivist migrate`: create or upgrade the datastore's schema.

use datastore::redact_url;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;

/// Connects (which migrates) and reports.
pub(crate) async fn run(config: &Config, token: &CancellationToken) -> anyhow::Result<()> {
    let url = config.database_url();
    connect::datastore(config, &url, token).await?;
    tracing::info!(datastore = %redact_url(&url), "schema is up to date");
    Ok(())
}
