//! `archivist queues`: create the four queues and their dead-letter queues if missing, and
//! show each one's depth and dead letters.

use std::io::Write;

use tokio_util::sync::CancellationToken;

use crate::commands::status::{write_queue_table, QueueDepth};
use crate::config::Config;
use crate::connect;

/// Creates and shows the queues.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    json: bool,
) -> anyhow::Result<()> {
    let bus = connect::shared_bus(config, "queues", token).await?;
    let mut depths = Vec::new();
    for q in config.queues.all() {
        bus.create_queue(q)
            .await
            .map_err(|e| anyhow::Error::new(e).context(format!("cannot create queue {q:?}")))?;
        let stats = connect::sender(bus.as_ref(), q).await?.inspect().await?;
        depths.push(QueueDepth::new(q, stats));
    }
    let mut out = std::io::stdout().lock();
    if json {
        for d in &depths {
            serde_json::to_writer(&mut out, d)?;
            writeln!(out)?;
        }
    } else {
        let depths: Vec<&QueueDepth> = depths.iter().collect();
        write_queue_table(&mut out, &depths)?;
    }
    out.flush()?;
    Ok(())
}
