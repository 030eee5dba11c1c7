//! `archivist receive QUEUE`: take messages off a queue (or its dead-letter queue), print each
//! body as one line, and acknowledge them; `--dead-letters --peek` prints dead letters and
//! leaves them in place.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use messagebus::{dead_letter_queue_name, Delivery};
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{check_queue_arg, Config};
use crate::connect;
use crate::values::parse_duration;

/// `receive --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist receive pending_research --max 1 --wait 1m   # a researcher takes one work item\n  \
        archivist receive curated_clips --dead-letters --peek   # what was set aside, and why; left in place\n  \
        archivist receive curated_clips --dead-letters          # the same, taken off for good";

/// Options of `receive`.
#[derive(Debug, Args)]
pub(crate) struct ReceiveArgs {
    /// The queue's name (on SQS, resolved to its URL)
    pub(crate) queue: String,
    /// The most messages to take
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max: u32,
    /// How long to wait for messages, as 0s, 5s, 1m
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub(crate) wait: Duration,
    /// Read the queue's dead-letter queue instead; each line is then {"body": …, "reason": …}.
    /// This takes them: `redrive` and `retry-failed` no longer find them (see --peek)
    #[arg(long)]
    pub(crate) dead_letters: bool,
    /// With --dead-letters: print them and leave them where they are, for `redrive`
    /// (the database buses: the oldest first; SQS: a sample of up to ten; RabbitMQ cannot look
    /// without taking, and says so)
    #[arg(long, requires = "dead_letters")]
    pub(crate) peek: bool,
}

/// The most messages one receive asks for: SQS's limit.
const RECEIVE_BATCH: u32 = 10;

#[derive(Serialize)]
struct DeadLetter<'a> {
    body: String,
    reason: Option<&'a str>,
}

/// Receives until `--max` messages were printed or `--wait` has passed. Each batch is
/// printed and flushed before it is acknowledged (in one call), so none is lost if printing
/// fails.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &ReceiveArgs,
) -> anyhow::Result<()> {
    let queue = check_queue_arg(&args.queue)?;
    if args.peek {
        return peek(config, token, &queue, args.max).await;
    }
    let source = if args.dead_letters {
        dead_letter_queue_name(&queue)
    } else {
        queue.clone()
    };
    let bus = connect::shared_bus(config, "receive", token).await?;
    let receiver = connect::named_receiver(config, bus.as_ref(), &source).await?;
    let deadline = Instant::now() + args.wait;
    let mut taken = 0u32;
    let out = std::io::stdout();
    while taken < args.max {
        let wait = deadline.saturating_duration_since(Instant::now());
        let ask = (args.max - taken).min(RECEIVE_BATCH) as usize;
        let batch = tokio::select! {
            _ = token.cancelled() => break,
            b = receiver.receive(ask, wait) => b.with_context(|| format!("cannot receive from {source}"))?,
        };
        if batch.is_empty() {
            break;
        }
        // The whole batch printed and flushed, then acknowledged in one call; a delivery
        // left unacknowledged by a failed print goes back to the queue.
        {
            let mut lock = out.lock();
            for delivery in &batch {
                let line = if args.dead_letters {
                    dead_letter_line(delivery)?
                } else {
                    body_line(delivery.body())
                };
                writeln!(lock, "{line}")?;
            }
            lock.flush()?;
        }
        for acked in messagebus::ack_all(batch).await {
            match acked {
                Ok(()) => {}
                // Printed, but held past its visibility: it will be received again.
                Err(e @ messagebus::BusError::Stale { .. }) => {
                    tracing::warn!(error = %e, "printed but not acknowledged");
                }
                Err(e) => {
                    return Err(anyhow::Error::new(e))
                        .with_context(|| format!("cannot acknowledge a message from {source}"))
                }
            }
            taken += 1;
        }
        if wait == Duration::ZERO {
            break;
        }
    }
    tracing::info!(queue = %source, received = taken, "received");
    drop(receiver);
    // This process no longer counts as a consumer (a researcher) of the queue.
    if let Err(e) = bus.close().await {
        tracing::debug!(error = %e, "could not unregister from the bus");
    }
    Ok(())
}

/// A body as one line: as sent when it has no line breaks; otherwise compact JSON when it is
/// JSON, else with its line breaks escaped.
fn body_line(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if !text.contains(['\n', '\r']) {
        return text.into_owned();
    }
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) => v.to_string(),
        Err(_) => text.replace('\r', "\\r").replace('\n', "\\n"),
    }
}

/// `--dead-letters --peek`: up to `max` dead letters of `queue`, printed as `--dead-letters`
/// prints them, left where they are (for `redrive`). A bus that cannot look without taking
/// (RabbitMQ) is said so, with the count, and nothing is taken (exit 2).
async fn peek(
    config: &Config,
    token: &CancellationToken,
    queue: &str,
    max: u32,
) -> anyhow::Result<()> {
    let bus = connect::shared_bus(config, "receive", token).await?;
    let sender = connect::named_sender(config, bus.as_ref(), queue).await?;
    let limit = usize::try_from(max).unwrap_or(usize::MAX);
    let letters = sender
        .peek_dead_letters(limit, messagebus::MAX_BODY_BYTES)
        .await
        .with_context(|| format!("cannot look at the dead letters of {queue}"))?;
    let Some(letters) = letters else {
        let stats = sender
            .inspect()
            .await
            .with_context(|| format!("cannot count the dead letters of {queue}"))?;
        return Err(crate::values::usage(format!(
            "this bus cannot show dead letters without taking them; {queue} has {} (`archivist \
             queues`); `receive {queue} --dead-letters` without --peek takes and prints them, \
             after which `redrive` no longer finds them",
            stats.dead_letters
        )));
    };
    let mut lock = std::io::stdout().lock();
    for letter in &letters {
        let line = DeadLetter {
            body: String::from_utf8_lossy(&letter.body).into_owned(),
            reason: letter.reason.as_deref(),
        };
        writeln!(lock, "{}", serde_json::to_string(&line)?)?;
    }
    lock.flush()?;
    tracing::info!(
        queue = %dead_letter_queue_name(queue),
        shown = letters.len(),
        "dead letters shown, left in place"
    );
    if let Err(e) = bus.close().await {
        tracing::debug!(error = %e, "could not unregister from the bus");
    }
    Ok(())
}

fn dead_letter_line(d: &Delivery) -> anyhow::Result<String> {
    let line = DeadLetter {
        body: String::from_utf8_lossy(d.body()).into_owned(),
        reason: d.dead_letter_reason(),
    };
    Ok(serde_json::to_string(&line)?)
}
