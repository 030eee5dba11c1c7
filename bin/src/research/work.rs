//! One work item, start to end: decode it, skip it if its lease expired, fetch its media, run
//! the analyser, send one result per clip as each arrives (the last one revoking the lease),
//! then acknowledge the item, or release it for another try when something failed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use archivist::messages::{decode, encode, CompletedResearchItem, Message, PendingResearchItem};
use chrono::Utc;
use messagebus::{Delivery, Sender};

use super::analyser::Ending;
use super::media::{Fetched, MediaError};
use super::protocol::{self, Line};
use super::{Context, SlotState};

/// How an item ended, for the log, the metrics and what happens to its delivery.
#[derive(Debug)]
enum Outcome {
    /// Every result sent: acknowledged.
    Finished,
    /// Released at once for another try, not a failure (exit 75, HTTP 429/503, shutdown).
    Released(String),
    /// Failed: released for another try, up to the queue's receive limit.
    Failed(String),
}

/// How long sending one result keeps trying through a bus outage before the item fails.
const SEND_PATIENCE: Duration = Duration::from_secs(60);
/// How long a result is held back waiting for the next (which would let it be sent without
/// `revoke_lease`) before it is sent anyway: an analyser quiet between two clips must not
/// keep an answer from renewing the lease, or leave it to be sent after the lease ran out.
const HOLD: Duration = Duration::from_secs(1);

/// Handles one delivery of `pending_research` on slot `slot`. Returns `false` when the item
/// went back to the queue (failed or released), so that the slot pauses before it takes
/// another: the item would otherwise come straight back to it.
pub(super) async fn handle(ctx: &Context, slot: usize, delivery: Delivery) -> bool {
    let item: PendingResearchItem = match decode(delivery.body()) {
        Ok(item) => item,
        Err(e) => {
            let reason = e.to_string();
            tracing::warn!(slot, reason = %reason, "poison work item: setting it aside");
            metrics::counter!("archivist_researcher_items_total", "outcome" => "poison")
                .increment(1);
            if let Err(e) = delivery.dead_letter(&reason).await {
                tracing::warn!(error = %e, "could not dead-letter the work item");
            }
            return true;
        }
    };
    let lease = item.lease_id.to_string();
    metrics::counter!("archivist_researcher_items_taken_total").increment(1);
    if item.lease_expires_at <= Utc::now() {
        // Its pairs belong to whoever leased them since: researching them would be done twice.
        tracing::info!(lease = %lease, episode = %item.episode.title, expired_at = %item.lease_expires_at, "skipping a work item whose lease has expired");
        metrics::counter!("archivist_researcher_items_total", "outcome" => "skipped_expired")
            .increment(1);
        settle_ack(delivery, &lease).await;
        return true;
    }
    tracing::info!(slot, lease = %lease, episode = %item.episode.title, clips = item.clips.len(), receive = delivery.receive_count(), "researching");
    ctx.set_slot(slot, SlotState::working(&item));
    metrics::gauge!("archivist_researcher_slots_busy").increment(1.0);
    let started = Instant::now();
    let outcome = research(ctx, slot, &item).await;
    metrics::gauge!("archivist_researcher_slots_busy").decrement(1.0);
    ctx.set_slot(slot, SlotState::Idle);
    let took = humantime::format_duration(Duration::from_secs(started.elapsed().as_secs()));
    match outcome {
        Outcome::Finished => {
            tracing::info!(slot, lease = %lease, took = %took, "work item finished");
            metrics::counter!("archivist_researcher_items_total", "outcome" => "finished")
                .increment(1);
            settle_ack(delivery, &lease).await;
            true
        }
        Outcome::Released(why) => {
            tracing::info!(slot, lease = %lease, reason = %why, "work item released for later");
            metrics::counter!("archivist_researcher_items_total", "outcome" => "released")
                .increment(1);
            settle_release(delivery, &lease).await;
            false
        }
        Outcome::Failed(why) => {
            tracing::warn!(slot, lease = %lease, receive = delivery.receive_count(), reason = %why, "work item failed; released for another try");
            metrics::counter!("archivist_researcher_items_total", "outcome" => "failed")
                .increment(1);
            settle_release(delivery, &lease).await;
            false
        }
    }
}

