//! One work item, start to end: decode it, skip it if its lease expired, fetch its media, run
//! the analyser, send one result per clip as each arrives (the last one revoking the lease),
//! then acknowledge the item (the last results with it, see [`answer_and_ack`]), or release it
//! for another try when something failed. Results
//! the analyser wrote together go out together: one send for every line already written.
//!
//! An analyser that asks for a later try (exit 75, HTTP 429/503) has the item held for the
//! `--later-backoff` (doubled at each receive of the item, at most `--later-max-backoff`), then
//! released. On the item's last allowed receive (`ARCHIVIST_MAX_RECEIVES`), an analyser that
//! fails or asks for later once more gives up the item: its unanswered pairs are sent as
//! failed research with the analyser's reason, the last result ending the lease, and the item
//! is dead-lettered with that reason rather than left for the bus to set aside with none.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use archivist::messages::{decode, encode, CompletedResearchItem, Message, PendingResearchItem};
use chrono::Utc;
use messagebus::{BusError, Delivery, Sender, Unsent};

use crate::analyser::{self, BoxError, Ending, Run};
use crate::context::{Context, Counts};
use crate::episode::EpisodeMedia;
use crate::media::{self, Fetched, MediaError};
use crate::protocol::{self, Line};
use crate::status::SlotState;
use crate::ResearchError;

/// How an item ended, for the log, the metrics and what happens to its delivery.
#[derive(Debug)]
enum Outcome {
    /// Every result sent but these (the last ending the lease, unless it was ended already),
    /// which go out with the item's acknowledgement ([`answer_and_ack`]).
    Finished(Vec<CompletedResearchItem>),
    /// Released at once for another try, not a failure (shutdown).
    Released(String),
    /// The analyser asked for a later try (exit 75, HTTP 429/503): held for a while, then
    /// released.
    Later(String),
    /// Failed: released for another try, up to the queue's receive limit; on the last
    /// allowed receive, dead-lettered with the reason.
    Failed(String),
    /// The last allowed try failed: the unanswered pairs were sent as failed research and
    /// the lease ended; the item is dead-lettered with the reason.
    GaveUp(String),
}

/// How long sending one result keeps trying through a bus outage before the item fails.
const SEND_PATIENCE: Duration = Duration::from_secs(60);
/// How long a result is held back waiting for the next (which would let it be sent without
/// `revoke_lease`) before it is sent anyway: an analyser quiet between two clips must not
/// keep an answer from renewing the lease, or leave it to be sent after the lease ran out.
const HOLD: Duration = Duration::from_secs(1);
/// The most results one send carries: an analyser that writes faster than the bus takes them
/// still has its results sent as they come, a batch at a time.
const MAX_BATCH: usize = 500;

/// What is left to do with an item once [`handle`] returns.
pub(crate) enum Handled {
    /// Done (analysed, or its lease expired before it started): the delivery is the slot's
    /// to acknowledge with the results not sent yet ([`answer_and_ack`]), which it does
    /// while it asks for its next item.
    Answer(Answer),
    /// Settled already (set aside as poison, or released after a hold the analyser asked
    /// for): the next item.
    Settled,
    /// Went back to the queue (failed or released): the slot pauses before it takes
    /// another, which would otherwise be this one again.
    WentBack,
}

/// A finished item: its delivery and the results that go out with its acknowledgement.
pub(crate) struct Answer {
    delivery: Delivery,
    lease_id: uuid::Uuid,
    results: Vec<CompletedResearchItem>,
    /// Researched on this slot, in this long (the log's `work item finished`, said once the
    /// results are sent); `None` for an item skipped unresearched.
    researched: Option<(usize, String)>,
}

