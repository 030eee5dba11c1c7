//! The pending-research archivist: one work-assignment run.
//!
//! capacity = researchers − items waiting on `pending_research` (researchers from the config,
//! else the bus's consumer count less the API gateways' own receivers; plus the remote
//! researchers present through the API, from the datastore). While capacity is positive, or once when there are neither
//! researchers nor waiting items, lease the next work item and publish it. A lease that could
//! not be published is cancelled at once ([`LeaseUpdate::Cancel`]) so that its pairs are free
//! again.
//!
//! Optionally ([`PendingResearchConfig::hold_back`]), nothing is leased while the results
//! researchers already sent wait in numbers on `completed_research`: work handed out faster
//! than its results are recorded only lengthens that queue, and results that wait longer than
//! their lease lets their pairs be leased and researched again.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use datastore::{
    DataStore, DataStoreError, Lease, LeaseRequest, LeaseUpdate, Presence, TransactionalBus,
};
use messagebus::{BusError, Sender};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::messages::{self, PendingResearchItem};
use crate::runner::{self, Run};
use crate::telemetry;
use crate::{ArchivistError, ArchivistHandle, Ended, RetryError, RetryPolicy};

/// Holding work back while results wait to be recorded.
#[derive(Clone)]
pub struct HoldBack {
    /// The results queue (`completed_research`), looked at with [`Sender::waiting_at_least`].
    pub results: Arc<dyn Sender>,
    /// A run leases nothing while at least this many results wait on it.
    pub max_waiting: u64,
}

impl std::fmt::Debug for HoldBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldBack")
            .field("results", &self.results.queue())
            .field("max_waiting", &self.max_waiting)
            .finish()
    }
}

/// Settings of a work-assignment run.
#[derive(Debug, Clone)]
pub struct PendingResearchConfig {
    /// How long a lease lasts without renewal.
    pub lease_duration: chrono::Duration,
    /// The most clips in one work item.
    pub max_clips: u32,
    /// The researcher count, for a bus that cannot count its consumers (SQS). When `None`,
    /// the bus's own consumer count is used; a bus without one ends the run with an error.
    pub researchers: Option<u64>,
    /// The run starts after a random wait of up to this long, so that cron runs on several
    /// hosts do not all hit the datastore at the same second. Zero in tests.
    pub start_jitter: Duration,
    /// Backoff for passing datastore and bus failures.
    pub retry: RetryPolicy,
    /// When set, a run leases nothing while as many results as it says wait to be recorded.
    /// `None` (the default): work is assigned by the capacity rule alone.
    pub hold_back: Option<HoldBack>,
    /// A remote researcher (through the API gateway) counts while it was seen within this
    /// long; also how long a gateway's own receivers count. [`datastore::PRESENCE_WINDOW`]
    /// unless configured (`ARCHIVIST_PRESENCE_WINDOW`), and the same for every archivist and
    /// gateway.
    pub presence_window: Duration,
}

impl Default for PendingResearchConfig {
    fn default() -> Self {
        PendingResearchConfig {
            lease_duration: chrono::Duration::hours(2),
            max_clips: 50,
            researchers: None,
            start_jitter: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            hold_back: None,
            presence_window: datastore::PRESENCE_WINDOW,
        }
    }
}

/// Starts one work-assignment run publishing to `sender` (the `pending_research` queue).
pub fn start(
    token: CancellationToken,
    sender: Arc<dyn Sender>,
    store: Arc<dyn DataStore>,
    config: PendingResearchConfig,
) -> ArchivistHandle {
    runner::spawn(
        "pending-research",
        token,
        config.retry,
        move |mut run| async move {
            let ended = assign(&mut run, &*sender, &*store, &config).await;
            (run, ended)
        },
    )
}

/// One work-assignment run, step by step: wait out the start jitter, count the capacity, hold
/// back while results wait to be recorded, then lease and publish one item at a time until the
/// capacity is used or the work runs out.
async fn assign(
    run: &mut Run,
    sender: &dyn Sender,
    store: &dyn DataStore,
    config: &PendingResearchConfig,
) -> Ended {
    match assign_steps(run, sender, store, config).await {
        Ok(()) => Ended::Finished,
        Err(ended) => ended,
    }
}