async fn settle_ack(delivery: Delivery, lease: &str) {
    if let Err(e) = delivery.ack().await {
        // It comes back after its visibility timeout; its results are recorded once anyway.
        tracing::warn!(lease = %lease, error = %e, "could not acknowledge the work item");
    }
}

async fn settle_release(delivery: Delivery, lease: &str) {
    if let Err(e) = delivery.release().await {
        tracing::warn!(lease = %lease, error = %e, "could not release the work item; it comes back after its visibility timeout");
    }
}

async fn research(ctx: &Context, slot: usize, item: &PendingResearchItem) -> Outcome {
    let mut results = Results::new(ctx, item);
    let stop = &ctx.hard_stop;

    // The episode, once for the whole item.
    let episode = match ctx.media.fetch(&item.episode.media_uri, stop).await {
        Ok(Fetched { entry, cache_hit }) => {
            tracing::debug!(lease = %item.lease_id, cache_hit, bytes = entry.size, "episode media ready");
            entry
        }
        Err(MediaError::Gone(why)) => {
            tracing::info!(lease = %item.lease_id, reason = %why, "episode media gone: every pair fails");
            for clip in &item.clips {
                if let Err(e) = results
                    .failure(&clip.title, &format!("episode {why}"))
                    .await
                {
                    return results.fail(e).await;
                }
            }
            return results.done().await;
        }
        Err(MediaError::Passing(why)) => {
            return results.fail(format!("episode media: {why}")).await
        }
        Err(MediaError::Cancelled) => return results.released_at_drain().await,
    };
    results.episode_hash = episode.sha256.clone();

    // The clips, each from the cache when another item fetched it.
    let mut given: Vec<(usize, String)> = Vec::new();
    let mut clip_entries = Vec::new();
    for (i, clip) in item.clips.iter().enumerate() {
        match ctx.media.fetch(&clip.media_uri, stop).await {
            Ok(Fetched { entry, cache_hit }) => {
                tracing::debug!(clip = %clip.title, cache_hit, bytes = entry.size, "clip media ready");
                results
                    .clip_hashes
                    .insert(clip.title.clone(), entry.sha256.clone());
                given.push((i, entry.path.display().to_string()));
                clip_entries.push(entry);
            }
            Err(MediaError::Gone(why)) => {
                if let Err(e) = results.failure(&clip.title, &format!("clip {why}")).await {
                    return results.fail(e).await;
                }
            }
            Err(MediaError::Passing(why)) => {
                return results
                    .fail(format!("clip {:?} media: {why}", clip.title))
                    .await
            }
            Err(MediaError::Cancelled) => return results.released_at_drain().await,
        }
    }
    if given.is_empty() {
        return results.done().await;
    }

    // The analyser.
    let titles: HashMap<String, usize> = given
        .iter()
        .filter_map(|(i, _)| item.clips.get(*i).map(|c| (c.title.clone(), *i)))
        .collect();
    let input = protocol::analyser_input(item, &episode.path.display().to_string(), &given);
    // Recorded however the run ends (a crash, a stall, exit 75, the drain), not only when it
    // finishes: the histogram is the time slots spend in analysers.
    let timer = AnalysisTimer(Instant::now());
    let lease = item.lease_id.to_string();
    // Starting counts as the first line: an HTTP service that accepts the request and never
    // answers its headers is a stall, and must not hold the slot through a shutdown either.
    let started = tokio::select! {
        _ = stop.cancelled() => return results.released_at_drain().await,
        started = tokio::time::timeout(ctx.stall_timeout, ctx.analyser.start(input, &lease)) => started,
    };
    let mut run = match started {
        Ok(Ok(run)) => run,
        Ok(Err(e)) => return results.fail(format!("{e:#}")).await,
        Err(_) => {
            return results
                .fail(format!(
                    "the analyser did not answer within {} (--stall-timeout)",
                    humantime::format_duration(ctx.stall_timeout)
                ))
                .await
        }
    };
    let mut answered: HashSet<String> = HashSet::new();
    // The stall timeout counts from the last line, whatever else happens in between.
    let mut stall_at = tokio::time::Instant::now() + ctx.stall_timeout;
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => {
                run.stop().await;
                return results.released_at_drain().await;
            }
            _ = results.hold_over(), if results.holding() => {
                if let Err(e) = results.flush(false).await {
                    run.stop().await;
                    return results.fail(e).await;
                }
                continue;
            }
            next = tokio::time::timeout_at(stall_at, run.next_line()) => next,
        };
        stall_at = tokio::time::Instant::now() + ctx.stall_timeout;
        let line = match next {
            Err(_) => {
                run.stop().await;
                return results
                    .fail(format!(
                        "the analyser wrote nothing for {} (--stall-timeout): stopped",
                        humantime::format_duration(ctx.stall_timeout)
                    ))
                    .await;
            }
            Ok(Err(e)) => {
                run.stop().await;
                return results.fail(format!("{e:#}")).await;
            }
            Ok(Ok(None)) => break,
            Ok(Ok(Some(line))) => line,
        };
        if line.trim().is_empty() {
            continue;
        }
        let parsed = match protocol::parse_line(&line, &titles, &answered) {
            Ok(parsed) => parsed,
            Err(why) => {
                run.stop().await;
                return results
                    .fail(format!(
                        "the analyser broke the protocol ({why}) in the line {}",
                        protocol::shown(&line)
                    ))
                    .await;
            }
        };
        if let Some(title) = parsed.clip_title() {
            answered.insert(title.to_string());
        }
        let sent = match parsed {
            Line::Progress(text) => {
                tracing::debug!(slot, lease = %lease, progress = %text, "analyser progress");
                ctx.set_progress(slot, text);
                Ok(())
            }
            Line::Failure { clip_title, reason } => results.failure(&clip_title, &reason).await,
            Line::Answer {
                clip_title,
                clip_offsets_ns,
                clip_duration_ns,
                episode_duration_ns,
            } => {
                results
                    .answer(
                        &clip_title,
                        clip_offsets_ns,
                        clip_duration_ns,
                        episode_duration_ns,
                    )
                    .await
            }
        };
        if let Err(e) = sent {
            run.stop().await;
            return results.fail(e).await;
        }
    }
    // The output ended; the exit follows (a program that closed its output and then hangs
    // is stopped as a stall would be: dropping the run kills it).
    let ending = tokio::select! {
        _ = stop.cancelled() => return results.released_at_drain().await,
        ending = tokio::time::timeout(ctx.stall_timeout, run.finish()) => ending.unwrap_or_else(|_| {
            Ending::Failed("the analyser closed its output but did not exit within the stall timeout".into())
        }),
    };
    drop(clip_entries);
    drop(timer);
    match ending {
        Ending::Done => {
            let unanswered = titles.len() - answered.len();
            if unanswered > 0 {
                tracing::info!(lease = %lease, unanswered, "the analyser left clips unanswered: they are researched again after the lease expires");
            }
            results.done().await
        }
        Ending::TryLater(why) => results.released(why).await,
        Ending::Failed(why) => results.fail(why).await,
    }
}

