//! `archivist status`: the datastore's counts and, when the bus is shared (the database bus, SQS), the queues'
//! depths; a table, or one JSON object with `--json`. With `--server`, the counts are read
//! through the API (`GET /api/v1/status`, a reader token) and printed the same way.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Context;
use clap::Args;
use datastore::{FailureReason, Status};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::{BusKind, Config};
use crate::connect;
use crate::depths::{no_researcher_note, write_queue_table, QueueDepth};
use crate::values::{RemoteArgs, UsageError};

/// `status --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist status                            # a table\n  \
        archivist status --json | jq '.researched_pairs / .research_pairs'\n  \
        until archivist status --json | jq -e .done >/dev/null; do sleep 10; done   # until nothing is left to do\n  \
        archivist status --server https://archivist.example   # through the API (ARCHIVIST_TOKEN: a reader token)";

/// Options of `status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print one JSON object instead of a table
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
}

#[derive(Debug, Serialize)]
struct StatusOutput {
    #[serde(flatten)]
    status: Status,
    /// Research pairs neither researched, nor failed, nor leased.
    unresearched_pairs: u64,
    /// Nothing is left to do: every research pair is researched or failed (see [`done`]).
    done: bool,
    /// The most common reasons of failed pairs (at most [`REASONS_SHOWN`]), most pairs first.
    failure_reasons: Vec<FailureReason>,
    /// Present when the bus can tell (a shared bus): queue name → depths; `null` when the
    /// bus could not be reached (then `queues_unknown` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    queues: Option<Option<BTreeMap<String, QueueDepth>>>,
    /// Why the queue depths are unknown: the bus could not be reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    queues_unknown: Option<String>,
    /// The work items' queue, for the note on items no researcher consumes.
    #[serde(skip)]
    pending_queue: String,
}

/// How long `status` waits for the bus: it reports the datastore's counts whatever the bus
/// does, so an outage costs seconds, not the whole ARCHIVIST_CONNECT_TIMEOUT.
const BUS_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Failure reasons shown.
const REASONS_SHOWN: u32 = 5;

/// Prints the status.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &StatusArgs,
) -> anyhow::Result<()> {
    if args.remote.remote()? {
        return run_remote(args).await;
    }
    let json = args.json;
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::ReadOnly,
    )
    .await?;
    let status = store
        .status(chrono::Utc::now())
        .await
        .context("cannot read the status")?;
    let failure_reasons = if status.failed_pairs == 0 {
        Vec::new()
    } else {
        store
            .failure_reasons(REASONS_SHOWN)
            .await
            .context("cannot read the failure reasons")?
    };
    let mut bus_config = config.clone();
    bus_config.connect_timeout = config.connect_timeout.min(BUS_PATIENCE);
    // The counts are what status is for: an unreachable bus leaves the queue depths unknown,
    // with a warning, and the exit code 0 (a monitor watching the bus asks `queues`).
    let (queues, queues_unknown) = match queue_depths(&bus_config, token).await {
        Ok(qs) => (
            qs.map(|qs| Some(qs.into_iter().map(|q| (q.queue.clone(), q)).collect())),
            None,
        ),
        Err(e) => {
            let why = crate::values::describe(&e);
            tracing::warn!("queue depths unknown: {why}");
            (Some(None), Some(why))
        }
    };
    let output = StatusOutput {
        status,
        unresearched_pairs: unresearched(&status),
        done: done(&status),
        failure_reasons,
        queues,
        queues_unknown,
        pending_queue: config.queues.pending_research.clone(),
    };
    print(&output, json)
}

/// Pairs neither researched, nor failed, nor leased.
fn unresearched(s: &Status) -> u64 {
    s.research_pairs
        .saturating_sub(s.researched_pairs)
        .saturating_sub(s.failed_pairs)
        .saturating_sub(s.leased_pairs)
}

/// Whether nothing is left to do: there are research pairs, and every one is researched or
/// failed (a failed pair waits for `retry-failed` or a new curation, not for a researcher).
fn done(s: &Status) -> bool {
    s.research_pairs > 0 && s.researched_pairs.saturating_add(s.failed_pairs) >= s.research_pairs
}

/// The status object of `GET /api/v1/status`: the counts, and what a server too old to send
/// the failure reasons leaves out.
#[derive(Debug, serde::Deserialize)]
struct RemoteStatus {
    #[serde(flatten)]
    status: Status,
    #[serde(default)]
    failure_reasons: Vec<FailureReason>,
}