/// [`assign`]'s steps; `Err` carries how the run ends early (cancelled, failed, or finished
/// by holding back).
async fn assign_steps(
    run: &mut Run,
    sender: &dyn Sender,
    store: &dyn DataStore,
    config: &PendingResearchConfig,
) -> Result<(), Ended> {
    wait_start_jitter(run, config).await?;
    let capacity = count_capacity(run, sender, store, config).await?;
    // Said at DEBUG: an idle `--every` loop goes round every second. A run that publishes
    // says so at INFO ("work assigned"), with these figures.
    tracing::debug!(
        queue = sender.queue(),
        researchers = capacity.researchers,
        remote_researchers = capacity.remote_researchers,
        gateway_receivers = capacity.gateway_receivers,
        waiting = capacity.waiting,
        to_publish = capacity.to_publish,
        "assigning work"
    );
    if capacity.to_publish > 0 {
        if let Some(hold) = &config.hold_back {
            hold_back(run, hold).await?;
        }
    }
    let published_before = run.report.published;
    let outcome = publish_items(run, sender, store, config, capacity.to_publish).await;
    let published = run.report.published - published_before;
    if published > 0 {
        // Something changed: said at INFO, with the figures it was decided on.
        tracing::info!(
            queue = sender.queue(),
            researchers = capacity.researchers,
            remote_researchers = capacity.remote_researchers,
            gateway_receivers = capacity.gateway_receivers,
            waiting = capacity.waiting,
            to_publish = capacity.to_publish,
            published,
            "work assigned"
        );
    }
    outcome
}

/// Waits a random part of [`PendingResearchConfig::start_jitter`] (none when it is zero).
async fn wait_start_jitter(run: &Run, config: &PendingResearchConfig) -> Result<(), Ended> {
    if !config.start_jitter.is_zero() {
        let wait = config.start_jitter.mul_f64(rand::random::<f64>());
        tracing::info!(
            "waiting {:.1} s before leasing (ARCHIVIST_START_JITTER)",
            wait.as_secs_f64()
        );
        tokio::select! {
            biased;
            _ = run.token.cancelled() => return Err(Ended::Cancelled),
            _ = tokio::time::sleep(wait) => {}
        }
    }
    if run.token.is_cancelled() {
        return Err(Ended::Cancelled);
    }
    Ok(())
}

/// The work-assignment rule's figures for one run.
#[derive(Debug, Clone, Copy)]
struct Capacity {
    /// Researchers counted: the bus's (or configured) less the gateways' receivers, plus the
    /// remote researchers present.
    researchers: u64,
    /// Of them, the researchers present through the API.
    remote_researchers: u64,
    /// The gateways' own receivers, which the bus counted among its consumers.
    gateway_receivers: u64,
    /// Items waiting on the queue.
    waiting: u64,
    /// Items to lease and publish in this run.
    to_publish: u64,
}

/// Counts the researchers and the waiting items: capacity = researchers − waiting, or one item
/// when there are neither (so that the first researcher to start finds work at once).
async fn count_capacity(
    run: &Run,
    sender: &dyn Sender,
    store: &dyn DataStore,
    config: &PendingResearchConfig,
) -> Result<Capacity, Ended> {
    let stats = run
        .retrying("inspect", BusError::is_retryable, || sender.inspect())
        .await
        .map_err(bus_ended)?;
    let Some(local) = config.researchers.or(stats.consumers) else {
        return Err(Ended::Failed(ArchivistError::Config(format!(
            "the bus cannot count the researchers consuming {:?}: configure their number \
             (ARCHIVIST_RESEARCHERS)",
            sender.queue()
        ))));
    };
    let presence = remote_presence(run, store, config).await?;
    let gateway_receivers = if config.researchers.is_none() {
        presence.gateway_receivers.min(local)
    } else {
        0
    };
    let researchers = local - gateway_receivers + presence.researchers;
    let to_publish = if researchers == 0 && stats.waiting == 0 {
        1
    } else {
        researchers.saturating_sub(stats.waiting)
    };
    Ok(Capacity {
        researchers,
        remote_researchers: presence.researchers,
        gateway_receivers,
        waiting: stats.waiting,
        to_publish,
    })
}

/// Remote researchers (through the API gateway, `serve --api`) count one each, from the
/// datastore, wherever this run is; the gateways' own receivers, which the bus counted among
/// its consumers, do not count as researchers. Nothing without API access.
async fn remote_presence(
    run: &Run,
    store: &dyn DataStore,
    config: &PendingResearchConfig,
) -> Result<Presence, Ended> {
    let Some(access) = store.api_access() else {
        return Ok(Presence::default());
    };
    let since = Utc::now() - chrono::Duration::from_std(config.presence_window).unwrap_or_default();
    run.retrying("presence", DataStoreError::is_retryable, || {
        access.presence(since)
    })
    .await
    .map_err(store_ended)
}