/// Records one analyser run's duration when dropped, so that every ending counts.
struct AnalysisTimer(Instant);

impl Drop for AnalysisTimer {
    fn drop(&mut self) {
        metrics::histogram!("archivist_researcher_analysis_duration_seconds")
            .record(self.0.elapsed().as_secs_f64());
    }
}

/// The results of one item, sent as they come. The latest one is held back until the next
/// arrives, the item ends or [`HOLD`] passes, so that the last one sent can carry
/// `revoke_lease` when the item finished (and does not when it failed: the lease then stays
/// with the item's next try). When the last answer was sent before the item ended, it is sent
/// again with `revoke_lease`: a result is recorded once however often it is delivered.
struct Results<'a> {
    ctx: &'a Context,
    item: &'a PendingResearchItem,
    held: Option<CompletedResearchItem>,
    held_since: tokio::time::Instant,
    last_sent: Option<CompletedResearchItem>,
    episode_hash: String,
    clip_hashes: HashMap<String, String>,
}

impl<'a> Results<'a> {
    fn new(ctx: &'a Context, item: &'a PendingResearchItem) -> Self {
        Results {
            ctx,
            item,
            held: None,
            held_since: tokio::time::Instant::now(),
            last_sent: None,
            episode_hash: String::new(),
            clip_hashes: HashMap::new(),
        }
    }

