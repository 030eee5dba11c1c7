//! `archivist send QUEUE`: each line of standard input (JSON) as one message.

use anyhow::Context;
use messagebus::BusError;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::cli::SendArgs;
use crate::config::{check_queue_arg, usage, Config};
use crate::connect;

/// Lines sent in one batch: SQS's batch size.
const BATCH: usize = 10;

/// Sends standard input, line by line; blank lines are skipped. Unless `--raw`, a line that is
/// not JSON stops the command (exit 2) before it is sent; the lines before it are sent.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &SendArgs,
) -> anyhow::Result<()> {
    let queue = check_queue_arg(&args.queue)?;
    let bus = connect::shared_bus(config, "send", token).await?;
    let sender = connect::sender(bus.as_ref(), &queue).await?;
    // Split on bytes, not `lines()`: a line that is not UTF-8 is bad input (exit 2, naming the
    // line), not a failure to read standard input.
    let mut lines = BufReader::new(tokio::io::stdin()).split(b'\n');
    let mut batch: Vec<(u64, Vec<u8>)> = Vec::with_capacity(BATCH);
    let mut sent = 0u64;
    let mut line_no = 0u64;
    loop {
        let line = tokio::select! {
            _ = token.cancelled() => break,
            line = lines.next_segment() => line.context("cannot read standard input")?,
        };
        let Some(line) = line else { break };
        line_no += 1;
        let Ok(line) = String::from_utf8(line) else {
            flush(&*sender, &mut batch, &mut sent, &queue).await?;
            report(sent, &queue);
            return Err(usage(format!(
                "standard input line {line_no} is not UTF-8 (a message body must be UTF-8 \
                 text); nothing from it on was sent"
            )));
        };
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if !args.raw {
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(trimmed) {
                flush(&*sender, &mut batch, &mut sent, &queue).await?;
                report(sent, &queue);
                return Err(usage(format!(
                    "standard input line {line_no} is not JSON ({e}); nothing from it on was \
                     sent (use --raw to send lines unchecked)"
                )));
            }
        }
        // `--raw` sends the line as it is (only its line ending taken off); JSON lines go
        // without the blanks around them.
        let body = if args.raw {
            line.strip_suffix('\r').unwrap_or(&line)
        } else {
            trimmed
        };
        batch.push((line_no, body.as_bytes().to_vec()));
        if batch.len() == BATCH {
            flush(&*sender, &mut batch, &mut sent, &queue).await?;
        }
    }
    flush(&*sender, &mut batch, &mut sent, &queue).await?;
    report(sent, &queue);
    Ok(())
}

/// Sends the batch (each body with its line number). A body the bus cannot carry (too large)
/// is bad input: the batch is then sent line by line, so that the lines before it go and the
/// error (exit 2) names its line.
async fn flush(
    sender: &dyn messagebus::Sender,
    batch: &mut Vec<(u64, Vec<u8>)>,
    sent: &mut u64,
    queue: &str,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let lines = std::mem::take(batch);
    let bodies: Vec<Vec<u8>> = lines.iter().map(|(_, b)| b.clone()).collect();
    match sender.send_batch(bodies).await {
        Ok(()) => {
            *sent += lines.len() as u64;
            return Ok(());
        }
        // The bus refuses such a batch before sending any of it.
        Err(BusError::BodyTooLarge { .. } | BusError::InvalidBody(_)) => {}
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!(
                "sending to {queue} failed after {sent} messages were sent"
            )))
        }
    }
    for (line_no, body) in lines {
        match sender.send(body).await {
            Ok(()) => *sent += 1,
            Err(e @ (BusError::BodyTooLarge { .. } | BusError::InvalidBody(_))) => {
                report(*sent, queue);
                return Err(usage(format!(
                    "standard input line {line_no} cannot be sent ({e}); nothing from it on \
                     was sent"
                )));
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "sending to {queue} failed after {sent} messages were sent"
                )))
            }
        }
    }
    Ok(())
}

/// The count, on standard error: standard output stays empty for scripts.
fn report(sent: u64, queue: &str) {
    let s = if sent == 1 { "" } else { "s" };
    // Said on standard error (standard output stays empty); a closed one is no failure.
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!("sent {sent} message{s} to {queue}\n"),
    );
}
