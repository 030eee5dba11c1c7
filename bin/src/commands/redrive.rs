//! `archivist redrive QUEUE`: move dead letters back onto their queue once the fault that set
//! them aside is fixed (`--max N` of them, or count them with `--dry-run`).
//!
//! The count to move is fixed at the start (the dead letters waiting then, at most `--max`),
//! so that messages that fail again while the redrive runs are not moved round in a loop.
//! Each bus call moves one step (the database bus: everything, in one transaction; SQS and
//! RabbitMQ: a batch, sent before it is deleted); a signal stops between steps, never inside
//! one.

use std::io::Write;

use anyhow::anyhow;
use clap::Args;
use messagebus::{dead_letter_queue_name, BusError};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::{check_queue_arg, Config};
use crate::connect;
use crate::values::usage;

/// `redrive --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist redrive curated_clips --dry-run   # how many would move; nothing moves\n  \
        archivist redrive curated_clips --max 2     # try two first\n  \
        archivist redrive curated_clips             # then the rest\n\n\
Each message goes back as new: its receive count starts again, its reason is dropped. Dead \
letters taken off with `archivist receive QUEUE --dead-letters` are gone: there is nothing left \
to redrive of them. On the database bus the move is one transaction (interrupted: all moved or none); on SQS and RabbitMQ \
it goes a batch at a time, each message sent before it leaves the dead-letter queue (a crash in \
between can leave that batch in both: delivered twice, never lost).";

/// Options of `redrive`.
#[derive(Debug, Args)]
pub(crate) struct RedriveArgs {
    /// The queue whose dead letters go back onto it (its name, not its dead-letter queue's)
    pub(crate) queue: String,
    /// The most dead letters to move [default: every one waiting when it starts]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max: Option<u64>,
    /// Count the dead letters that would move, and move none
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print one JSON object (queue, dead_letter_queue, dead_letters, would_move, moved,
    /// dry_run, interrupted) instead of a sentence
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `--json` prints.
#[derive(Serialize)]
struct Outcome<'a> {
    queue: &'a str,
    dead_letter_queue: &'a str,
    /// Dead letters waiting when the redrive started (SQS: its approximate count).
    dead_letters: u64,
    /// What the redrive set out to move: `dead_letters`, at most `--max`.
    would_move: u64,
    /// What it moved (0 on a dry run).
    moved: u64,
    dry_run: bool,
    /// A signal stopped it before it moved `would_move`.
    interrupted: bool,
}

/// Counts, then moves, and says how many.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &RedriveArgs,
) -> anyhow::Result<()> {
    let queue = check_queue_arg(&args.queue)?;
    let dlq = dead_letter_queue_name(&queue);
    if queue.ends_with("_dead_letter") {
        return Err(usage(format!(
            "{queue:?} is a dead-letter queue: name the queue its dead letters go back to \
             (`archivist redrive {}`)",
            queue.trim_end_matches("_dead_letter")
        )));
    }
    let bus = connect::shared_bus(config, "redrive", token).await?;
    // A missing queue is a usage error (exit 2), said before anything else.
    connect::named_sender(config, bus.as_ref(), &queue).await?;
    let retry = config.retry(false);
    let dead_letters = retry
        .run(token, BusError::is_retryable, || bus.redrivable(&queue))
        .await
        .map_err(|e| match retry_error(e) {
            // The queue exists (checked above): its dead-letter queue is what is missing.
            BusError::QueueNotFound(_) => usage(format!(
                "queue {queue:?} has no dead-letter queue {dlq:?}: create it with \
                 `archivist queues`"
            )),
            e => anyhow!(e).context(format!("cannot count the dead letters of {queue}")),
        })?;
    let would_move = args.max.map_or(dead_letters, |m| m.min(dead_letters));
    let mut moved = 0u64;
    if !args.dry_run {
        while moved < would_move && !token.is_cancelled() {
            // Not raced against the token: a step once begun is finished.
            let step = retry
                .run(token, BusError::is_retryable, || {
                    bus.redrive(&queue, would_move - moved)
                })
                .await;
            match step {
                Ok(0) => break,
                Ok(n) => {
                    moved += n;
                    // Test builds: a signal at the moment between two steps.
                    messagebus::fail_point("redrive-step-done").await;
                }
                Err(e) => {
                    return Err(anyhow!(retry_error(e)).context(format!(
                        "cannot redrive {queue}: moved {moved} of {would_move} dead letters \
                         before the failure"
                    )))
                }
            }
        }
    }
    let interrupted = !args.dry_run && moved < would_move && token.is_cancelled();
    let outcome = Outcome {
        queue: &queue,
        dead_letter_queue: &dlq,
        dead_letters,
        would_move,
        moved,
        dry_run: args.dry_run,
        interrupted,
    };
    tracing::info!(%queue, dead_letters, moved, dry_run = args.dry_run, "redrive done");
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &outcome)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", sentence(&outcome))?;
    }
    out.flush()?;
    drop(out);
    if let Err(e) = bus.close().await {
        tracing::debug!(error = %e, "could not let go of the bus");
    }
    Ok(())
}

fn retry_error(e: archivist::RetryError<BusError>) -> BusError {
    match e {
        archivist::RetryError::Failed(e) | archivist::RetryError::Cancelled(e) => e,
    }
}

/// The outcome in words, the counts first.
fn sentence(o: &Outcome<'_>) -> String {
    let letters = |n: u64| {
        if n == 1 {
            "dead letter"
        } else {
            "dead letters"
        }
    };
    if o.dead_letters == 0 {
        return format!(
            "0 dead letters wait in {}: nothing to move",
            o.dead_letter_queue
        );
    }
    if o.dry_run {
        return format!(
            "would move {} of the {} {} in {} back to {} (dry run: nothing moved)",
            o.would_move,
            o.dead_letters,
            letters(o.dead_letters),
            o.dead_letter_queue,
            o.queue
        );
    }
    let mut s = format!(
        "moved {} of the {} {} in {} back to {}",
        o.moved,
        o.dead_letters,
        letters(o.dead_letters),
        o.dead_letter_queue,
        o.queue
    );
    if o.interrupted {
        s.push_str(" (interrupted: the rest stay where they are)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(dead_letters: u64, would_move: u64, moved: u64, dry_run: bool) -> Outcome<'static> {
        Outcome {
            queue: "curated_clips",
            dead_letter_queue: "curated_clips_dead_letter",
            dead_letters,
            would_move,
            moved,
            dry_run,
            interrupted: false,
        }
    }

    #[test]
    fn sentences_say_the_counts() {
        assert_eq!(
            sentence(&outcome(5, 2, 0, true)),
            "would move 2 of the 5 dead letters in curated_clips_dead_letter back to \
             curated_clips (dry run: nothing moved)"
        );
        assert_eq!(
            sentence(&outcome(1, 1, 1, false)),
            "moved 1 of the 1 dead letter in curated_clips_dead_letter back to curated_clips"
        );
        assert_eq!(
            sentence(&outcome(0, 0, 0, false)),
            "0 dead letters wait in curated_clips_dead_letter: nothing to move"
        );
    }
}