/// Ends the run (`Err(Ended::Finished)`) while as many results as `hold` says wait to be
/// recorded.
async fn hold_back(run: &Run, hold: &HoldBack) -> Result<(), Ended> {
    let backlog = run
        .retrying("inspect", BusError::is_retryable, || {
            hold.results.waiting_at_least(hold.max_waiting)
        })
        .await
        .map_err(bus_ended)?;
    if backlog {
        tracing::info!(
            queue = hold.results.queue(),
            max_waiting = hold.max_waiting,
            "holding work back while results wait to be recorded"
        );
        return Err(Ended::Finished);
    }
    Ok(())
}

/// What leasing and publishing one work item came to.
enum ItemOutcome {
    /// Leased and published.
    Published,
    /// Nothing left to lease.
    NoMoreWork,
    /// Nothing published: the item was too large for the bus; lease at most this many clips.
    FewerClips(u32),
}

/// Leases and publishes up to `to_publish` items, one at a time.
async fn publish_items(
    run: &mut Run,
    sender: &dyn Sender,
    store: &dyn DataStore,
    config: &PendingResearchConfig,
    mut to_publish: u64,
) -> Result<(), Ended> {
    let mut max_clips = config.max_clips.max(1);
    // Where the bus's queue lives in the datastore's database, leasing and publishing are one
    // transaction: no lease without its work item, no work item without its lease.
    let in_store = runner::in_store_bus(store, sender).await;
    if in_store.is_some() {
        tracing::debug!("leasing and publishing in one transaction");
    }
    while to_publish > 0 {
        if run.token.is_cancelled() {
            return Err(Ended::Cancelled);
        }
        // Chosen once for every try of this work item: a try whose commit's outcome was lost
        // with its connection is then answered by the lease it made, never a second one.
        let request = LeaseRequest {
            max_clips,
            duration: config.lease_duration,
            now: Utc::now(),
            lease_id: Uuid::new_v4(),
        };
        let outcome = match in_store {
            Some((bus_id, tx)) => {
                lease_and_publish_at_once(run, sender, tx, bus_id, request).await?
            }
            None => lease_then_publish(run, sender, store, request).await?,
        };
        match outcome {
            ItemOutcome::Published => to_publish -= 1,
            ItemOutcome::NoMoreWork => {
                tracing::debug!("no more work to lease");
                break;
            }
            ItemOutcome::FewerClips(fewer) => max_clips = fewer,
        }
    }
    Ok(())
}

/// Counts a published item in the run's report and the metrics.
fn count_published(run: &mut Run, lease_id: Uuid, clips: usize) {
    run.report.published += 1;
    telemetry::count(telemetry::PUBLISHED, run.name, 1);
    tracing::debug!(%lease_id, clips, "work item published");
}

/// Counts a lease made in the run's report and the metrics.
fn count_leased(run: &mut Run, lease: &Lease) {
    run.report.leases_created += 1;
    run.report.pairs_reclaimed += u64::from(lease.reclaimed_pairs);
    telemetry::leases("created", 1);
    telemetry::leases("reclaimed_pairs", u64::from(lease.reclaimed_pairs));
}

/// Leases the next item and publishes it in one transaction of the datastore's database (the
/// bus's queue lives there).
async fn lease_and_publish_at_once(
    run: &mut Run,
    sender: &dyn Sender,
    tx: &dyn TransactionalBus,
    bus_id: &str,
    request: LeaseRequest,
) -> Result<ItemOutcome, Ended> {
    let encode = |lease: &Lease| messages::encode(&item(lease.clone()));
    // Each try starts now, with the same lease id.
    let fresh = || LeaseRequest {
        now: Utc::now(),
        ..request
    };
    match run
        .retrying("lease_and_publish", DataStoreError::is_retryable, || {
            tx.lease_next_and_publish(fresh(), bus_id, sender.queue(), &encode)
        })
        .await
    {
        Ok(Some(lease)) => {
            count_leased(run, &lease);
            count_published(run, lease.id, lease.clips.len());
            Ok(ItemOutcome::Published)
        }
        Ok(None) => Ok(ItemOutcome::NoMoreWork),
        Err(RetryError::Failed(DataStoreError::Bus(BusError::BodyTooLarge { .. })))
            if request.max_clips > 1 =>
        {
            // Nothing was leased (the transaction rolled back): lease fewer clips.
            let max_clips = (request.max_clips / 2).max(1);
            tracing::warn!(
                max_clips,
                "work item too large for the bus, leasing fewer clips"
            );
            Ok(ItemOutcome::FewerClips(max_clips))
        }
        Err(e) => Err(store_ended(e)),
    }
}