/// `status --server`: the counts through the API, printed as the local ones are (the queue
/// depths are the server's to show: not part of the API).
async fn run_remote(args: &StatusArgs) -> anyhow::Result<()> {
    let reader = messagebus::api::ApiReader::new(&args.remote.api_config("reader")?)
        .map_err(crate::values::remote_error)?;
    let remote: RemoteStatus = reader.status().await.map_err(crate::values::remote_error)?;
    let status = remote.status;
    let output = StatusOutput {
        status,
        unresearched_pairs: unresearched(&status),
        done: done(&status),
        failure_reasons: remote.failure_reasons,
        queues: None,
        queues_unknown: None,
        pending_queue: String::new(),
    };
    print(&output, args.json)
}

fn print(output: &StatusOutput, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, output)?;
        writeln!(out)?;
    } else {
        write_table(&mut out, output)?;
    }
    out.flush()?;
    Ok(())
}

/// The queues' depths when the bus is shared: `Ok(None)` when the bus cannot be inspected
/// from another process; a queue that is missing or refused is left out with a note in the
/// log. An unreachable bus is an error, which [`run`] prints as depths unknown, with a
/// warning and exit 0: the counts are what `status` is for.
async fn queue_depths(
    config: &Config,
    token: &CancellationToken,
) -> anyhow::Result<Option<Vec<QueueDepth>>> {
    if config.bus == BusKind::Memory {
        tracing::debug!("the bus cannot be inspected from another process: no queue depths");
        return Ok(None);
    }
    // Unreachable or refused (a login the broker rejects): the depths are unknown, and
    // `--json` says so (`"queues": null` and why), as for any outage.
    let bus = connect::shared_bus(config, "status", token).await?;
    let mut depths = Vec::new();
    for q in config.queues.all() {
        let stats = match connect::sender(bus.as_ref(), q).await {
            Ok(s) => s
                .inspect()
                .await
                .map_err(|e| anyhow::Error::new(e).context(format!("queue {q:?}"))),
            Err(e) => Err(e),
        };
        match stats {
            Ok(s) => depths.push(QueueDepth::new(q, s)),
            // A missing queue (`archivist queues` not run yet) is a note, not an outage.
            Err(e) if e.downcast_ref::<UsageError>().is_some() => {
                tracing::warn!(queue = q, "no queue depth: {e:#}");
            }
            Err(e) => return Err(e.context("cannot read the queue depths")),
        }
    }
    Ok(Some(depths))
}

fn write_table(out: &mut impl Write, o: &StatusOutput) -> std::io::Result<()> {
    let s = &o.status;
    let percent = if s.research_pairs == 0 {
        0.0
    } else {
        100.0 * s.researched_pairs as f64 / s.research_pairs as f64
    };
    writeln!(out, "episodes            {:>12}", s.episodes)?;
    writeln!(out, "clips               {:>12}", s.clips)?;
    writeln!(out, "research pairs      {:>12}", s.research_pairs)?;
    writeln!(
        out,
        "researched pairs    {:>12}  ({percent:.1}%)",
        s.researched_pairs
    )?;
    writeln!(out, "matched pairs       {:>12}", s.matched_pairs)?;
    writeln!(
        out,
        "failed pairs        {:>12}  (not leased until retried: archivist retry-failed)",
        s.failed_pairs
    )?;
    for r in &o.failure_reasons {
        writeln!(out, "  {:>8}  {}", r.pairs, r.reason)?;
    }
    writeln!(out, "leased pairs        {:>12}", s.leased_pairs)?;
    writeln!(
        out,
        "to lease            {:>12}  (neither researched nor leased, nor failed)",
        o.unresearched_pairs
    )?;
    writeln!(
        out,
        "active leases       {:>12}  (a researcher is on them)",
        s.active_leases
    )?;
    writeln!(
        out,
        "awaiting late results {:>10}  (revoked; their unrecorded pairs stay held until they \
         expire)",
        s.awaiting_late_results
    )?;
    writeln!(out, "expired leases      {:>12}", s.expired_leases)?;
    let why = if o.done && s.failed_pairs > 0 {
        format!(
            "nothing left to do: every pair researched or failed ({} failed)",
            s.failed_pairs
        )
    } else if o.done {
        "nothing left to do: every pair researched".to_string()
    } else if s.research_pairs == 0 {
        "no research pairs yet".to_string()
    } else {
        "pairs wait for research or for their results".to_string()
    };
    let done = if o.done { "yes" } else { "no" };
    writeln!(out, "done                {done:>12}  ({why})")?;
    if let Some(Some(queues)) = &o.queues {
        writeln!(out)?;
        let listed: Vec<&QueueDepth> = queues.values().collect();
        write_queue_table(out, &listed)?;
        if let Some(pending) = queues.get(&o.pending_queue) {
            if let Some(note) = no_researcher_note(pending) {
                writeln!(out)?;
                writeln!(out, "{note}")?;
            }
        }
    }
    if let Some(why) = &o.queues_unknown {
        writeln!(out)?;
        writeln!(out, "queues              unknown ({why})")?;
    }
    Ok(())
}
