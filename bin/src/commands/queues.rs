//! `archivist queues`: create the four queues and their dead-letter queues if missing (saying
//! which it created), say where an existing queue's settings differ from what it would create
//! (or change them, with `--update`), and show each one's depth and dead letters.

use std::io::Write;

use clap::Args;
use messagebus::{dead_letter_queue_name, BusError};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;
use crate::depths::{write_queue_table, QueueDepth};

/// Options of `queues`.
#[derive(Debug, Args)]
pub(crate) struct QueuesArgs {
    /// Print one JSON object a queue instead of a table
    #[arg(long)]
    pub(crate) json: bool,
    /// Give existing queues the settings new ones get (ARCHIVIST_MAX_RECEIVES as their
    /// receive limit; on SQS also the retention), instead of only saying how they differ
    #[arg(long)]
    pub(crate) update: bool,
}

/// Creates and shows the queues.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &QueuesArgs,
) -> anyhow::Result<()> {
    let QueuesArgs { json, update } = *args;
    let bus = connect::shared_bus(config, "queues", token).await?;
    let mut depths = Vec::new();
    for q in config.queues.all() {
        let existed = match bus.sender(q).await {
            Ok(_) => true,
            Err(BusError::QueueNotFound(_)) => false,
            Err(e) => return Err(anyhow::Error::new(e).context(format!("queue {q:?}"))),
        };
        bus.create_queue(q)
            .await
            .map_err(|e| anyhow::Error::new(e).context(format!("cannot create queue {q:?}")))?;
        if !existed {
            tracing::info!(
                "created queue {q} and its dead-letter queue {}",
                dead_letter_queue_name(q)
            );
        } else {
            let drift = bus.queue_drift(q).await?;
            if !drift.is_empty() && update {
                bus.update_queue(q).await?;
                tracing::info!("updated queue {q}: {}", drift.join("; "));
            } else if !drift.is_empty() {
                tracing::warn!(
                    "queue {q} exists and was left as it is: {} (`archivist queues --update` \
                     changes it)",
                    drift.join("; ")
                );
            } else {
                tracing::info!("queue {q} exists");
            }
        }
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