/// Leases the next item, then publishes it; a lease whose item could not be published is
/// cancelled.
async fn lease_then_publish(
    run: &mut Run,
    sender: &dyn Sender,
    store: &dyn DataStore,
    request: LeaseRequest,
) -> Result<ItemOutcome, Ended> {
    let lease = match run
        .retrying("lease", DataStoreError::is_retryable, || {
            store.lease_next(LeaseRequest {
                now: Utc::now(),
                ..request
            })
        })
        .await
        .map_err(store_ended)?
    {
        Some(lease) => lease,
        None => return Ok(ItemOutcome::NoMoreWork),
    };
    count_leased(run, &lease);
    // Leased, not yet published: a shutdown here must still publish (or cancel) it.
    messagebus::fail_point("pending-research-publish").await;
    let (lease_id, clips) = (lease.id, lease.clips.len());
    let body = messages::encode(&item(lease));
    let (error, cancelled) = match run
        .retrying("publish", BusError::is_retryable, || {
            sender.send(body.clone())
        })
        .await
    {
        Ok(()) => {
            count_published(run, lease_id, clips);
            return Ok(ItemOutcome::Published);
        }
        Err(RetryError::Failed(e)) => (e, false),
        Err(RetryError::Cancelled(e)) => (e, true),
    };
    // A send that timed out may still have arrived; the researcher's results are then
    // recorded all the same (an ended lease is fine), so cancelling is always safe.
    cancel_unpublished(run, store, lease_id, &error).await;
    if matches!(error, BusError::BodyTooLarge { .. }) && clips > 1 && !cancelled {
        // Long descriptions can make a full item exceed the bus limit; one clip always
        // fits (see `messages`' length limits), so halving ends.
        let max_clips = u32::try_from(clips / 2).unwrap_or(1).max(1);
        tracing::warn!(%lease_id, clips, max_clips, "work item too large for the bus, leasing fewer clips");
        return Ok(ItemOutcome::FewerClips(max_clips));
    }
    Err(if cancelled {
        Ended::Cancelled
    } else {
        Ended::Failed(ArchivistError::Bus(error))
    })
}

/// How the run ends when a bus call was cancelled or failed past its retries.
fn bus_ended(e: RetryError<BusError>) -> Ended {
    match e {
        RetryError::Cancelled(_) => Ended::Cancelled,
        RetryError::Failed(e) => Ended::Failed(ArchivistError::Bus(e)),
    }
}

/// How the run ends when a datastore call was cancelled or failed past its retries.
fn store_ended(e: RetryError<DataStoreError>) -> Ended {
    match e {
        RetryError::Cancelled(_) => Ended::Cancelled,
        RetryError::Failed(e) => Ended::Failed(ArchivistError::DataStore(e)),
    }
}

fn item(lease: Lease) -> PendingResearchItem {
    PendingResearchItem {
        lease_id: lease.id,
        lease_expires_at: lease.expires_at,
        episode: lease.episode,
        clips: lease.clips,
    }
}

/// Ends a lease whose work item could not be published, freeing all its pairs at once (no
/// researcher has it, so no result is on its way), rather than holding them until it expires.
/// If even that fails, the lease expires on its own. Counted in `leases_revoked`.
async fn cancel_unpublished(run: &mut Run, store: &dyn DataStore, lease_id: Uuid, why: &BusError) {
    tracing::warn!(%lease_id, error = %why, "could not publish the work item, cancelling its lease");
    match run
        .retrying("cancel_lease", DataStoreError::is_retryable, || {
            store.update_lease(lease_id, LeaseUpdate::Cancel)
        })
        .await
    {
        Ok(true) => {
            run.report.leases_revoked += 1;
            telemetry::leases("revoked", 1);
        }
        Ok(false) => tracing::debug!(%lease_id, "lease already ended"),
        Err(RetryError::Failed(e) | RetryError::Cancelled(e)) => {
            tracing::warn!(%lease_id, error = %e, "could not cancel the lease; it ends when it expires");
            run.errors.report(ArchivistError::DataStore(e));
        }
    }
}
