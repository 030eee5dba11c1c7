//! `archivist send QUEUE`: each line of standard input (JSON) as one message.

use anyhow::Context;
use clap::Args;
use messagebus::{BusError, MAX_BODY_BYTES};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::config::{check_queue_arg, Config};
use crate::connect;
use crate::values::{usage, RemoteArgs};

/// `send --help`'s examples: the commands, then one complete message of each type a curator
/// or researcher sends (the book's *Messages*, docs/src/messages.md, shows the same lines; a test checks both).
pub(crate) const EXAMPLES: &str = concat!(
    "Examples:\n  \
     archivist send curated_episodes < episodes.jsonl\n  \
     jq -c '.[]' clips.json | archivist send curated_clips   # one JSON message per line\n  \
     archivist send --check curated_clips < clips.jsonl      # validate only: nothing is sent\n  \
     echo 'not json' | archivist send --raw curated_clips    # try out poison handling\n\n\
     One message per line. An EpisodeInfo (curated_episodes):\n  ",
    include_str!("../examples/episode.json"),
    "A ClipInfo (curated_clips):\n  ",
    include_str!("../examples/clip.json"),
    "A PendingResearchItem (pending_research: what work assignment publishes and a researcher \
     takes; sent by hand only to try out a researcher):\n  ",
    include_str!("../examples/pending.json"),
    "A CompletedResearchItem (completed_research; revoke_lease: true on a lease's last result; \
     clip_match_scores optional, one from 0 to 1 per offset; \"failure\": \"reason\" in place \
     of clip_offsets_ns for a pair that cannot be researched):\n  ",
    include_str!("../examples/completed.json"),
);

/// Options of `send`.
#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The queue's name (on SQS, resolved to its URL)
    pub(crate) queue: String,
    /// Send lines as they are, without checking that each is JSON (to try out poison handling)
    #[arg(long, conflicts_with = "check")]
    pub(crate) raw: bool,
    /// Send nothing: check each line against QUEUE's message type with the archivists' own
    /// rules, and print each one they would set aside, with their reason
    #[arg(long)]
    pub(crate) check: bool,
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
}

/// Lines sent in one call (the SQS adapter packs them ten to a request).
const BATCH: usize = 500;

/// Bad lines named in one error, at most.
const MAX_NAMED: usize = 10;

/// Sends standard input, line by line; blank lines are skipped. Every line is checked first
/// (UTF-8, within the bus's size limit, and unless `--raw` JSON): if any is bad, nothing is
/// sent and the error (exit 2) names each bad line, so that re-sending the fixed input sends
/// nothing twice.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &SendArgs,
) -> anyhow::Result<()> {
    let queue = check_queue_arg(&args.queue)?;
    if let Some(origin) = queue.strip_suffix("_dead_letter") {
        // A dead letter is set aside by an archivist with its reason; one sent by hand would
        // have none (`"reason": null`), and redriving it would move it to `origin`.
        return Err(usage(format!(
            "{queue:?} is a dead-letter queue: messages get there only when an archivist sets \
             them aside, with the reason. Send to {origin:?} instead (and `archivist redrive \
             {origin}` moves dead letters back)"
        )));
    }
    let remote = args.remote.remote()?;
    if remote && queue != config.queues.episodes && queue != config.queues.clips {
        return Err(usage(format!(
            "send --server sends to the curated queues only ({} and {}), through the API's \
             curator requests; {queue:?} is not one of them",
            config.queues.episodes, config.queues.clips
        )));
    }
    if args.check {
        return check(config, &queue).await;
    }
    let bodies = read_checked(args.raw).await?;
    let (_bus, sender) = if remote {
        // The server refuses a request with any bad line whole (422); checked here first,
        // with the same rules, so that no part of the input goes before a bad line is found.
        if !args.raw {
            check_for_api(config, &queue, &bodies)?;
        }
        let bus = connect::api_bus(config, &args.remote, token).await?;
        let sender = connect::sender(bus.as_ref(), &queue).await?;
        (bus, sender)
    } else {
        let bus = connect::shared_bus(config, "send", token).await?;
        let sender = connect::named_sender(config, bus.as_ref(), &queue).await?;
        (bus, sender)
    };
    let mut sent = 0u64;
    for chunk in bodies.chunks(BATCH) {
        if token.is_cancelled() {
            break;
        }
        let batch: Vec<Vec<u8>> = chunk.iter().map(|(_, b)| b.clone()).collect();
        match sender.send_batch(batch).await {
            Ok(()) => sent += chunk.len() as u64,
            Err(e @ (BusError::BodyTooLarge { .. } | BusError::InvalidBody(_))) => {
                // A body this bus refuses for its own reasons (checked lines pass the
                // common rules): the lines before this batch were sent.
                report(sent, &queue);
                let first = chunk.first().map_or(0, |(n, _)| *n);
                return Err(usage(format!(
                    "{queue} refused a message of standard input lines {first}-{} ({e}); the \
                     {sent} lines before them were sent",
                    chunk.last().map_or(first, |(n, _)| *n)
                )));
            }
            Err(e) => {
                report(sent, &queue);
                return Err(anyhow::Error::new(e).context(format!(
                    "sending to {queue} failed after {sent} messages were sent"
                )));
            }
        }
    }
    report(sent, &queue);
    Ok(())
}