/// Handles one delivery of `pending_research` on slot `slot`.
pub(crate) async fn handle(ctx: &Context, slot: usize, delivery: Delivery) -> Handled {
    Counts::add(&ctx.counts.received, 1);
    let item: PendingResearchItem = match decode(delivery.body()) {
        Ok(item) => item,
        Err(e) => {
            let reason = e.to_string();
            tracing::warn!(slot, reason = %reason, "poison work item: setting it aside");
            metrics::counter!("archivist_researcher_items_total", "outcome" => "poison")
                .increment(1);
            let message_id = delivery.message_id().to_string();
            match delivery.dead_letter(&reason).await {
                Ok(()) => {
                    Counts::add(&ctx.counts.dead_lettered, 1);
                    ctx.report(ResearchError::DeadLettered { message_id, reason });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not dead-letter the work item");
                    ctx.report(ResearchError::Bus(e));
                }
            }
            return Handled::Settled;
        }
    };
    let lease = item.lease_id.to_string();
    metrics::counter!("archivist_researcher_items_taken_total").increment(1);
    if item.lease_expires_at <= Utc::now() {
        // Its pairs belong to whoever leased them since: researching them would be done twice.
        tracing::info!(lease = %lease, episode = %item.episode.title, expired_at = %item.lease_expires_at, "skipping a work item whose lease has expired");
        metrics::counter!("archivist_researcher_items_total", "outcome" => "skipped_expired")
            .increment(1);
        Counts::add(&ctx.counts.skipped, 1);
        return Handled::Answer(Answer {
            delivery,
            lease_id: item.lease_id,
            results: Vec::new(),
            researched: None,
        });
    }
    let receive = delivery.receive_count();
    let last_try = ctx.max_receives > 0 && receive >= ctx.max_receives;
    tracing::info!(slot, lease = %lease, episode = %item.episode.title, clips = item.clips.len(), receive, last_try, "researching");
    ctx.set_slot(slot, SlotState::working(&item));
    metrics::gauge!("archivist_researcher_slots_busy").increment(1.0);
    let started = Instant::now();
    let tries = last_try.then_some(receive);
    let outcome = research(ctx, slot, &item, tries).await;
    metrics::gauge!("archivist_researcher_slots_busy").decrement(1.0);
    ctx.set_slot(slot, SlotState::Idle);
    let took = humantime::format_duration(Duration::from_secs(started.elapsed().as_secs()));
    match outcome {
        // Finished once its last results are sent ([`answer_and_ack`] says so).
        Outcome::Finished(results) => Handled::Answer(Answer {
            delivery,
            lease_id: item.lease_id,
            results,
            researched: Some((slot, took.to_string())),
        }),
        Outcome::Released(why) => {
            metrics::counter!("archivist_researcher_items_total", "outcome" => "released")
                .increment(1);
            match settle_release(ctx, delivery).await {
                Ok(()) => {
                    tracing::info!(slot, lease = %lease, reason = %why, "work item released for later");
                }
                Err(e) => {
                    tracing::warn!(slot, lease = %lease, reason = %why, error = %e, "work item not finished and not released: it comes back after its visibility timeout");
                }
            }
            Handled::WentBack
        }
        Outcome::Later(why) => {
            let wait = ctx.later.wait(receive);
            tracing::info!(slot, lease = %lease, reason = %why, receive, hold = %humantime::format_duration(wait), "the analyser asked to try later: holding the work item");
            metrics::counter!("archivist_researcher_items_total", "outcome" => "released")
                .increment(1);
            // Held, not released at once: a released item comes straight back, and each
            // receive counts towards the receive limit.
            tokio::select! {
                _ = ctx.stopping.cancelled() => {}
                _ = ctx.hard_stop.cancelled() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            match settle_release(ctx, delivery).await {
                Ok(()) => tracing::info!(slot, lease = %lease, "work item released for later"),
                Err(e) => {
                    tracing::warn!(slot, lease = %lease, error = %e, "work item not released: it comes back after its visibility timeout");
                }
            }
            // The wait was the pause.
            Handled::Settled
        }
        Outcome::Failed(why) if last_try => {
            tracing::warn!(slot, lease = %lease, receive, reason = %why, "work item failed on its last allowed try (ARCHIVIST_MAX_RECEIVES): dead-lettered");
            metrics::counter!("archivist_researcher_items_total", "outcome" => "gave_up")
                .increment(1);
            settle_dead_letter(ctx, delivery, &lease, why).await;
            Handled::WentBack
        }
        Outcome::Failed(why) => {
            metrics::counter!("archivist_researcher_items_total", "outcome" => "failed")
                .increment(1);
            match settle_release(ctx, delivery).await {
                Ok(()) => {
                    tracing::warn!(slot, lease = %lease, receive, reason = %why, "work item failed; released for another try");
                }
                Err(e) => {
                    tracing::warn!(slot, lease = %lease, receive, reason = %why, error = %e, "work item failed and could not be released: it comes back after its visibility timeout");
                }
            }
            ctx.report(ResearchError::ItemFailed {
                lease_id: item.lease_id,
                reason: why,
            });
            Handled::WentBack
        }
        Outcome::GaveUp(why) => {
            tracing::warn!(slot, lease = %lease, receive, reason = %why, "the analyser failed on the work item's last allowed try (ARCHIVIST_MAX_RECEIVES): its unanswered pairs are failed research, the item dead-lettered");
            metrics::counter!("archivist_researcher_items_total", "outcome" => "gave_up")
                .increment(1);
            settle_dead_letter(ctx, delivery, &lease, why).await;
            Handled::WentBack
        }
    }
}

async fn settle_dead_letter(ctx: &Context, delivery: Delivery, lease: &str, why: String) {
    let message_id = delivery.message_id().to_string();
    match delivery.dead_letter(&why).await {
        Ok(()) => {
            Counts::add(&ctx.counts.dead_lettered, 1);
            ctx.report(ResearchError::DeadLettered {
                message_id,
                reason: why,
            });
        }
        Err(e) => {
            tracing::warn!(lease = %lease, error = %e, "could not dead-letter the work item; it comes back, and the bus sets it aside at its next receive");
            ctx.report(ResearchError::Bus(e));
        }
    }
}

/// Sends a finished item's last results and acknowledges it, in one step where the bus can
/// (the database bus: one transaction), retrying passing bus failures for up to
/// [`SEND_PATIENCE`]; if they cannot be sent, the item is released for another try (its
/// results come again). Logs the item's one outcome: finished once its results are sent, or
/// failed when they could not be.
pub(crate) async fn answer_and_ack(ctx: &Context, answer: Answer) {
    let Answer {
        mut delivery,
        lease_id,
        results,
        researched,
    } = answer;
    let lease = lease_id.to_string();
    let finished = |acked: Result<(), BusError>| {
        if let Some((slot, took)) = &researched {
            metrics::counter!("archivist_researcher_items_total", "outcome" => "finished")
                .increment(1);
            Counts::add(&ctx.counts.finished, 1);
            match &acked {
                Ok(()) => tracing::info!(slot, lease = %lease, took = %took, "work item finished"),
                // It comes back after its visibility timeout; its results are recorded once
                // anyway.
                Err(e) => {
                    tracing::warn!(slot, lease = %lease, took = %took, error = %e, "work item finished, its results sent, but not acknowledged: it comes back after its visibility timeout");
                }
            }
        } else if let Err(e) = &acked {
            tracing::warn!(lease = %lease, error = %e, "could not acknowledge the work item");
        }
        if let Err(e) = acked {
            ctx.report(ResearchError::Bus(e));
        }
    };
    if results.is_empty() {
        finished(delivery.ack().await);
        return;
    }
    let bodies: Vec<Vec<u8>> = results.iter().map(encode).collect();
    let mut patience = Patience::new();
    loop {
        match ctx.results.send_and_ack(bodies.clone(), delivery).await {
            Ok(acked) => {
                Counts::add(&ctx.counts.results_sent, results.len() as u64);
                finished(acked);
                return;
            }
            Err(Unsent {
                error,
                delivery: back,
            }) if patience.allows(&error) => {
                tracing::warn!(lease = %lease, error = %error, retry_in = ?patience.pause, "could not send results; trying again");
                delivery = back;
                patience.wait().await;
            }
            Err(Unsent {
                error,
                delivery: back,
            }) => {
                let slot = researched.as_ref().map(|(slot, _)| *slot);
                let why = format!("cannot send results: {error}");
                metrics::counter!("archivist_researcher_items_total", "outcome" => "failed")
                    .increment(1);
                match settle_release(ctx, back).await {
                    Ok(()) => {
                        tracing::warn!(slot, lease = %lease, reason = %why, "work item failed; released for another try");
                    }
                    Err(e) => {
                        tracing::warn!(slot, lease = %lease, reason = %why, error = %e, "work item failed and could not be released: it comes back after its visibility timeout");
                    }
                }
                ctx.report(ResearchError::ItemFailed {
                    lease_id,
                    reason: why,
                });
                return;
            }
        }
    }
}

/// Releases `delivery` for another try (counted); the error is the caller's to log, with the
/// item's outcome, in one line.
async fn settle_release(ctx: &Context, delivery: Delivery) -> Result<(), String> {
    match delivery.release().await {
        Ok(()) => {
            Counts::add(&ctx.counts.released, 1);
            Ok(())
        }
        Err(e) => {
            let said = e.to_string();
            ctx.report(ResearchError::Bus(e));
            Err(said)
        }
    }
}

/// Researches `item`. `last_try`: the item's receive count when this is its last allowed
/// receive; an analyser that fails then gives the item up (see [`Results::analyser_failed`]).
async fn research(
    ctx: &Context,
    slot: usize,
    item: &PendingResearchItem,
    last_try: Option<u32>,
) -> Outcome {
    let mut results = Results::new(ctx, item);
    results.last_try = last_try;
    let stop = &ctx.hard_stop;

    // Media known to fail, and unchanged since: every pair fails at once, as the media's
    // earlier pairs did, without a download or a decode.
    if let Some(why) = ctx
        .media
        .known_failure(
            &item.episode.media_uri,
            item.clips.iter().map(|c| c.title.as_str()),
            stop,
        )
        .await
    {
        for clip in &item.clips {
            if let Err(e) = results.failure(&clip.title, &why) {
                return results.fail(e).await;
            }
        }
        return results.done();
    }

    // The episode, once for the whole item; not here when the analyser fetches it itself
    // (if it needs its audio at all: it may answer from the episode's print).
    let lazy = ctx.analyser.fetches_episode();
    let episode = if lazy {
        None
    } else {
        match ctx
            .media
            .episode(&item.episode, Some(item.lease_expires_at), stop)
            .await
        {
            Ok(Fetched { entry, cache_hit }) => {
                tracing::debug!(lease = %item.lease_id, cache_hit, bytes = entry.size, "episode media ready");
                Some(entry)
            }
            Err(MediaError::Gone(why)) => {
                tracing::info!(lease = %item.lease_id, reason = %why, "episode media gone: every pair fails");
                for clip in &item.clips {
                    if let Err(e) = results.failure(&clip.title, &format!("episode {why}")) {
                        return results.fail(e).await;
                    }
                }
                return results.done();
            }
            Err(MediaError::Passing(why)) => {
                return results.fail(format!("episode media: {why}")).await
            }
            Err(MediaError::Cancelled) => return results.released_at_drain().await,
        }
    };
    if let Some(episode) = &episode {
        results.episode_hash = episode.sha256.clone();
    }

    // The clips, each from the cache when another item fetched it.
    let stamps = ctx
        .media
        .stamps(item.clips.iter().map(|c| c.media_uri.as_str()))
        .await;
    let mut given: Vec<(usize, String)> = Vec::new();
    let mut clip_entries = HashMap::new();
    for (i, clip) in item.clips.iter().enumerate() {
        match ctx
            .media
            .fetch_stamped(&clip.media_uri, &stamps, Some(item.lease_expires_at), stop)
            .await
        {
            Ok(Fetched { entry, cache_hit }) => {
                tracing::debug!(clip = %clip.title, cache_hit, bytes = entry.size, "clip media ready");
                results
                    .clip_hashes
                    .insert(clip.title.clone(), entry.sha256.clone());
                given.push((i, entry.path.display().to_string()));
                clip_entries.insert(clip.title.clone(), entry);
            }
            Err(MediaError::Gone(why)) => {
                if let Err(e) = results.failure(&clip.title, &format!("clip {why}")) {
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
        return results.done();
    }

    // The analyser.
    let titles: HashMap<String, usize> = given
        .iter()
        .filter_map(|(i, _)| item.clips.get(*i).map(|c| (c.title.clone(), *i)))
        .collect();
    let episode_path = episode
        .as_ref()
        .map(|e| e.path.display().to_string())
        .unwrap_or_default();
    let input = protocol::analyser_input(item, &episode_path, &given);
    // Recorded however the run ends (a crash, a stall, exit 75, the drain), not only when it
    // finishes: the histogram is the time slots spend in analysers.
    let timer = AnalysisTimer(Instant::now());
    let lease = item.lease_id.to_string();
    // Starting counts as the first line: an HTTP service that accepts the request and never
    // answers its headers is a stall, and must not hold the slot through a shutdown either.
    let started = tokio::select! {
        _ = stop.cancelled() => return results.released_at_drain().await,
        started = tokio::time::timeout(ctx.stall_timeout, if lazy {
            let media = EpisodeMedia::new(
                ctx.media.clone(),
                &item.episode.media_uri,
                Some(item.lease_expires_at),
                stop.clone(),
                ctx.prints.clone(),
            )
            .with_episode(item.episode.clone());
            ctx.analyser.start_fetching(input, &lease, media)
        } else {
            ctx.analyser.start(input, &lease)
        }) => started,
    };
    let mut run = match started {
        Ok(Ok(run)) => run,
        Ok(Err(e)) => {
            return results
                .analyser_failed(analyser::reason(&*e), &titles, &HashSet::new())
                .await
        }
        Err(_) => {
            return results
                .analyser_failed(
                    format!(
                        "the analyser did not answer within {} (--stall-timeout)",
                        humantime::format_duration(ctx.stall_timeout)
                    ),
                    &titles,
                    &HashSet::new(),
                )
                .await
        }
    };
    let mut answered: HashSet<String> = HashSet::new();
    // The analyser's failures, as reported: one reason of the episode's for every clip is
    // the media's failure (see below).
    let mut failed: Vec<String> = Vec::new();
    // The stall timeout counts from the last line, whatever else happens in between.
    let mut stall_at = tokio::time::Instant::now() + ctx.stall_timeout;
    loop {
        // Every clip answered: what was not sent yet is held together, to go out with the
        // item's acknowledgement when the analyser exits within the hold, or at its end,
        // ending the lease, if it does not.
        let all_answered = answered.len() == titles.len();
        // A line written already joins the results not yet sent; when none is, they go out,
        // all but the last (held back), in one send.
        let ready = if results.backlog() && !results.batch_full() {
            line_written(&mut run).await
        } else {
            None
        };
        let next = match ready {
            Some(next) => Ok(next),
            None => {
                if !all_answered {
                    if let Err(e) = results.send_backlog().await {
                        run.stop().await;
                        return results.fail(e).await;
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => {
                        run.stop().await;
                        return results.released_at_drain().await;
                    }
                    _ = results.hold_over(), if results.holding() => {
                        if let Err(e) = results.hold_ended(all_answered).await {
                            run.stop().await;
                            return results.fail(e).await;
                        }
                        continue;
                    }
                    next = tokio::time::timeout_at(stall_at, run.next_line()) => next,
                }
            }
        };
        stall_at = tokio::time::Instant::now() + ctx.stall_timeout;
        let line = match next {
            Err(_) => {
                run.stop().await;
                return results
                    .analyser_failed(
                        format!(
                            "the analyser wrote nothing for {} (--stall-timeout): stopped",
                            humantime::format_duration(ctx.stall_timeout)
                        ),
                        &titles,
                        &answered,
                    )
                    .await;
            }
            Ok(Err(e)) => {
                run.stop().await;
                return results
                    .analyser_failed(analyser::reason(&*e), &titles, &answered)
                    .await;
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
                    .analyser_failed(
                        format!(
                            "the analyser broke the protocol ({why}) in the line {}",
                            protocol::shown(&line)
                        ),
                        &titles,
                        &answered,
                    )
                    .await;
            }
        };
        if let Some(title) = parsed.clip_title() {
            answered.insert(title.to_string());
            if results.episode_hash.is_empty() {
                if let Some(hash) = run.episode_hash() {
                    results.episode_hash = hash;
                }
            }
        }
        let taken = match parsed {
            Line::Progress(text) => {
                tracing::debug!(slot, lease = %lease, progress = %text, "analyser progress");
                ctx.set_progress(slot, text);
                Ok(())
            }
            Line::Failure { clip_title, reason } => {
                // Named by their URIs: the paths are this process's, the reason outlives it.
                let entries = episode.iter().chain(clip_entries.get(&clip_title));
                let reason = media::name_uris(&reason, entries.map(|e| &**e));
                failed.push(reason.clone());
                results.failure(&clip_title, &reason)
            }
            Line::Answer {
                clip_title,
                clip_offsets_ns,
                clip_match_scores,
                clip_findable_from_db,
                clip_duration_ns,
                episode_duration_ns,
            } => results.answer(
                &clip_title,
                clip_offsets_ns,
                clip_match_scores,
                clip_findable_from_db,
                clip_duration_ns,
                episode_duration_ns,
            ),
        };
        if let Err(e) = taken {
            run.stop().await;
            return results.analyser_failed(e, &titles, &answered).await;
        }
    }
    // The output ended; the exit follows (a program that closed its output and then hangs
    // is stopped as a stall would be). Results held back go out when the hold ends.
    let all_answered = answered.len() == titles.len();
    let waited = {
        let finish = tokio::time::timeout(ctx.stall_timeout, run.finish());
        tokio::pin!(finish);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break Exit::Stopped,
                _ = results.hold_over(), if results.holding() => {
                    if let Err(e) = results.hold_ended(all_answered).await {
                        break Exit::SendFailed(e);
                    }
                }
                ending = &mut finish => break Exit::Ended(ending.unwrap_or_else(|_| {
                    Ending::Failed(format!(
                        "the analyser closed its output but did not exit within {} (--stall-timeout): stopped",
                        humantime::format_duration(ctx.stall_timeout)
                    ))
                })),
            }
        }
    };
    let ending = match waited {
        Exit::Ended(ending) => ending,
        Exit::Stopped => {
            run.stop().await;
            return results.released_at_drain().await;
        }
        Exit::SendFailed(e) => {
            run.stop().await;
            return results.fail(e).await;
        }
    };
    if all_answered && !results.ended() && !matches!(ending, Ending::Done) {
        // Every clip was answered: the results go out now, the last one ending the lease,
        // whatever the exit. An exit that fails the item leaves every pair researched; its
        // next try, if any, records them once more, harmlessly.
        if let Err(e) = results.end_lease().await {
            run.stop().await;
            return results.fail(e).await;
        }
    }
    if matches!(ending, Ending::Failed(_)) {
        // Stopped if it still runs (the wait above gave up on it).
        run.stop().await;
    }
    drop(clip_entries);
    drop(timer);
    match ending {
        Ending::Done => {
            if let Some(why) = media_failure(&failed, titles.len()) {
                ctx.media.remember_failure(
                    &item.episode.media_uri,
                    why,
                    titles.keys().map(String::as_str),
                );
            }
            let unanswered = titles.len() - answered.len();
            if unanswered > 0 {
                tracing::info!(lease = %lease, unanswered, "the analyser left clips unanswered: they are researched again after the lease expires");
            }
            results.done()
        }
        Ending::TryLater(why) => results.later(why, &titles, &answered).await,
        Ending::Failed(why) => results.analyser_failed(why, &titles, &answered).await,
    }
}

/// The media's own failure among an item's `failed` reasons, when there is one: every one
/// of its `clips` failed with one reason, and that reason is the episode's (the reference
/// analyser's words for media it cannot decode begin "the episode"). Media failing so is
/// remembered ([`media::Media::remember_failure`]), and its new clips fail at once.
fn media_failure(failed: &[String], clips: usize) -> Option<&str> {
    let (first, rest) = failed.split_first()?;
    let one = failed.len() == clips && rest.iter().all(|r| r == first);
    (one && first.starts_with("the episode")).then_some(first.as_str())
}

/// How the wait for the analyser's exit ended.
enum Exit {
    Ended(Ending),
    /// The drain timeout.
    Stopped,
    /// Results held back could not be sent.
    SendFailed(String),
}

/// The analyser's next line if it is there to be read now (`None` if reading it would wait).
/// Dropping `next_line` unfinished loses nothing (see [`Run`]).
async fn line_written(run: &mut Box<dyn Run>) -> Option<Result<Option<String>, BoxError>> {
    tokio::select! {
        biased;
        next = run.next_line() => Some(next),
        () = std::future::ready(()) => None,
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

/// The results of one item, sent as they come: every result read is sent as soon as the
/// analyser has no further line written (one send for all of them), except the latest, which
/// is held back until the next arrives, the item ends or [`HOLD`] passes, so that the last
/// one sent can carry `revoke_lease` when the item finished (and does not when it failed: the
/// lease then stays with the item's next try). Once every clip is answered, what was not sent
/// is held together: when the analyser exits (successfully) within the hold, it goes out with
/// the item's acknowledgement, in one transaction on the database bus, while the slot takes
/// its next item; otherwise it goes out at the end of the hold, ending the lease, before the
/// exit. When the last answer was sent before the item ended, it is sent again with
/// `revoke_lease`: a result is recorded once however often it is delivered.
struct Results<'a> {
    ctx: &'a Context,
    item: &'a PendingResearchItem,
    /// Read and not sent yet, in the order read; the last is the one held back.
    unsent: Vec<CompletedResearchItem>,
    held_since: tokio::time::Instant,
    last_sent: Option<CompletedResearchItem>,
    /// The lease was ended (a result with `revoke_lease` sent).
    lease_ended: bool,
    episode_hash: String,
    clip_hashes: HashMap<String, String>,
    /// The item's receive count when this is its last allowed receive.
    last_try: Option<u32>,
}

impl<'a> Results<'a> {
    fn new(ctx: &'a Context, item: &'a PendingResearchItem) -> Self {
        Results {
            ctx,
            item,
            unsent: Vec::new(),
            held_since: tokio::time::Instant::now(),
            last_sent: None,
            lease_ended: false,
            episode_hash: String::new(),
            clip_hashes: HashMap::new(),
            last_try: None,
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
            clip_match_scores: None,
            failure: None,
            clip_findability: None,
        })
    }

    fn answer(
        &mut self,
        clip_title: &str,
        offsets: Vec<i64>,
        scores: Option<Vec<f64>>,
        findable_from_db: Option<Option<i32>>,
        clip_duration_ns: i64,
        episode_duration_ns: i64,
    ) -> Result<(), String> {
        let mut result = self.base(clip_title)?;
        result.clip_offsets_ns = offsets;
        result.clip_match_scores = scores;
        result.clip_findability =
            findable_from_db.map(|from_db| archivist::messages::Findability { from_db });
        result.clip_duration_ns = clip_duration_ns;
        result.episode_duration_ns = episode_duration_ns;
        metrics::counter!("archivist_researcher_clips_total", "result" => "researched")
            .increment(1);
        self.push(result)
    }

    fn failure(&mut self, clip_title: &str, reason: &str) -> Result<(), String> {
        let mut result = self.base(clip_title)?;
        result.failure = Some(protocol::truncate(
            reason,
            archivist::messages::MAX_SHORT_TEXT,
        ));
        metrics::counter!("archivist_researcher_clips_total", "result" => "failed").increment(1);
        self.push(result)
    }

    fn push(&mut self, result: CompletedResearchItem) -> Result<(), String> {
        result
            .validate()
            .map_err(|e| format!("a result would be poison: {e}"))?;
        self.unsent.push(result);
        self.held_since = tokio::time::Instant::now();
        Ok(())
    }

    /// Whether a result is held back.
    fn holding(&self) -> bool {
        !self.unsent.is_empty()
    }

    /// Whether results wait to be sent besides the one held back.
    fn backlog(&self) -> bool {
        self.unsent.len() > 1
    }

    /// Whether the results not sent fill a send.
    fn batch_full(&self) -> bool {
        self.unsent.len() > MAX_BATCH
    }

    /// Ready when the held result has waited [`HOLD`].
    async fn hold_over(&self) {
        tokio::time::sleep_until(self.held_since + HOLD).await;
    }

    /// The hold is over: with every clip answered, every result not sent yet goes out, the
    /// last ending the lease; otherwise the one held back goes out as it is.
    async fn hold_ended(&mut self, all_answered: bool) -> Result<(), String> {
        if all_answered && !self.lease_ended {
            self.end_lease().await
        } else {
            self.flush(false).await
        }
    }

    /// Sends the results not sent yet but the one held back.
    async fn send_backlog(&mut self) -> Result<(), String> {
        if let Some(held) = self.unsent.pop() {
            let batch = std::mem::take(&mut self.unsent);
            self.unsent.push(held);
            self.send(batch).await?;
        }
        Ok(())
    }

    /// Sends every result not sent yet; with `revoke`, the last as the lease's last result.
    async fn flush(&mut self, revoke: bool) -> Result<(), String> {
        if let Some(last) = self.unsent.last_mut() {
            last.revoke_lease = revoke;
        }
        let batch = std::mem::take(&mut self.unsent);
        self.send(batch).await
    }

    async fn send(&mut self, mut batch: Vec<CompletedResearchItem>) -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        send_patiently(&*self.ctx.results, batch.iter().map(encode).collect()).await?;
        Counts::add(&self.ctx.counts.results_sent, batch.len() as u64);
        self.last_sent = batch.pop();
        Ok(())
    }

    /// Whether the lease was ended already.
    fn ended(&self) -> bool {
        self.lease_ended
    }

    /// Sends every result not sent yet, the last ending the lease (or, if all were sent, the
    /// last again, ending it).
    async fn end_lease(&mut self) -> Result<(), String> {
        if self.unsent.is_empty() {
            // Everything was sent already: the last answer again, ending the lease.
            if let Some(mut last) = self.last_sent.take() {
                last.revoke_lease = true;
                self.send(vec![last]).await?;
            }
        } else {
            self.flush(true).await?;
        }
        self.lease_ended = true;
        Ok(())
    }

    /// The item finished: the results not sent yet, the last ending the lease (or, if all
    /// were sent, the last again, ending it), to go out with the item's acknowledgement;
    /// none when the lease was ended already.
    fn done(mut self) -> Outcome {
        if self.lease_ended {
            return Outcome::Finished(Vec::new());
        }
        if self.unsent.is_empty() {
            if let Some(last) = self.last_sent.as_mut() {
                last.revoke_lease = true;
            }
            return Outcome::Finished(self.last_sent.take().into_iter().collect());
        }
        if let Some(last) = self.unsent.last_mut() {
            last.revoke_lease = true;
        }
        Outcome::Finished(std::mem::take(&mut self.unsent))
    }

    async fn released(mut self, why: String) -> Outcome {
        if let Err(e) = self.flush(false).await {
            return Outcome::Failed(format!("{why}; and {e}"));
        }
        Outcome::Released(why)
    }

    /// The analyser asked for a later try: the results so far go out, the item is held and
    /// released; on the item's last allowed try, it is given up instead.
    async fn later(
        mut self,
        why: String,
        titles: &HashMap<String, usize>,
        answered: &HashSet<String>,
    ) -> Outcome {
        if let Some(receive) = self.last_try {
            let why = format!(
                "{why}: asked to try later on the item's last allowed try ({receive} of \
                 ARCHIVIST_MAX_RECEIVES)"
            );
            return self.give_up(why, titles, answered).await;
        }
        if let Err(e) = self.flush(false).await {
            return Outcome::Failed(format!("{why}; and {e}"));
        }
        Outcome::Later(why)
    }

    /// The analyser failed: the item is released for another try, or, on its last allowed
    /// try, given up.
    async fn analyser_failed(
        self,
        why: String,
        titles: &HashMap<String, usize>,
        answered: &HashSet<String>,
    ) -> Outcome {
        match self.last_try {
            Some(receive) => {
                let why = format!(
                    "{why} (the item's last allowed try: {receive} of ARCHIVIST_MAX_RECEIVES)"
                );
                self.give_up(why, titles, answered).await
            }
            None => self.fail(why).await,
        }
    }

    /// Gives the item up: every clip given to the analyser and not answered is sent as failed
    /// research with `why`, the last result ending the lease, so that its pairs are not
    /// stranded under it (`retry-failed` brings them back).
    async fn give_up(
        mut self,
        why: String,
        titles: &HashMap<String, usize>,
        answered: &HashSet<String>,
    ) -> Outcome {
        let mut unanswered: Vec<(&String, &usize)> = titles
            .iter()
            .filter(|(title, _)| !answered.contains(*title))
            .collect();
        unanswered.sort_by_key(|(_, i)| **i);
        for (title, _) in unanswered {
            if let Err(e) = self.failure(title, &why) {
                return Outcome::Failed(format!("{why}; and {e}"));
            }
        }
        if !self.lease_ended {
            if let Err(e) = self.end_lease().await {
                return Outcome::Failed(format!("{why}; and {e}"));
            }
        }
        Outcome::GaveUp(why)
    }

    /// The analysers were stopped ([`Context::stop_now`]): released, for the reason given
    /// there (the drain timeout passed, or another slot stopped the researcher).
    async fn released_at_drain(self) -> Outcome {
        let why = format!("stopping: {}", self.ctx.stop_reason());
        self.released(why).await
    }

    async fn fail(mut self, why: String) -> Outcome {
        if let Err(e) = self.flush(false).await {
            return Outcome::Failed(format!("{why}; and {e}"));
        }
        Outcome::Failed(why)
    }
}

/// Sends results, retrying passing bus failures for up to [`SEND_PATIENCE`] (a result sent
/// twice by a retry after a failure mid-way is recorded once).
async fn send_patiently(sender: &dyn Sender, bodies: Vec<Vec<u8>>) -> Result<(), String> {
    let mut patience = Patience::new();
    loop {
        match sender.send_batch(bodies.clone()).await {
            Ok(()) => return Ok(()),
            Err(e) if patience.allows(&e) => {
                tracing::warn!(error = %e, retry_in = ?patience.pause, "could not send results; trying again");
                patience.wait().await;
            }
            Err(e) => return Err(format!("cannot send results: {e}")),
        }
    }
}

/// The retry schedule of a result's send: passing bus failures are tried again after 200 ms,
/// doubling to at most 5 s, for up to [`SEND_PATIENCE`] in all.
struct Patience {
    deadline: Instant,
    pause: Duration,
}

impl Patience {
    fn new() -> Patience {
        Patience {
            deadline: Instant::now() + SEND_PATIENCE,
            pause: Duration::from_millis(200),
        }
    }

    /// Whether a send that failed with `error` is to be tried again: the failure passes, and
    /// the next try comes before the deadline.
    fn allows(&self, error: &BusError) -> bool {
        error.is_retryable() && Instant::now() + self.pause < self.deadline
    }

    /// Waits before the next try; the one after waits twice as long.
    async fn wait(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use messagebus::{BusError, DeadLetter, QueueStats};
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
    use tokio_util::sync::CancellationToken;

    use crate::analyser::Analyser;
    use crate::media::{Media, MediaConfig};
    use crate::status::Status;
    use crate::Later;

    use super::*;

    /// An analyser whose lines are written by the test, so that the test decides which lines
    /// are there to be read together.
    struct Scripted(Mutex<Option<UnboundedReceiver<String>>>, Ending);

    #[async_trait]
    impl Analyser for Scripted {
        async fn start(&self, _input: Vec<u8>, _lease: &str) -> Result<Box<dyn Run>, BoxError> {
            let lines = self.0.lock().unwrap().take().unwrap();
            Ok(Box::new(ScriptedRun(lines, self.1.clone())))
        }

        fn describe(&self) -> String {
            "scripted".into()
        }
    }

    struct ScriptedRun(UnboundedReceiver<String>, Ending);

    #[async_trait]
    impl Run for ScriptedRun {
        async fn next_line(&mut self) -> Result<Option<String>, BoxError> {
            Ok(self.0.recv().await)
        }

        async fn finish(&mut self) -> Ending {
            self.1.clone()
        }

        async fn stop(self: Box<Self>) {}
    }

    /// Each send: the clip titles it carried, with `*` on the one that revokes the lease.
    struct Recording(UnboundedSender<Vec<String>>);

    #[async_trait]
    impl Sender for Recording {
        async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
            let sent = bodies
                .iter()
                .map(|b| {
                    let r: CompletedResearchItem = decode(b).unwrap();
                    format!("{}{}", r.clip.title, if r.revoke_lease { "*" } else { "" })
                })
                .collect();
            self.0.send(sent).unwrap();
            Ok(())
        }

        async fn inspect(&self) -> Result<QueueStats, BusError> {
            Ok(QueueStats::default())
        }

        async fn peek_dead_letters(
            &self,
            _limit: usize,
            _max_body_bytes: usize,
        ) -> Result<Option<Vec<DeadLetter>>, BusError> {
            Ok(None)
        }

        fn queue(&self) -> &str {
            "completed_research"
        }
    }

    struct Harness {
        _dir: tempfile::TempDir,
        ctx: Context,
        item: PendingResearchItem,
        write: UnboundedSender<String>,
        sends: UnboundedReceiver<Vec<String>>,
    }

    /// A work item of `clips` clips (local files) and a researcher context around it, its
    /// analyser's run ending as `ending`.
    fn harness_ending(clips: u32, ending: Ending) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"media").unwrap();
            path.display().to_string()
        };
        let mut episode = datastore::testing::episode(1);
        episode.media_uri = file("episode".into());
        let item = PendingResearchItem {
            lease_id: uuid::Uuid::new_v4(),
            lease_expires_at: Utc::now() + chrono::Duration::hours(1),
            episode,
            clips: (1..=clips)
                .map(|i| {
                    let mut clip = datastore::testing::clip(i);
                    clip.media_uri = file(format!("clip-{i}"));
                    clip
                })
                .collect(),
        };
        let (write, lines) = unbounded_channel();
        let (sent, sends) = unbounded_channel();
        let ctx = Context {
            analyser: Arc::new(Scripted(Mutex::new(Some(lines)), ending)),
            media: Arc::new(
                Media::new(MediaConfig {
                    cache_dir: dir.path().join("cache"),
                    cache_size: 1 << 20,
                    max_size: 1 << 20,
                    media_roots: Vec::new(),
                    connect_timeout: Duration::from_secs(1),
                    read_timeout: Duration::from_secs(1),
                    attempts: 1,
                    addresses: Default::default(),
                    min_rate: 0,
                })
                .unwrap(),
            ),
            prints: Arc::default(),
            results: Arc::new(Recording(sent)),
            hard_stop: CancellationToken::new(),
            stop_reason: Default::default(),
            stall_timeout: Duration::from_secs(60),
            status: Status::new("scripted".into(), 1),
            max_receives: 5,
            later: Later::default(),
            stopping: CancellationToken::new(),
            counts: Default::default(),
            errors: tokio::sync::mpsc::channel(16).0,
        };
        Harness {
            _dir: dir,
            ctx,
            item,
            write,
            sends,
        }
    }

    fn harness(clips: u32) -> Harness {
        harness_ending(clips, Ending::Done)
    }

    fn answer(i: u32) -> String {
        format!(
            r#"{{"clip_title":"Clip {i}","clip_offsets_ns":[],"clip_duration_ns":1,"episode_duration_ns":2}}"#
        )
    }

    /// The next send, while the item is still being researched.
    async fn sent_meanwhile(
        research: std::pin::Pin<&mut impl std::future::Future<Output = Outcome>>,
        sends: &mut UnboundedReceiver<Vec<String>>,
    ) -> Vec<String> {
        tokio::select! {
            _ = research => panic!("the item ended before its analyser did"),
            sent = sends.recv() => sent.unwrap(),
        }
    }

    /// The results a finished item sends with its acknowledgement, named as
    /// [`Recording`] names them.
    fn finished(outcome: Outcome) -> Vec<String> {
        let Outcome::Finished(results) = outcome else {
            panic!("not finished: {outcome:?}")
        };
        results
            .iter()
            .map(|r| format!("{}{}", r.clip.title, if r.revoke_lease { "*" } else { "" }))
            .collect()
    }

    fn titles(range: std::ops::RangeInclusive<u32>) -> Vec<String> {
        range.map(|i| format!("Clip {i}")).collect()
    }

    // Time is paused (and moves only when every task waits), so the hold never runs out while
    // the test is between two steps.
    #[tokio::test(start_paused = true)]
    async fn lines_written_together_go_out_in_one_send_but_the_one_held_back() {
        let mut h = harness(5);
        for i in 1..=3 {
            h.write.send(answer(i)).unwrap();
        }
        let research = research(&h.ctx, 0, &h.item, None);
        tokio::pin!(research);
        let first = sent_meanwhile(research.as_mut(), &mut h.sends).await;
        assert_eq!(first, titles(1..=2), "the third is held back");
        h.write.send(answer(4)).unwrap();
        h.write.send(answer(5)).unwrap();
        drop(h.write);
        let mut last = titles(3..=5);
        last[2].push('*');
        assert_eq!(finished(research.await), last, "with the acknowledgement");
        assert!(h.sends.try_recv().is_err(), "nothing else was sent");
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_burst_goes_out_in_sends_of_at_most_max_batch() {
        let mut h = harness(1_200);
        for i in 1..=1_200 {
            h.write.send(answer(i)).unwrap();
        }
        drop(h.write);
        let last = finished(research(&h.ctx, 0, &h.item, None).await);
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        while let Ok(sent) = h.sends.try_recv() {
            sizes.push(sent.len());
            all.extend(sent);
        }
        sizes.push(last.len());
        all.extend(last);
        assert_eq!(sizes, [MAX_BATCH, MAX_BATCH, 1_200 - 2 * MAX_BATCH]);
        let mut expected = titles(1..=1_200);
        expected[1_199].push('*');
        assert_eq!(all, expected, "in order, only the last revoking");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_analyser_has_its_held_answer_sent_after_the_hold() {
        let mut h = harness(2);
        h.write.send(answer(1)).unwrap();
        let research = research(&h.ctx, 0, &h.item, None);
        tokio::pin!(research);
        // Nothing else is written: time moves to the end of the hold, and the answer goes.
        let first = sent_meanwhile(research.as_mut(), &mut h.sends).await;
        assert_eq!(first, titles(1..=1));
        h.write.send(answer(2)).unwrap();
        drop(h.write);
        assert_eq!(finished(research.await), ["Clip 2*"]);
        assert!(h.sends.try_recv().is_err(), "nothing else was sent");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_on_the_last_try_fails_the_unanswered_pairs_and_ends_the_lease() {
        let mut h = harness_ending(3, Ending::Failed("the analyser exited with code 1".into()));
        h.write.send(answer(1)).unwrap();
        drop(h.write);
        let outcome = research(&h.ctx, 0, &h.item, Some(5)).await;
        let Outcome::GaveUp(why) = outcome else {
            panic!("{outcome:?}")
        };
        assert!(why.starts_with("the analyser exited with code 1"), "{why}");
        assert_eq!(
            h.sends.recv().await.unwrap(),
            ["Clip 1", "Clip 2", "Clip 3*"]
        );
        assert!(h.sends.try_recv().is_err(), "nothing else was sent");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_before_the_last_try_fails_no_pair() {
        let mut h = harness_ending(3, Ending::Failed("the analyser exited with code 1".into()));
        h.write.send(answer(1)).unwrap();
        drop(h.write);
        let outcome = research(&h.ctx, 0, &h.item, None).await;
        assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
        assert_eq!(
            h.sends.recv().await.unwrap(),
            ["Clip 1"],
            "the lease stands"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_clip_answered_ends_the_lease_whatever_the_exit() {
        let mut h = harness_ending(2, Ending::TryLater("busy".into()));
        h.write.send(answer(1)).unwrap();
        h.write.send(answer(2)).unwrap();
        drop(h.write);
        let outcome = research(&h.ctx, 0, &h.item, None).await;
        assert!(matches!(outcome, Outcome::Later(_)), "{outcome:?}");
        assert_eq!(h.sends.recv().await.unwrap(), ["Clip 1", "Clip 2*"]);
        assert!(h.sends.try_recv().is_err(), "nothing else was sent");
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_answer_ends_the_lease_before_the_exit() {
        let mut h = harness_ending(3, Ending::Failed("the analyser exited with code 1".into()));
        for i in 1..=3 {
            h.write.send(answer(i)).unwrap();
        }
        // The analyser's output stays open: every clip is answered, but the run goes on.
        let research = research(&h.ctx, 0, &h.item, None);
        tokio::pin!(research);
        let sent = sent_meanwhile(research.as_mut(), &mut h.sends).await;
        assert_eq!(
            sent,
            ["Clip 1", "Clip 2", "Clip 3*"],
            "one send, ending the lease"
        );
        drop(h.write);
        // The exit still fails the item (it is tried again); its results stand.
        assert!(matches!(research.await, Outcome::Failed(_)));
        assert!(h.sends.try_recv().is_err(), "nothing else was sent");
    }
}