    fn base(&self, clip_title: &str) -> Result<CompletedResearchItem, String> {
        let clip = self
            .item
            .clips
            .iter()
            .find(|c| c.title == clip_title)
            .ok_or_else(|| format!("unknown clip {clip_title:?}"))?;
        Ok(CompletedResearchItem {
            lease_id: self.item.lease_id,
            revoke_lease: false,
            research_date: Utc::now(),
            episode: self.item.episode.clone(),
            clip: clip.clone(),
            episode_duration_ns: 0,
            episode_hash: self.episode_hash.clone(),
            clip_duration_ns: 0,
            clip_hash: self
                .clip_hashes
                .get(clip_title)
                .cloned()
                .unwrap_or_default(),
            clip_offsets_ns: Vec::new(),
            failure: None,
        })
    }

    async fn answer(
        &mut self,
        clip_title: &str,
        offsets: Vec<i64>,
        clip_duration_ns: i64,
        episode_duration_ns: i64,
    ) -> Result<(), String> {
        let mut result = self.base(clip_title)?;
        result.clip_offsets_ns = offsets;
        result.clip_duration_ns = clip_duration_ns;
        result.episode_duration_ns = episode_duration_ns;
        metrics::counter!("archivist_researcher_clips_total", "result" => "researched")
            .increment(1);
        self.push(result).await
    }

    async fn failure(&mut self, clip_title: &str, reason: &str) -> Result<(), String> {
        let mut result = self.base(clip_title)?;
        result.failure = Some(protocol::truncate(
            reason,
            archivist::messages::MAX_SHORT_TEXT,
        ));
        metrics::counter!("archivist_researcher_clips_total", "result" => "failed").increment(1);
        self.push(result).await
    }

    async fn push(&mut self, result: CompletedResearchItem) -> Result<(), String> {
        result
            .validate()
            .map_err(|e| format!("a result would be poison: {e}"))?;
        if let Some(previous) = self.held.replace(result) {
            self.send(previous).await?;
        }
        self.held_since = tokio::time::Instant::now();
        Ok(())
    }

    /// Whether a result is held back.
    fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// Ready when the held result has waited [`HOLD`].
    async fn hold_over(&self) {
        tokio::time::sleep_until(self.held_since + HOLD).await;
    }

    /// Sends what is held back; with `revoke`, as the lease's last result.
    async fn flush(&mut self, revoke: bool) -> Result<(), String> {
        if let Some(mut last) = self.held.take() {
            last.revoke_lease = revoke;
            self.send(last).await?;
        }
        Ok(())
    }

    async fn send(&mut self, result: CompletedResearchItem) -> Result<(), String> {
        send_patiently(&*self.ctx.results, encode(&result)).await?;
        self.last_sent = Some(result);
        Ok(())
    }

    async fn done(mut self) -> Outcome {
        if self.held.is_none() {
            // Everything was sent already: the last answer again, ending the lease.
            if let Some(mut last) = self.last_sent.take() {
                last.revoke_lease = true;
                if let Err(e) = self.send(last).await {
                    return Outcome::Failed(e);
                }
            }
            return Outcome::Finished;
        }
        match self.flush(true).await {
            Ok(()) => Outcome::Finished,
            Err(e) => Outcome::Failed(e),
        }
    }

    async fn released(mut self, why: String) -> Outcome {
        if let Err(e) = self.flush(false).await {
            return Outcome::Failed(format!("{why}; and {e}"));
        }
        Outcome::Released(why)
    }

    async fn released_at_drain(self) -> Outcome {
        let why = format!(
            "stopping: not finished within the drain timeout ({})",
            humantime::format_duration(self.ctx.drain_timeout)
        );
        self.released(why).await
    }

    async fn fail(mut self, why: String) -> Outcome {
        if let Err(e) = self.flush(false).await {
            return Outcome::Failed(format!("{why}; and {e}"));
        }
        Outcome::Failed(why)
    }
}

/// Sends one result, retrying passing bus failures for up to [`SEND_PATIENCE`].
async fn send_patiently(sender: &dyn Sender, body: Vec<u8>) -> Result<(), String> {
    let deadline = Instant::now() + SEND_PATIENCE;
    let mut backoff = Duration::from_millis(200);
    loop {
        match sender.send(body.clone()).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_retryable() && Instant::now() + backoff < deadline => {
                tracing::warn!(error = %e, retry_in = ?backoff, "could not send a result; trying again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(format!("cannot send a result: {e}")),
        }
    }
}