/// Reads standard input and checks every line; the bodies to send with their line numbers,
/// or a usage error naming each bad line (at most [`MAX_NAMED`]).
async fn read_checked(raw: bool) -> anyhow::Result<Vec<(u64, Vec<u8>)>> {
    // Split on bytes, not `lines()`: a line that is not UTF-8 is bad input (exit 2, naming the
    // line), not a failure to read standard input.
    let mut lines = BufReader::new(tokio::io::stdin()).split(b'\n');
    let mut bodies = Vec::new();
    let mut bad: Vec<String> = Vec::new();
    let mut bad_count = 0usize;
    let mut first_line: Option<String> = None;
    let mut line_no = 0u64;
    while let Some(line) = lines
        .next_segment()
        .await
        .context("cannot read standard input")?
    {
        line_no += 1;
        let mut problem = |what: String| {
            bad_count += 1;
            if bad.len() < MAX_NAMED {
                bad.push(format!("line {line_no}: {what}"));
            }
        };
        let Ok(line) = String::from_utf8(line) else {
            problem("not UTF-8 (a message body must be UTF-8 text)".into());
            continue;
        };
        // Before trimming: a byte-order mark is not blank, and serde_json would say only
        // "expected value at line 1 column 1". (`--raw` sends it as it is: poison to try.)
        if !raw && line.starts_with('\u{feff}') {
            problem(
                "starts with a byte-order mark (U+FEFF, bytes EF BB BF), which no message may \
                 hold: save the file as UTF-8 without one"
                    .into(),
            );
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        first_line.get_or_insert_with(|| trimmed.to_string());
        // `--raw` sends the line as it is (only its line ending taken off); JSON lines go
        // without the blanks around them.
        let body = if raw {
            line.strip_suffix('\r').unwrap_or(&line)
        } else {
            trimmed
        };
        if body.len() > MAX_BODY_BYTES {
            problem(format!(
                "{} bytes, over the bus's limit of {MAX_BODY_BYTES}",
                body.len()
            ));
            continue;
        }
        if !raw {
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(trimmed) {
                problem(format!("not JSON ({e})"));
                continue;
            }
        }
        bodies.push((line_no, body.as_bytes().to_vec()));
    }
    if bad.is_empty() {
        return Ok(bodies);
    }
    let more = bad_count.saturating_sub(bad.len());
    let mut message = format!(
        "nothing was sent: {bad_count} bad line{} of standard input: {}",
        if bad_count == 1 { "" } else { "s" },
        bad.join("; ")
    );
    if more > 0 {
        message.push_str(&format!("; and {more} more"));
    }
    // A pretty-printed file starts with a lone brace or bracket.
    if !raw && matches!(first_line.as_deref(), Some("{" | "[")) {
        message.push_str(
            ". send takes one JSON message per line: compact the file first (e.g. `jq -c . \
             FILE | archivist send QUEUE`)",
        );
    }
    Err(usage(message))
}

/// The curated messages for `send --server`, checked as the API checks them: each with the
/// archivists' rules, and its `media_uri` http(s). A usage error naming each bad line (at
/// most [`MAX_NAMED`]) when any is bad.
fn check_for_api(config: &Config, queue: &str, bodies: &[(u64, Vec<u8>)]) -> anyhow::Result<()> {
    let (kind, decoder) = decoder_for(config, queue)?;
    let mut bad: Vec<String> = Vec::new();
    let mut bad_count = 0usize;
    for (line_no, body) in bodies {
        let problem = match decoder(body) {
            Err(e) => Some(e.to_string()),
            Ok(()) => serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("media_uri")?.as_str().map(str::to_string))
                .filter(|uri| {
                    !url::Url::parse(uri).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
                })
                .map(|uri| {
                    format!(
                        "media_uri {uri:?} is not an http(s) URL: the API takes http(s) media \
                         addresses only"
                    )
                }),
        };
        if let Some(why) = problem {
            bad_count += 1;
            if bad.len() < MAX_NAMED {
                bad.push(format!("line {line_no}: {why}"));
            }
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let more = bad_count.saturating_sub(bad.len());
    let mut message = format!(
        "nothing was sent: {bad_count} line{} of standard input {} not valid {kind} messages \
         for the API: {}",
        if bad_count == 1 { "" } else { "s" },
        if bad_count == 1 { "is" } else { "are" },
        bad.join("; ")
    );
    if more > 0 {
        message.push_str(&format!("; and {more} more"));
    }
    Err(usage(message))
}

/// Decodes a message of one queue's type with the archivists' own rules.
type Decoder = fn(&[u8]) -> Result<(), archivist::messages::InvalidMessage>;

/// The message type of `queue` (one of the configured four) and its decoder.
fn decoder_for(config: &Config, queue: &str) -> anyhow::Result<(&'static str, Decoder)> {
    use archivist::messages::{decode, CompletedResearchItem, PendingResearchItem};
    use datastore::{ClipInfo, EpisodeInfo};
    let q = &config.queues;
    let found: (&str, Decoder) = if queue == q.episodes {
        ("EpisodeInfo", |b| decode::<EpisodeInfo>(b).map(drop))
    } else if queue == q.clips {
        ("ClipInfo", |b| decode::<ClipInfo>(b).map(drop))
    } else if queue == q.pending_research {
        ("PendingResearchItem", |b| {
            decode::<PendingResearchItem>(b).map(drop)
        })
    } else if queue == q.completed_research {
        ("CompletedResearchItem", |b| {
            decode::<CompletedResearchItem>(b).map(drop)
        })
    } else {
        return Err(usage(format!(
            "--check knows the message types of the configured queues only ({}); {queue:?} \
             is none of them",
            q.all().join(", ")
        )));
    };
    Ok(found)
}

/// `send --check`: each line of standard input decoded as the archivist reading `queue` would
/// (`archivist::messages::decode`: the same rules, the same reasons); each line it would set
/// aside is printed on standard output as `line N: reason`, and nothing is sent. Exit 2 when
/// any line is bad.
async fn check(config: &Config, queue: &str) -> anyhow::Result<()> {
    let (kind, decoder) = decoder_for(config, queue)?;
    let mut lines = BufReader::new(tokio::io::stdin()).split(b'\n');
    let (mut line_no, mut good, mut bad) = (0u64, 0u64, 0u64);
    let mut out = String::new();
    while let Some(line) = lines
        .next_segment()
        .await
        .context("cannot read standard input")?
    {
        line_no += 1;
        // As `send` sends it: without the blanks around it; a blank line is no message.
        let body = line.trim_ascii();
        if body.is_empty() {
            continue;
        }
        match decoder(body) {
            Ok(()) => good += 1,
            Err(e) => {
                bad += 1;
                out.push_str(&format!("line {line_no}: {e}\n"));
            }
        }
    }
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
    }
    if bad > 0 {
        return Err(usage(format!(
            "{bad} of {} lines are not valid {kind} messages (each named above, with the \
             reason the archivist reading {queue} would set it aside); nothing was sent",
            good + bad
        )));
    }
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!("all {good} lines are valid {kind} messages for {queue}; nothing was sent\n"),
    );
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
