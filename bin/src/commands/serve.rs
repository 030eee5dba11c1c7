//! `archivist serve`: the status page, its JSON API, metrics and health checks on `--addr`,
//! until SIGINT/SIGTERM. It only reads, as `status` does: it never creates or migrates the
//! datastore, and creates no queue.

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;

use crate::config::{BusKind, Config};
use crate::connect;
use crate::web;

/// Serves until `token` is cancelled.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    addr: SocketAddr,
) -> anyhow::Result<()> {
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::ReadOnly,
    )
    .await?;
    // The in-memory bus's queues live in the process that runs it (the demo): the page then
    // shows the datastore alone.
    let bus = match config.bus {
        BusKind::Memory => None,
        _ => Some(connect::shared_bus(config, "serve", token).await?),
    };
    let sources = web::Sources::new(config, store, bus.clone());
    web::spawn(
        addr,
        "ARCHIVIST_SERVE_ADDR (--addr)",
        sources,
        web::Routes::Everything,
        token,
    )
    .await?;
    token.cancelled().await;
    if let Some(bus) = bus {
        if let Err(e) = bus.close().await {
            tracing::debug!(error = %e, "could not close the bus");
        }
    }
    Ok(())
}
