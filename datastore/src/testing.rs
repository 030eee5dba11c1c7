//! The datastore conformance suite (feature `test-utils`): one set of cases, written once, that
//! every [`DataStore`] adapter runs, plus data builders for tests elsewhere.
//!
//! An adapter's test file provides an `async fn() -> Fresh` that returns a freshly migrated,
//! empty store, and instantiates the suite with it:
//!
//! ```ignore
//! async fn fresh() -> datastore::testing::Fresh { /* new temp database, migrated */ }
//! datastore::datastore_conformance_tests!(fresh);
//! ```
//!
//! This generates a module `datastore_conformance` with one `#[tokio::test]` (multi-threaded,
//! two workers) per case in [`cases`]; each case gets its own fresh store. The calling crate
//! needs `tokio` (with `macros` and `rt-multi-thread`) as a dependency.
//!
//! Cases take all times from [`t0`] and explicit offsets of it: nothing sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::any::Any;
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use uuid::Uuid;

use crate::{ClipInfo, DataStore, EpisodeInfo, ResearchResult};

/// A freshly migrated, empty store for one conformance case.
pub struct Fresh {
    /// The store under test.
    pub store: Arc<dyn DataStore>,
    /// Whatever keeps the store's backing alive (a temporary directory, a database dropped on
    /// drop). Dropped after the case has finished.
    pub guard: Box<dyn Any + Send>,
}

impl Fresh {
    /// Wraps a store and its guard.
    pub fn new(store: Arc<dyn DataStore>, guard: impl Any + Send) -> Self {
        Self {
            store,
            guard: Box::new(guard),
        }
    }
}

/// Generates one `#[tokio::test]` per conformance case, in a module `datastore_conformance`.
///
/// `$fresh` is a path to an `async fn() -> datastore::testing::Fresh` returning a freshly
/// migrated, empty store; it is called once per case.
#[macro_export]
macro_rules! datastore_conformance_tests {
    ($fresh:path) => {
        $crate::__datastore_conformance_cases!($fresh;
            migrate_twice_is_harmless,
            empty_store,
            upsert_episode_inserts_then_updates,
            upsert_clip_inserts_then_updates,
            duplicate_identity_in_batch_later_wins,
            older_curation_changes_nothing,
            newest_curation_in_a_batch_wins_in_either_order,
            new_item_with_last_before_initial_is_invalid,
            known_item_with_last_before_initial_is_accepted,
            media_uri_conflict,
            lease_orders_episodes,
            lease_orders_clips,
            leases_never_overlap,
            lease_call_made_again_answers_with_its_lease,
            expired_lease_frees_pairs,
            renew_lease,
            renewal_keeps_the_lease_length,
            revoke_before_the_other_results_keeps_their_pairs_held,
            revoked_lease_is_not_renewed_or_revoked_again,
            revoke_with_every_result_in_ends_the_lease_at_once,
            recording_updates_leases_in_the_same_call,
            emptied_lease_is_not_counted_once_expired,
            skipped_pairs_of_a_revoked_lease_come_back_after_expiry,
            cancel_frees_every_pair_at_once,
            record_results_is_idempotent,
            record_results_unknown_pairs,
            recorded_pairs_leave_their_lease,
            new_clip_after_all_researched_creates_work,
            researched_prefix_does_not_hide_new_or_raised_episodes,
            status_counts_each_step,
            matches_lists_and_filters,
            recent_matches_newest_first,
            leases_listed_with_episode_and_state,
            concurrent_leases_never_overlap,
            times_round_trip_at_microseconds,
            episode_identity_is_title_and_date_aired,
            large_batches,
            recording_under_an_expired_lease,
            failed_pairs_are_recorded_and_not_leased,
            success_replaces_failure_but_not_the_reverse,
            retry_failed_makes_pairs_researchable_again,
            forget_episode_results_makes_every_pair_researchable_again,
            curated_anew_makes_failed_pairs_researchable_again,
            completion_is_kept_when_the_last_pair_is_recorded,
            completion_counts_failures_and_survives_duplicates,
            a_later_clip_reopens_and_completes_again,
            clips_curated_again_count_once,
            announcing_lets_go_only_of_what_was_read,
            concurrent_claims_never_share_a_completion,
            claims_run_out_are_given_back_and_end_on_completing_again,
            browse_lists_clips_by_occurrences,
            browse_searches_titles,
            browse_lists_episodes_newest_first,
            browse_clip_page_lists_its_episodes,
            browse_episode_page_shows_timeline_and_work_left,
            matches_since_a_research_date,
            match_scores_round_trip,
            matches_name_the_media_they_were_measured_on,
            findability_is_kept_on_the_clip,
            tokens_are_created_listed_used_and_revoked,
            presence_counts_who_was_seen_since,
            held_items_are_kept_by_receipt_and_token,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __datastore_conformance_cases {
    ($fresh:path; $($case:ident),* $(,)?) => {
        #[allow(dead_code)]
        async fn __datastore_conformance_fresh() -> $crate::testing::Fresh {
            $fresh().await
        }
        #[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
        mod datastore_conformance {
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fresh = super::__datastore_conformance_fresh().await;
                    $crate::testing::cases::$case(fresh.store.clone()).await;
                    drop(fresh);
                }
            )*
        }
    };
}

/// The time every case starts at: 2026-06-01T00:00:00Z.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).unwrap()
}

/// Episode `i`: titled `Episode {i}`, aired `i` days after 2024-01-01 (so higher `i` aired
/// later), curated an hour after airing, priority 0, a unique `media_uri`.
pub fn episode(i: u32) -> EpisodeInfo {
    let aired = Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap() + Duration::days(i64::from(i));
    EpisodeInfo {
        initial_date_curated: aired + Duration::hours(1),
        last_date_curated: aired + Duration::hours(1),
        curator_information: "tbtl.net".into(),
        date_aired: aired,
        title: format!("Episode {i}"),
        description: format!("The episode numbered {i}."),
        media_uri: format!("https://media.example.invalid/episodes/{i}.mp3"),
        media_type: "mp3".into(),
        priority: 0,
    }
}

/// Clip `i`: titled `Clip {i}`, first curated `i` hours after 2025-01-01 (so higher `i` was
/// curated later), priority 0, a unique `media_uri`.
pub fn clip(i: u32) -> ClipInfo {
    let curated =
        Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap() + Duration::hours(i64::from(i));
    ClipInfo {
        initial_date_curated: curated,
        last_date_curated: curated,
        curator_information: "tbtl.net".into(),
        title: format!("Clip {i}"),
        description: format!("The clip numbered {i}."),
        media_uri: format!("https://media.example.invalid/clips/{i}.mp3"),
        media_type: "mp3".into(),
        priority: 0,
    }
}

/// A result for (`episode`, `clip`) under `lease_id`, researched at [`t0`], with `offsets_ns`.
pub fn result(
    lease_id: Uuid,
    episode: &EpisodeInfo,
    clip: &ClipInfo,
    offsets_ns: &[i64],
) -> ResearchResult {
    ResearchResult {
        lease_id,
        episode: episode.key(),
        clip_title: clip.title.clone(),
        research_date: t0(),
        episode_duration_ns: 3_600_000_000_000,
        episode_hash: format!("sha256:episode:{}", episode.title),
        clip_duration_ns: 4_000_000_000,
        clip_hash: format!("sha256:clip:{}", clip.title),
        clip_offsets_ns: offsets_ns.to_vec(),
        clip_match_scores: None,
        failure: None,
        clip_findability: None,
    }
}

/// A failed result for (`episode`, `clip`) under `lease_id`: `reason`, no offsets, durations
/// or hashes.
pub fn failed(
    lease_id: Uuid,
    episode: &EpisodeInfo,
    clip: &ClipInfo,
    reason: &str,
) -> ResearchResult {
    ResearchResult {
        episode_duration_ns: 0,
        episode_hash: String::new(),
        clip_duration_ns: 0,
        clip_hash: String::new(),
        failure: Some(reason.to_string()),
        ..result(lease_id, episode, clip, &[])
    }
}

/// The conformance cases. Each takes a freshly migrated, empty store.
pub mod cases {
    use std::collections::HashSet;
    use std::sync::Arc;

    use chrono::{DateTime, Duration, Utc};
    use uuid::Uuid;

    use super::{clip, episode, failed, result, t0};
    use crate::{
        ClipInfo, DataStore, DataStoreError, EpisodeInfo, Lease, LeaseRequest, LeaseState,
        LeaseUpdate, MatchFilter, RecordOutcome, ResearchResult, Status,
    };

    fn request(max_clips: u32, now: DateTime<Utc>) -> LeaseRequest {
        LeaseRequest {
            max_clips,
            duration: Duration::hours(1),
            now,
            lease_id: uuid::Uuid::new_v4(),
        }
    }

    async fn lease(store: &dyn DataStore, max_clips: u32, now: DateTime<Utc>) -> Option<Lease> {
        store.lease_next(request(max_clips, now)).await.unwrap()
    }

    /// A result (no offsets) for every pair `lease` holds.
    fn results_of(lease: &Lease) -> Vec<crate::ResearchResult> {
        lease
            .clips
            .iter()
            .map(|c| result(lease.id, &lease.episode, c, &[]))
            .collect()
    }

    fn titles(lease: &Lease) -> Vec<String> {
        lease.clips.iter().map(|c| c.title.clone()).collect()
    }

    fn pairs(lease: &Lease) -> Vec<(String, String)> {
        lease
            .clips
            .iter()
            .map(|c| (lease.episode.title.clone(), c.title.clone()))
            .collect()
    }

    async fn seed(
        store: &dyn DataStore,
        episodes: u32,
        clips: u32,
    ) -> (Vec<EpisodeInfo>, Vec<ClipInfo>) {
        let es: Vec<_> = (0..episodes).map(episode).collect();
        let cs: Vec<_> = (0..clips).map(clip).collect();
        store.upsert_episodes(&es).await.unwrap();
        store.upsert_clips(&cs).await.unwrap();
        (es, cs)
    }

    /// Running the migrations again changes nothing and the store still works.
    pub async fn migrate_twice_is_harmless(store: Arc<dyn DataStore>) {
        store.migrate().await.unwrap();
        seed(&*store, 1, 1).await;
        store.migrate().await.unwrap();
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.episodes, status.clips), (1, 1));
    }

    /// An empty store, a store with only episodes and one with only clips have no work.
    pub async fn empty_store(store: Arc<dyn DataStore>) {
        assert_eq!(store.status(t0()).await.unwrap(), Status::default());
        assert!(lease(&*store, 5, t0()).await.is_none());
        assert!(store
            .matches(&MatchFilter::default())
            .await
            .unwrap()
            .is_empty());
        store.upsert_episode(&episode(1)).await.unwrap();
        assert!(lease(&*store, 5, t0()).await.is_none());
        store.upsert_clips(&[]).await.unwrap();
        store.upsert_episodes(&[]).await.unwrap();
        assert!(store.record_results(&[]).await.unwrap().is_empty());
        let status = store.status(t0()).await.unwrap();
        assert_eq!(
            status,
            Status {
                episodes: 1,
                ..Status::default()
            }
        );
    }

    /// A known episode gets every field updated but `initial_date_curated`.
    pub async fn upsert_episode_inserts_then_updates(store: Arc<dyn DataStore>) {
        let original = episode(1);
        store.upsert_episode(&original).await.unwrap();
        store.upsert_clip(&clip(1)).await.unwrap();
        let updated = EpisodeInfo {
            initial_date_curated: original.initial_date_curated + Duration::days(3),
            last_date_curated: original.last_date_curated + Duration::days(5),
            curator_information: "another curator".into(),
            description: "A new description.".into(),
            media_uri: "https://media.example.invalid/episodes/1-remastered.mp3".into(),
            media_type: "ogg".into(),
            priority: 7,
            ..original.clone()
        };
        store.upsert_episode(&updated).await.unwrap();
        let status = store.status(t0()).await.unwrap();
        assert_eq!(status.episodes, 1);
        let leased = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(
            leased.episode,
            EpisodeInfo {
                initial_date_curated: original.initial_date_curated,
                ..updated.clone()
            }
        );
        // The old media_uri is free again for another episode.
        let mut other = episode(2);
        other.media_uri = original.media_uri.clone();
        store.upsert_episode(&other).await.unwrap();
    }

    /// A known clip gets every field updated but `initial_date_curated`.
    pub async fn upsert_clip_inserts_then_updates(store: Arc<dyn DataStore>) {
        let original = clip(1);
        store.upsert_clip(&original).await.unwrap();
        store.upsert_episode(&episode(1)).await.unwrap();
        let updated = ClipInfo {
            initial_date_curated: original.initial_date_curated + Duration::days(3),
            last_date_curated: original.last_date_curated + Duration::days(5),
            curator_information: "another curator".into(),
            description: "A new description.".into(),
            media_uri: "https://media.example.invalid/clips/1-remastered.mp3".into(),
            media_type: "ogg".into(),
            priority: -3,
            ..original.clone()
        };
        store.upsert_clip(&updated).await.unwrap();
        assert_eq!(store.status(t0()).await.unwrap().clips, 1);
        let leased = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(
            leased.clips,
            vec![ClipInfo {
                initial_date_curated: original.initial_date_curated,
                ..updated
            }]
        );
    }

    /// The same identity twice in one batch: the later one wins.
    pub async fn duplicate_identity_in_batch_later_wins(store: Arc<dyn DataStore>) {
        let first = episode(1);
        let later = EpisodeInfo {
            description: "later".into(),
            priority: 4,
            last_date_curated: first.last_date_curated + Duration::hours(2),
            ..first.clone()
        };
        store
            .upsert_episodes(&[first.clone(), episode(2), later.clone()])
            .await
            .unwrap();
        let c1 = clip(1);
        let c1_later = ClipInfo {
            description: "later".into(),
            priority: 2,
            ..c1.clone()
        };
        store
            .upsert_clips(&[c1.clone(), c1_later.clone()])
            .await
            .unwrap();
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.episodes, status.clips), (2, 1));
        let leased = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(leased.episode, later);
        assert_eq!(leased.clips, vec![c1_later]);
    }

    /// A lease call made again with the same request (its first try's outcome unknown to the
    /// caller) answers with the lease the first made, as it stands, and leases nothing more.
    pub async fn lease_call_made_again_answers_with_its_lease(store: Arc<dyn DataStore>) {
        store
            .upsert_episodes(&[episode(1), episode(2)])
            .await
            .unwrap();
        store
            .upsert_clips(&[clip(1), clip(2), clip(3)])
            .await
            .unwrap();
        let req = request(2, t0());
        let first = store.lease_next(req).await.unwrap().unwrap();
        assert_eq!(first.id, req.lease_id);
        let again = store.lease_next(req).await.unwrap().unwrap();
        assert_eq!(again.id, first.id);
        assert_eq!(again.episode, first.episode);
        assert_eq!(again.clips, first.clips);
        assert_eq!(again.expires_at, first.expires_at);
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.active_leases, status.leased_pairs), (1, 2));
        // A new id leases the next work.
        let next = store.lease_next(request(2, t0())).await.unwrap().unwrap();
        assert_ne!(next.id, first.id);
        assert_eq!(store.status(t0()).await.unwrap().leased_pairs, 3);
    }

    /// A curation older than the stored one (a released v1 redelivered after v2) changes
    /// nothing, for episodes and clips; an equally new one updates.
    pub async fn older_curation_changes_nothing(store: Arc<dyn DataStore>) {
        let v1 = episode(1);
        let v2 = EpisodeInfo {
            last_date_curated: v1.last_date_curated + Duration::hours(1),
            description: "v2".into(),
            media_uri: "https://media.example.invalid/episodes/1-v2.mp3".into(),
            priority: 3,
            ..v1.clone()
        };
        let c1 = clip(1);
        let c2 = ClipInfo {
            last_date_curated: c1.last_date_curated + Duration::hours(1),
            description: "v2".into(),
            media_uri: "https://media.example.invalid/clips/1-v2.mp3".into(),
            ..c1.clone()
        };
        store.upsert_episode(&v2).await.unwrap();
        store.upsert_clip(&c2).await.unwrap();
        store.upsert_episode(&v1).await.unwrap();
        store.upsert_clip(&c1).await.unwrap();
        let leased = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(
            leased.episode, v2,
            "an older curation overwrote a newer one"
        );
        assert_eq!(leased.clips, vec![c2.clone()]);
        // v1's media_uri was never taken back: another episode may have it.
        let mut other = episode(2);
        other.media_uri = v1.media_uri.clone();
        store.upsert_episode(&other).await.unwrap();
        // As new as the stored one: the later arrival wins.
        let v2b = EpisodeInfo {
            description: "v2b".into(),
            ..v2.clone()
        };
        store.upsert_episode(&v2b).await.unwrap();
        assert!(store
            .update_lease(leased.id, LeaseUpdate::Cancel)
            .await
            .unwrap());
        let again = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(again.episode, v2b);
    }

    /// Two curations of one item in one batch: the newer wins whichever comes first.
    pub async fn newest_curation_in_a_batch_wins_in_either_order(store: Arc<dyn DataStore>) {
        // Episode and clip 1 get the newer curation last in their batch, 2 first; episode 2
        // aired later, so it is leased first.
        for (i, newer_first) in [(1, false), (2, true)] {
            let old = episode(i);
            let new = EpisodeInfo {
                last_date_curated: old.last_date_curated + Duration::hours(1),
                description: "new".into(),
                ..old.clone()
            };
            let old_clip = clip(i);
            let new_clip = ClipInfo {
                last_date_curated: old_clip.last_date_curated + Duration::hours(1),
                description: "new".into(),
                ..old_clip.clone()
            };
            let (episodes, clips) = if newer_first {
                ([new.clone(), old], [new_clip.clone(), old_clip])
            } else {
                ([old, new.clone()], [old_clip, new_clip.clone()])
            };
            store.upsert_episodes(&episodes).await.unwrap();
            store.upsert_clips(&clips).await.unwrap();
            let leased = lease(&*store, 5, t0()).await.unwrap();
            assert_eq!(leased.episode, new, "newer first: {newer_first}");
            assert!(
                leased.clips.contains(&new_clip),
                "newer first: {newer_first}"
            );
            assert!(store
                .update_lease(leased.id, LeaseUpdate::Cancel)
                .await
                .unwrap());
        }
    }

    /// A new item last curated before it was first curated is invalid, and the whole batch
    /// is rejected.
    pub async fn new_item_with_last_before_initial_is_invalid(store: Arc<dyn DataStore>) {
        let mut bad = episode(2);
        bad.last_date_curated = bad.initial_date_curated - Duration::seconds(1);
        let err = store.upsert_episodes(&[episode(1), bad]).await.unwrap_err();
        assert!(matches!(err, DataStoreError::Invalid(_)), "{err:?}");
        assert!(!err.is_retryable());

        let mut bad = clip(2);
        bad.last_date_curated = bad.initial_date_curated - Duration::days(1);
        let err = store.upsert_clips(&[clip(1), bad]).await.unwrap_err();
        assert!(matches!(err, DataStoreError::Invalid(_)), "{err:?}");

        assert_eq!(store.status(t0()).await.unwrap(), Status::default());
    }

    /// Only new items are checked: an update of a known item whose `last_date_curated` is
    /// before its `initial_date_curated` is accepted (and, being older than the stored
    /// curation, changes nothing).
    pub async fn known_item_with_last_before_initial_is_accepted(store: Arc<dyn DataStore>) {
        seed(&*store, 1, 1).await;
        let mut e = episode(0);
        e.last_date_curated = e.initial_date_curated - Duration::days(1);
        e.description = "older".into();
        store.upsert_episode(&e).await.unwrap();
        let mut c = clip(0);
        c.last_date_curated = c.initial_date_curated - Duration::days(1);
        c.description = "older".into();
        store.upsert_clip(&c).await.unwrap();
        let leased = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(leased.episode, episode(0));
        assert_eq!(leased.clips, vec![clip(0)]);
    }

    /// A `media_uri` used by another item of the same kind is a conflict; the batch writes
    /// nothing. Episodes and clips may share a `media_uri`.
    pub async fn media_uri_conflict(store: Arc<dyn DataStore>) {
        seed(&*store, 1, 1).await;

        let mut e = episode(1);
        e.media_uri = episode(0).media_uri;
        let err = store.upsert_episodes(&[episode(2), e]).await.unwrap_err();
        assert!(matches!(err, DataStoreError::Conflict(_)), "{err:?}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains(&episode(0).media_uri), "{err}");

        // Two new episodes with one media_uri in the same batch.
        let mut e = episode(4);
        e.media_uri = episode(3).media_uri;
        let err = store.upsert_episodes(&[episode(3), e]).await.unwrap_err();
        assert!(matches!(err, DataStoreError::Conflict(_)), "{err:?}");

        let mut c = clip(1);
        c.media_uri = clip(0).media_uri;
        let err = store.upsert_clips(&[clip(2), c]).await.unwrap_err();
        assert!(matches!(err, DataStoreError::Conflict(_)), "{err:?}");

        // A known episode taking another's media_uri.
        store.upsert_episode(&episode(6)).await.unwrap();
        let mut e = episode(6);
        e.media_uri = episode(0).media_uri;
        e.description = "changed".into();
        let err = store.upsert_episode(&e).await.unwrap_err();
        assert!(matches!(err, DataStoreError::Conflict(_)), "{err:?}");

        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.episodes, status.clips), (2, 1));
        let leased = lease(&*store, 1, t0()).await.unwrap();
        assert_eq!(leased.episode, episode(6));

        // Not a conflict: a clip with an episode's media_uri.
        let mut c = clip(5);
        c.media_uri = episode(0).media_uri;
        store.upsert_clip(&c).await.unwrap();
    }

    /// Episodes are leased by priority, then latest `date_aired`, then latest
    /// `initial_date_curated`.
    pub async fn lease_orders_episodes(store: Arc<dyn DataStore>) {
        let low = EpisodeInfo {
            priority: -1,
            ..episode(9)
        };
        let old = EpisodeInfo {
            priority: 5,
            ..episode(1)
        };
        let new_early = EpisodeInfo {
            priority: 5,
            title: "Same day, curated early".into(),
            media_uri: "https://media.example.invalid/early.mp3".into(),
            ..episode(3)
        };
        let mut new_late = EpisodeInfo {
            priority: 5,
            title: "Same day, curated late".into(),
            media_uri: "https://media.example.invalid/late.mp3".into(),
            ..episode(3)
        };
        new_late.initial_date_curated += Duration::hours(1);
        new_late.last_date_curated += Duration::hours(1);
        let middle = episode(5);
        store
            .upsert_episodes(&[
                low.clone(),
                old.clone(),
                new_early.clone(),
                middle.clone(),
                new_late.clone(),
            ])
            .await
            .unwrap();
        store.upsert_clips(&[clip(1), clip(2)]).await.unwrap();

        let mut order = Vec::new();
        while let Some(l) = lease(&*store, 2, t0()).await {
            assert_eq!(l.clips.len(), 2);
            order.push(l.episode.title.clone());
        }
        assert_eq!(
            order,
            vec![
                new_late.title,
                new_early.title,
                old.title,
                middle.title,
                low.title
            ]
        );
    }

    /// Clips are leased by priority, then latest `initial_date_curated`, at most `max_clips`
    /// per lease, most urgent first within a lease.
    pub async fn lease_orders_clips(store: Arc<dyn DataStore>) {
        store.upsert_episode(&episode(1)).await.unwrap();
        let urgent = ClipInfo {
            priority: 3,
            ..clip(1)
        };
        let unwanted = ClipInfo {
            priority: -2,
            ..clip(8)
        };
        store
            .upsert_clips(&[
                clip(2),
                unwanted.clone(),
                clip(5),
                urgent.clone(),
                clip(7),
                clip(3),
            ])
            .await
            .unwrap();
        let first = lease(&*store, 2, t0()).await.unwrap();
        assert_eq!(titles(&first), vec!["Clip 1", "Clip 7"]);
        assert_eq!(first.clips[0], urgent);
        assert_eq!(first.expires_at, t0() + Duration::hours(1));
        assert_eq!(first.reclaimed_pairs, 0);
        let second = lease(&*store, 3, t0()).await.unwrap();
        assert_eq!(titles(&second), vec!["Clip 5", "Clip 3", "Clip 2"]);
        let third = lease(&*store, 3, t0()).await.unwrap();
        assert_eq!(titles(&third), vec!["Clip 8"]);
        assert!(lease(&*store, 3, t0()).await.is_none());
        assert_ne!(first.id, second.id);
        assert_ne!(second.id, third.id);
    }

    /// Leases never share a pair; `None` once every pair is leased.
    pub async fn leases_never_overlap(store: Arc<dyn DataStore>) {
        seed(&*store, 2, 3).await;
        let mut seen = HashSet::new();
        let mut leases = Vec::new();
        while let Some(l) = lease(&*store, 2, t0()).await {
            for p in pairs(&l) {
                assert!(seen.insert(p.clone()), "pair {p:?} leased twice");
            }
            leases.push(l);
        }
        assert_eq!(seen.len(), 6);
        assert_eq!(
            leases.iter().map(|l| l.clips.len()).collect::<Vec<_>>(),
            vec![2, 1, 2, 1]
        );
        // Still held just before they expire.
        assert!(lease(&*store, 2, t0() + Duration::minutes(59))
            .await
            .is_none());
        let status = store.status(t0()).await.unwrap();
        assert_eq!(status.active_leases, 4);
        assert_eq!(status.leased_pairs, 6);
        assert_eq!(status.expired_leases, 0);
    }

    /// A lease that expired frees its pairs (at exactly its expiry, too); taking them over
    /// counts them as reclaimed.
    pub async fn expired_lease_frees_pairs(store: Arc<dyn DataStore>) {
        seed(&*store, 1, 3).await;
        let first = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(first.clips.len(), 3);
        assert!(lease(&*store, 5, t0() + Duration::minutes(30))
            .await
            .is_none());

        let expiry = first.expires_at;
        let status = store.status(expiry).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (0, 1, 0)
        );

        // Take over two of the three pairs: the old lease still holds one, expired.
        let second = lease(&*store, 2, expiry).await.unwrap();
        assert_eq!(second.reclaimed_pairs, 2);
        assert_eq!(titles(&second), titles(&first)[..2].to_vec());
        assert_eq!(second.expires_at, expiry + Duration::hours(1));
        let status = store.status(expiry).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (1, 1, 2)
        );

        // The old lease can no longer be renewed.
        let renewed = store
            .update_lease(first.id, LeaseUpdate::Renew { now: expiry })
            .await
            .unwrap();
        assert!(!renewed);

        // Take over the last one: the old lease is gone.
        let third = lease(&*store, 2, expiry).await.unwrap();
        assert_eq!(third.reclaimed_pairs, 1);
        assert_eq!(titles(&third), titles(&first)[2..].to_vec());
        let status = store.status(expiry).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (2, 0, 3)
        );
        assert!(lease(&*store, 2, expiry).await.is_none());

        // Long after: everything expired, everything leased again, all reclaimed.
        let later = expiry + Duration::days(1);
        let fourth = lease(&*store, 10, later).await.unwrap();
        assert_eq!(fourth.reclaimed_pairs, 3);
        assert_eq!(titles(&fourth), titles(&first));
        let status = store.status(later).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (1, 0, 3)
        );
    }

    /// A renewal extends a lease by the length it was created with, whoever renews it: a
    /// 20-second lease renewed at 10 s is due at 30 s.
    pub async fn renewal_keeps_the_lease_length(store: Arc<dyn DataStore>) {
        seed(&*store, 1, 2).await;
        let l = store
            .lease_next(LeaseRequest {
                max_clips: 5,
                duration: Duration::seconds(20),
                now: t0(),
                lease_id: uuid::Uuid::new_v4(),
            })
            .await
            .unwrap()
            .unwrap();
        let renewed = LeaseUpdate::Renew {
            now: t0() + Duration::seconds(10),
        };
        assert!(store.update_lease(l.id, renewed).await.unwrap());
        let status = store.status(t0() + Duration::seconds(29)).await.unwrap();
        assert_eq!((status.active_leases, status.expired_leases), (1, 0));
        let status = store.status(t0() + Duration::seconds(30)).await.unwrap();
        assert_eq!((status.active_leases, status.expired_leases), (0, 1));
    }

    /// Renewing extends an active lease; an expired, unknown or cancelled lease is not renewed.
    pub async fn renew_lease(store: Arc<dyn DataStore>) {
        seed(&*store, 1, 2).await;
        let l = lease(&*store, 5, t0()).await.unwrap();
        let renew = |now| LeaseUpdate::Renew { now };
        let half = t0() + Duration::minutes(30);
        assert!(store.update_lease(l.id, renew(half)).await.unwrap());
        // Was due at t0+1h; a renewal lasts the lease's own hour: now due at t0+1h30m.
        assert!(lease(&*store, 5, t0() + Duration::minutes(75))
            .await
            .is_none());
        let status = store.status(t0() + Duration::minutes(75)).await.unwrap();
        assert_eq!((status.active_leases, status.leased_pairs), (1, 2));
        let status = store.status(t0() + Duration::minutes(90)).await.unwrap();
        assert_eq!((status.active_leases, status.expired_leases), (0, 1));

        // Expired at the time given: not renewed, and it stays expired.
        let late = t0() + Duration::hours(3);
        assert!(!store.update_lease(l.id, renew(late)).await.unwrap());
        assert_eq!(store.status(late).await.unwrap().expired_leases, 1);

        assert!(!store
            .update_lease(Uuid::new_v4(), renew(t0()))
            .await
            .unwrap());
        for update in [LeaseUpdate::Revoke, LeaseUpdate::Cancel] {
            assert!(!store.update_lease(Uuid::new_v4(), update).await.unwrap());
        }

        // Cancelled: gone, so not renewed and not cancelled twice.
        let other = lease(&*store, 5, late).await.unwrap();
        assert_eq!(other.reclaimed_pairs, 2);
        assert!(store
            .update_lease(other.id, LeaseUpdate::Cancel)
            .await
            .unwrap());
        assert!(!store.update_lease(other.id, renew(late)).await.unwrap());
        assert!(!store
            .update_lease(other.id, LeaseUpdate::Cancel)
            .await
            .unwrap());
        let status = store.status(late).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (0, 0, 0)
        );
    }

    /// The revoking result can be recorded before the lease's other results (the bus does not
    /// keep order): the lease then keeps the pairs whose results are still on their way, so
    /// they are not leased again; each late result is recorded, and the last one ends the
    /// lease (whichever lease id it names).
    pub async fn revoke_before_the_other_results_keeps_their_pairs_held(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 4).await;
        let l = lease(&*store, 3, t0()).await.unwrap();
        assert_eq!(l.clips.len(), 3);
        // The researcher's last result arrives first, with the revoke.
        let outcome = store
            .record_result(&result(l.id, &es[0], &l.clips[2], &[]))
            .await
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Recorded);
        assert!(store.update_lease(l.id, LeaseUpdate::Revoke).await.unwrap());
        // Revoked: no longer active, awaiting its late results, its pairs still held.
        let status = store.status(t0()).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.awaiting_late_results,
                status.leased_pairs
            ),
            (0, 1, 2)
        );

        // Work assignment meanwhile gets only the pair no lease holds.
        let rest = lease(&*store, 10, t0()).await.unwrap();
        assert_eq!(rest.reclaimed_pairs, 0);
        assert_eq!(titles(&rest), vec![cs[0].title.clone()]);
        assert!(lease(&*store, 10, t0() + Duration::minutes(30))
            .await
            .is_none());

        // The late results: the first leaves the lease holding one pair.
        let outcome = store
            .record_result(&result(l.id, &es[0], &l.clips[0], &[5]))
            .await
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Recorded);
        let status = store.status(t0()).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.awaiting_late_results,
                status.leased_pairs
            ),
            (1, 1, 2)
        );
        assert!(lease(&*store, 10, t0()).await.is_none());
        // The last (under another lease id) leaves it empty: it ends.
        let outcome = store
            .record_result(&result(Uuid::new_v4(), &es[0], &l.clips[1], &[]))
            .await
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Recorded);
        let status = store.status(t0()).await.unwrap();
        assert_eq!(
            (
                status.researched_pairs,
                status.active_leases,
                status.leased_pairs
            ),
            (3, 1, 1)
        );
        // Gone, not left behind to expire: after expiry only `rest` is counted.
        let later = t0() + Duration::hours(2);
        assert_eq!(store.status(later).await.unwrap().expired_leases, 1);
        for update in [LeaseUpdate::Revoke, LeaseUpdate::Cancel] {
            assert!(!store.update_lease(l.id, update).await.unwrap());
        }
        // After expiry only `rest`'s pair comes back.
        let again = lease(&*store, 10, later).await.unwrap();
        assert_eq!(again.reclaimed_pairs, 1);
        assert_eq!(titles(&again), titles(&rest));
        assert!(lease(&*store, 10, later).await.is_none());
    }

    /// A revoked lease is not extended by a renewal (which answers false) and not revoked a
    /// second time; it expires when it was due.
    pub async fn revoked_lease_is_not_renewed_or_revoked_again(store: Arc<dyn DataStore>) {
        seed(&*store, 1, 2).await;
        let l = lease(&*store, 5, t0()).await.unwrap();
        assert!(store.update_lease(l.id, LeaseUpdate::Revoke).await.unwrap());
        let renew = LeaseUpdate::Renew {
            now: t0() + Duration::minutes(30),
        };
        assert!(!store.update_lease(l.id, renew).await.unwrap());
        assert!(!store.update_lease(l.id, LeaseUpdate::Revoke).await.unwrap());

        // Still due at t0+1h: held just before, expired at it.
        let status = store.status(t0() + Duration::minutes(59)).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.awaiting_late_results,
                status.leased_pairs
            ),
            (0, 1, 2)
        );
        let status = store.status(l.expires_at).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (0, 1, 0)
        );
        let again = lease(&*store, 5, l.expires_at).await.unwrap();
        assert_eq!(again.reclaimed_pairs, 2);
        assert_eq!(titles(&again), titles(&l));
    }

    /// Revoking a lease whose results are all recorded deletes it at once.
    pub async fn revoke_with_every_result_in_ends_the_lease_at_once(store: Arc<dyn DataStore>) {
        seed(&*store, 1, 3).await;
        let l = lease(&*store, 5, t0()).await.unwrap();
        let results = results_of(&l);
        let outcomes = store.record_results(&results).await.unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Recorded; 3]);
        assert!(store.update_lease(l.id, LeaseUpdate::Revoke).await.unwrap());
        // Gone: not even an expired lease later, and nothing answers for it.
        let status = store.status(t0() + Duration::days(1)).await.unwrap();
        assert_eq!(
            (
                status.researched_pairs,
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (3, 0, 0, 0)
        );
        let renew = LeaseUpdate::Renew { now: t0() };
        for update in [LeaseUpdate::Revoke, renew, LeaseUpdate::Cancel] {
            assert!(!store.update_lease(l.id, update).await.unwrap());
        }
        assert!(lease(&*store, 5, t0() + Duration::days(1)).await.is_none());
    }

    /// Results recorded with their leases' updates in one call: each update answers as
    /// `update_lease` would, and a lease revoked by the batch that also records its last
    /// pairs is gone, as when the revoke comes first or after.
    pub async fn recording_updates_leases_in_the_same_call(store: Arc<dyn DataStore>) {
        let (es, _) = seed(&*store, 1, 4).await;
        let a = lease(&*store, 2, t0()).await.unwrap();
        let b = lease(&*store, 2, t0()).await.unwrap();
        let mut results = results_of(&a);
        results.push(result(b.id, &es[0], &b.clips[0], &[7]));
        let renewed_at = t0() + Duration::minutes(30);
        let (outcomes, updated) = store
            .record_results_updating_leases(
                &results,
                &[
                    (a.id, LeaseUpdate::Revoke),
                    (b.id, LeaseUpdate::Renew { now: renewed_at }),
                    (Uuid::new_v4(), LeaseUpdate::Renew { now: renewed_at }),
                ],
            )
            .await
            .unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Recorded; 3]);
        assert_eq!(updated, vec![true, true, false]);
        // `a` ended with its last pair; `b` holds its other pair, renewed from 30 minutes on.
        for update in [LeaseUpdate::Revoke, LeaseUpdate::Cancel] {
            assert!(!store.update_lease(a.id, update).await.unwrap());
        }
        let status = store.status(b.expires_at).await.unwrap();
        assert_eq!(
            (
                status.researched_pairs,
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (3, 1, 0, 1)
        );
        assert!(lease(&*store, 5, b.expires_at).await.is_none());
        let expired = store
            .status(b.expires_at + Duration::minutes(30))
            .await
            .unwrap();
        assert_eq!((expired.active_leases, expired.expired_leases), (0, 1));

        // Leases alone, and a duplicate with a revoke that finds the lease's last pair held.
        let (outcomes, updated) = store
            .record_results_updating_leases(&results[2..], &[(b.id, LeaseUpdate::Revoke)])
            .await
            .unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Duplicate]);
        assert_eq!(updated, vec![true]);
        let last = result(b.id, &es[0], &b.clips[1], &[]);
        let (outcomes, updated) = store
            .record_results_updating_leases(&[last], &[])
            .await
            .unwrap();
        assert_eq!((outcomes, updated), (vec![RecordOutcome::Recorded], vec![]));
        let status = store.status(t0()).await.unwrap();
        assert_eq!(
            (
                status.researched_pairs,
                status.active_leases,
                status.leased_pairs
            ),
            (4, 0, 0)
        );
        let (outcomes, updated) = store
            .record_results_updating_leases(&[], &[(b.id, LeaseUpdate::Revoke)])
            .await
            .unwrap();
        assert_eq!((outcomes, updated), (vec![], vec![false]));
    }

    /// A lease whose every pair was recorded without a revoke (the revoking item never came)
    /// holds nothing: once past its expiry it is not counted as expired, as it was not as
    /// active; a late revoke still ends it.
    pub async fn emptied_lease_is_not_counted_once_expired(store: Arc<dyn DataStore>) {
        seed(&*store, 1, 2).await;
        let l = lease(&*store, 5, t0()).await.unwrap();
        let results = results_of(&l);
        let outcomes = store.record_results(&results).await.unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Recorded; 2]);
        for now in [t0(), l.expires_at, t0() + Duration::days(1)] {
            let status = store.status(now).await.unwrap();
            assert_eq!(
                (
                    status.researched_pairs,
                    status.active_leases,
                    status.expired_leases,
                    status.leased_pairs
                ),
                (2, 0, 0, 0),
                "at {now}"
            );
        }
        assert!(lease(&*store, 5, t0() + Duration::days(1)).await.is_none());
        assert!(store.update_lease(l.id, LeaseUpdate::Revoke).await.unwrap());
        assert!(!store.update_lease(l.id, LeaseUpdate::Cancel).await.unwrap());
    }

    /// Pairs of a revoked lease whose results never come (the researcher skipped them) come
    /// back when the lease expires, as any expired lease's do, and the lease is then gone.
    pub async fn skipped_pairs_of_a_revoked_lease_come_back_after_expiry(
        store: Arc<dyn DataStore>,
    ) {
        let (es, _) = seed(&*store, 1, 3).await;
        let l = lease(&*store, 5, t0()).await.unwrap();
        let outcome = store
            .record_result(&result(l.id, &es[0], &l.clips[0], &[]))
            .await
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Recorded);
        assert!(store.update_lease(l.id, LeaseUpdate::Revoke).await.unwrap());
        assert!(lease(&*store, 5, t0() + Duration::minutes(30))
            .await
            .is_none());

        let expiry = l.expires_at;
        let again = lease(&*store, 5, expiry).await.unwrap();
        assert_eq!(again.reclaimed_pairs, 2);
        assert_eq!(titles(&again), titles(&l)[1..].to_vec());
        // Taken over entirely: the revoked lease is gone.
        let status = store.status(expiry).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (1, 0, 2)
        );
        assert!(!store.update_lease(l.id, LeaseUpdate::Cancel).await.unwrap());
    }

    /// Cancelling a lease (its work item never reached a researcher) frees every pair it holds
    /// at once, revoked or not.
    pub async fn cancel_frees_every_pair_at_once(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 5).await;
        let l = lease(&*store, 3, t0()).await.unwrap();
        let outcome = store
            .record_result(&result(l.id, &es[0], &l.clips[0], &[]))
            .await
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Recorded);
        assert!(store.update_lease(l.id, LeaseUpdate::Cancel).await.unwrap());
        assert!(!store.update_lease(l.id, LeaseUpdate::Cancel).await.unwrap());
        assert!(!store.update_lease(l.id, LeaseUpdate::Revoke).await.unwrap());
        let status = store.status(t0()).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.expired_leases,
                status.leased_pairs
            ),
            (0, 0, 0)
        );
        let again = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(again.reclaimed_pairs, 0);
        assert_eq!(again.clips.len(), cs.len() - 1);
        assert_eq!(titles(&again)[..2], titles(&l)[1..]);

        // A revoked lease still holding pairs is cancelled just the same.
        assert!(store
            .update_lease(again.id, LeaseUpdate::Revoke)
            .await
            .unwrap());
        assert!(store
            .update_lease(again.id, LeaseUpdate::Cancel)
            .await
            .unwrap());
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.active_leases, status.leased_pairs), (0, 0));
        let last = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(titles(&last), titles(&again));
    }

    /// Recording is idempotent: a pair already recorded (before or earlier in the same batch)
    /// is a duplicate and changes nothing. All offsets are kept, in order.
    pub async fn record_results_is_idempotent(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 3).await;
        let l = lease(&*store, 5, t0()).await.unwrap();
        let offsets = [120_000_000_000, 7_000_000_000, 2_400_000_000_123];
        let outcomes = store
            .record_results(&[
                result(l.id, &es[0], &cs[0], &offsets),
                result(l.id, &es[0], &cs[0], &[]),
                result(l.id, &es[0], &cs[1], &[]),
            ])
            .await
            .unwrap();
        assert_eq!(
            outcomes,
            vec![
                RecordOutcome::Recorded,
                RecordOutcome::Duplicate,
                RecordOutcome::Recorded
            ]
        );
        let outcomes = store
            .record_results(&[
                result(l.id, &es[0], &cs[1], &[5]),
                result(Uuid::new_v4(), &es[0], &cs[0], &[1, 2]),
                result(l.id, &es[0], &cs[2], &[42]),
            ])
            .await
            .unwrap();
        assert_eq!(
            outcomes,
            vec![
                RecordOutcome::Duplicate,
                RecordOutcome::Duplicate,
                RecordOutcome::Recorded
            ]
        );
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.researched_pairs, status.matched_pairs), (3, 2));
        let matches = store.matches(&MatchFilter::default()).await.unwrap();
        assert_eq!(matches.len(), 2);
        let m0 = matches
            .iter()
            .find(|m| m.clip_title == cs[0].title)
            .unwrap();
        assert_eq!(m0.clip_offsets_ns, offsets.to_vec());
        assert_eq!(m0.episode_title, es[0].title);
        assert_eq!(m0.episode_date_aired, es[0].date_aired);
        assert_eq!(m0.research_date, t0());
        let m2 = matches
            .iter()
            .find(|m| m.clip_title == cs[2].title)
            .unwrap();
        assert_eq!(m2.clip_offsets_ns, vec![42]);
    }

    /// Results for an unknown episode or clip record nothing and say which is unknown (the
    /// episode first); the rest of the batch is recorded.
    pub async fn record_results_unknown_pairs(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 1).await;
        let lease_id = Uuid::new_v4();
        // Same title, another airing date: another (unknown) episode.
        let mut other_airing = es[0].clone();
        other_airing.date_aired += Duration::days(1);
        let outcomes = store
            .record_results(&[
                result(lease_id, &episode(7), &cs[0], &[1]),
                result(lease_id, &es[0], &clip(7), &[1]),
                result(lease_id, &other_airing, &cs[0], &[1]),
                result(lease_id, &es[0], &cs[0], &[1]),
                result(lease_id, &episode(7), &clip(7), &[1]),
            ])
            .await
            .unwrap();
        assert_eq!(
            outcomes,
            vec![
                RecordOutcome::UnknownEpisode,
                RecordOutcome::UnknownClip,
                RecordOutcome::UnknownEpisode,
                RecordOutcome::Recorded,
                RecordOutcome::UnknownEpisode
            ]
        );
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.researched_pairs, status.matched_pairs), (1, 1));
        assert_eq!(
            store.matches(&MatchFilter::default()).await.unwrap().len(),
            1
        );
        // A pair researched without ever being leased is never leased.
        assert!(lease(&*store, 5, t0()).await.is_none());
    }

    /// A recorded pair leaves whatever lease holds it (whichever lease id the result names),
    /// and is never leased again.
    pub async fn recorded_pairs_leave_their_lease(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 4).await;
        let l = lease(&*store, 3, t0()).await.unwrap();
        assert_eq!(l.clips.len(), 3);
        let outcomes = store
            .record_results(&[
                result(l.id, &es[0], &l.clips[0], &[]),
                // Under another lease id: still leaves the lease that holds it.
                result(Uuid::new_v4(), &es[0], &l.clips[1], &[9]),
            ])
            .await
            .unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Recorded; 2]);
        let status = store.status(t0()).await.unwrap();
        assert_eq!(
            (
                status.researched_pairs,
                status.active_leases,
                status.leased_pairs
            ),
            (2, 1, 1)
        );
        // The unleased fourth clip is still free.
        let rest = lease(&*store, 3, t0()).await.unwrap();
        assert_eq!(titles(&rest), vec![cs[0].title.clone()]);
        assert!(lease(&*store, 3, t0()).await.is_none());

        // After expiry only the unresearched pairs come back.
        let later = t0() + Duration::hours(2);
        let again = lease(&*store, 10, later).await.unwrap();
        assert_eq!(again.reclaimed_pairs, 2);
        let mut expected = vec![l.clips[2].title.clone(), cs[0].title.clone()];
        expected.sort();
        let mut got = titles(&again);
        got.sort();
        assert_eq!(got, expected);

        // Recording every pair of a lease leaves it active but empty.
        let outcomes = store
            .record_results(&[
                result(again.id, &es[0], &again.clips[0], &[]),
                result(again.id, &es[0], &again.clips[1], &[]),
            ])
            .await
            .unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Recorded; 2]);
        let status = store.status(later).await.unwrap();
        assert_eq!(
            (
                status.researched_pairs,
                status.active_leases,
                status.leased_pairs
            ),
            (4, 0, 0)
        );
        for days in [0, 1, 100] {
            assert!(lease(&*store, 10, later + Duration::days(days))
                .await
                .is_none());
        }
    }

    /// A clip added after every pair was researched is work for every episode.
    pub async fn new_clip_after_all_researched_creates_work(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 3, 1).await;
        let results: Vec<_> = es
            .iter()
            .map(|e| result(Uuid::new_v4(), e, &cs[0], &[]))
            .collect();
        store.record_results(&results).await.unwrap();
        assert!(lease(&*store, 5, t0()).await.is_none());

        let new = clip(1);
        store.upsert_clip(&new).await.unwrap();
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.research_pairs, status.researched_pairs), (6, 3));
        let mut episodes = Vec::new();
        while let Some(l) = lease(&*store, 5, t0()).await {
            assert_eq!(l.clips, vec![new.clone()]);
            episodes.push(l.episode.title.clone());
        }
        // Latest aired first.
        assert_eq!(episodes, vec!["Episode 2", "Episode 1", "Episode 0"]);

        // And a new episode is work for every clip.
        store.upsert_episode(&episode(9)).await.unwrap();
        let l = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l.episode.title, "Episode 9");
        assert_eq!(titles(&l), vec!["Clip 1", "Clip 0"]);
    }

    /// Research goes in urgency order, so a growing prefix of episodes is fully researched
    /// (Postgres walks past it from a remembered frontier). An episode that arrives, or whose
    /// priority is raised, ahead of that prefix is still leased first; re-curating a
    /// researched one changes nothing; a new clip makes every episode work again.
    pub async fn researched_prefix_does_not_hide_new_or_raised_episodes(store: Arc<dyn DataStore>) {
        async fn research_next(store: &dyn DataStore) -> String {
            let l = lease(store, 5, t0()).await.unwrap();
            let results = results_of(&l);
            store.record_results(&results).await.unwrap();
            l.episode.title
        }
        async fn next_title(store: &dyn DataStore) -> String {
            let l = lease(store, 5, t0()).await.unwrap();
            store.update_lease(l.id, LeaseUpdate::Cancel).await.unwrap();
            l.episode.title
        }
        let (mut es, _) = seed(&*store, 4, 2).await;
        assert_eq!(research_next(&*store).await, "Episode 3");
        assert_eq!(research_next(&*store).await, "Episode 2");
        assert_eq!(next_title(&*store).await, "Episode 1");

        // Aired later than all: ahead of the researched ones.
        store.upsert_episode(&episode(9)).await.unwrap();
        assert_eq!(research_next(&*store).await, "Episode 9");
        assert_eq!(next_title(&*store).await, "Episode 1");

        // The least urgent, raised above all.
        es[0].priority = 5;
        store.upsert_episode(&es[0]).await.unwrap();
        assert_eq!(next_title(&*store).await, "Episode 0");
        es[0].priority = 0;
        store.upsert_episode(&es[0]).await.unwrap();

        // A researched episode curated again is still researched.
        es[3].description = "Curated again.".into();
        es[3].last_date_curated += Duration::days(1);
        store.upsert_episode(&es[3]).await.unwrap();
        assert_eq!(next_title(&*store).await, "Episode 1");

        // Lowered from ahead of the frontier to behind it: found there.
        es[1].priority = -1;
        store.upsert_episode(&es[1]).await.unwrap();
        assert_eq!(next_title(&*store).await, "Episode 0");
        assert_eq!(research_next(&*store).await, "Episode 0");
        assert_eq!(research_next(&*store).await, "Episode 1");
        assert!(lease(&*store, 5, t0()).await.is_none());

        // A new clip: every episode has work again, most urgent first.
        store.upsert_clip(&clip(7)).await.unwrap();
        assert_eq!(research_next(&*store).await, "Episode 9");
        assert_eq!(research_next(&*store).await, "Episode 3");
    }

    /// Every status field, step by step.
    pub async fn status_counts_each_step(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 4, 5).await;
        let mut expect = Status {
            episodes: 4,
            clips: 5,
            research_pairs: 20,
            ..Status::default()
        };
        assert_eq!(store.status(t0()).await.unwrap(), expect);

        let a = lease(&*store, 3, t0()).await.unwrap();
        let b = lease(&*store, 3, t0()).await.unwrap();
        assert_eq!(a.episode, b.episode);
        expect.active_leases = 2;
        expect.leased_pairs = 5;
        assert_eq!(store.status(t0()).await.unwrap(), expect);

        store
            .record_results(&[
                result(a.id, &a.episode, &a.clips[0], &[10, 20]),
                result(a.id, &a.episode, &a.clips[1], &[]),
                result(b.id, &b.episode, &b.clips[0], &[30]),
            ])
            .await
            .unwrap();
        expect.researched_pairs = 3;
        expect.matched_pairs = 2;
        expect.leased_pairs = 2;
        assert_eq!(store.status(t0()).await.unwrap(), expect);

        // A late renewal keeps b (for its own hour from then); a expires.
        assert!(store
            .update_lease(
                b.id,
                LeaseUpdate::Renew {
                    now: t0() + Duration::minutes(10)
                }
            )
            .await
            .unwrap());
        let later = t0() + Duration::minutes(65);
        expect.active_leases = 1;
        expect.expired_leases = 1;
        expect.leased_pairs = 1;
        assert_eq!(store.status(later).await.unwrap(), expect);
        // Judged at the time given: at t0 both are active again.
        expect.active_leases = 2;
        expect.expired_leases = 0;
        expect.leased_pairs = 2;
        assert_eq!(store.status(t0()).await.unwrap(), expect);

        // A new episode and clip.
        store.upsert_episode(&episode(10)).await.unwrap();
        store.upsert_clip(&clip(10)).await.unwrap();
        expect.episodes = 5;
        expect.clips = 6;
        expect.research_pairs = 30;
        assert_eq!(store.status(t0()).await.unwrap(), expect);

        // Research everything.
        let results: Vec<_> = es
            .iter()
            .chain([&episode(10)])
            .flat_map(|e| {
                cs.iter()
                    .chain([&clip(10)])
                    .map(|c| result(Uuid::new_v4(), e, c, &[]))
                    .collect::<Vec<_>>()
            })
            .collect();
        let outcomes = store.record_results(&results).await.unwrap();
        assert_eq!(
            outcomes
                .iter()
                .filter(|o| **o == RecordOutcome::Recorded)
                .count(),
            27
        );
        expect.researched_pairs = 30;
        expect.active_leases = 0;
        expect.leased_pairs = 0;
        // a still exists (emptied, not revoked) but is not active: it holds nothing.
        let status = store.status(t0()).await.unwrap();
        assert_eq!(status, expect);
        assert!(lease(&*store, 3, later).await.is_none());
    }

    /// Matches list results with offsets only, latest aired episode first, then episode and
    /// clip title; filters and a limit narrow them.
    pub async fn matches_lists_and_filters(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 3, 3).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[
                result(id, &es[0], &cs[2], &[1]),
                result(id, &es[0], &cs[0], &[2, 3]),
                result(id, &es[0], &cs[1], &[]),
                result(id, &es[2], &cs[1], &[4]),
                result(id, &es[1], &cs[0], &[]),
                result(id, &es[1], &cs[1], &[]),
            ])
            .await
            .unwrap();
        let all = store.matches(&MatchFilter::default()).await.unwrap();
        let got: Vec<_> = all
            .iter()
            .map(|m| (m.episode_title.as_str(), m.clip_title.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("Episode 2", "Clip 1"),
                ("Episode 0", "Clip 0"),
                ("Episode 0", "Clip 2"),
            ]
        );
        assert_eq!(all[1].clip_offsets_ns, vec![2, 3]);
        assert!(all.iter().all(|m| !m.clip_offsets_ns.is_empty()));

        let matching = |filter: MatchFilter| {
            let store = Arc::clone(&store);
            async move { store.matches(&filter).await.unwrap() }
        };
        let by_clip = matching(MatchFilter {
            clip_title: Some("Clip 1".into()),
            ..MatchFilter::default()
        });
        assert_eq!(by_clip.await, all[..1].to_vec());
        let by_episode = matching(MatchFilter {
            episode_title: Some("Episode 0".into()),
            ..MatchFilter::default()
        });
        assert_eq!(by_episode.await, all[1..].to_vec());
        let both = matching(MatchFilter {
            episode_title: Some("Episode 0".into()),
            clip_title: Some("Clip 2".into()),
            limit: None,
            since: None,
        });
        assert_eq!(both.await, all[2..].to_vec());
        let limited = matching(MatchFilter {
            limit: Some(2),
            ..MatchFilter::default()
        });
        assert_eq!(limited.await, all[..2].to_vec());
        let none = matching(MatchFilter {
            clip_title: Some("No such clip".into()),
            ..MatchFilter::default()
        });
        assert!(none.await.is_empty());
    }

    /// Recent matches: results with offsets only, latest research date first, at most the
    /// limit asked.
    pub async fn recent_matches_newest_first(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 2, 3).await;
        let id = Uuid::new_v4();
        let at = |r: crate::ResearchResult, minutes: i64| crate::ResearchResult {
            research_date: t0() + Duration::minutes(minutes),
            ..r
        };
        assert!(store.recent_matches(10).await.unwrap().is_empty());
        store
            .record_results(&[
                at(result(id, &es[1], &cs[0], &[5]), 1),
                at(result(id, &es[0], &cs[1], &[6]), 3),
                at(result(id, &es[0], &cs[2], &[]), 4),
                at(result(id, &es[1], &cs[2], &[7, 8]), 2),
            ])
            .await
            .unwrap();
        let recent = store.recent_matches(10).await.unwrap();
        let got: Vec<_> = recent
            .iter()
            .map(|m| (m.episode_title.as_str(), m.clip_title.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("Episode 0", "Clip 1"),
                ("Episode 1", "Clip 2"),
                ("Episode 1", "Clip 0"),
            ]
        );
        assert_eq!(recent[1].clip_offsets_ns, vec![7, 8]);
        assert_eq!(recent[0].research_date, t0() + Duration::minutes(3));
        assert_eq!(store.recent_matches(2).await.unwrap(), recent[..2].to_vec());
    }

    /// Leases holding pairs are listed with their episode, times, held pairs and state at the
    /// time asked: expired first, then the oldest; an emptied or ended lease is not listed.
    pub async fn leases_listed_with_episode_and_state(store: Arc<dyn DataStore>) {
        let (_, cs) = seed(&*store, 3, 2).await;
        assert!(store.leases(t0(), 10).await.unwrap().is_empty());
        let a = lease(&*store, 2, t0()).await.unwrap();
        let b = lease(&*store, 2, t0() + Duration::minutes(10))
            .await
            .unwrap();
        let c = lease(&*store, 2, t0() + Duration::minutes(20))
            .await
            .unwrap();
        // c is revoked with one result in: it awaits the other.
        store
            .record_results(&[result(c.id, &c.episode, &cs[0], &[])])
            .await
            .unwrap();
        assert!(store.update_lease(c.id, LeaseUpdate::Revoke).await.unwrap());

        let now = t0() + Duration::minutes(30);
        let listed = store.leases(now, 10).await.unwrap();
        let got: Vec<_> = listed
            .iter()
            .map(|l| (l.id, l.state, l.held_pairs))
            .collect();
        assert_eq!(
            got,
            vec![
                (a.id, LeaseState::Active, 2),
                (b.id, LeaseState::Active, 2),
                (c.id, LeaseState::AwaitingLateResults, 1),
            ]
        );
        assert_eq!(listed[0].episode_title, a.episode.title);
        assert_eq!(listed[0].episode_date_aired, a.episode.date_aired);
        assert_eq!(listed[0].created_at, t0());
        assert_eq!(listed[0].expires_at, a.expires_at);
        assert_eq!(listed[1].created_at, t0() + Duration::minutes(10));

        // An hour and five minutes in, a has expired (listed first); b and c have not.
        let later = t0() + Duration::minutes(65);
        let listed = store.leases(later, 10).await.unwrap();
        let got: Vec<_> = listed.iter().map(|l| (l.id, l.state)).collect();
        assert_eq!(
            got,
            vec![
                (a.id, LeaseState::Expired),
                (b.id, LeaseState::Active),
                (c.id, LeaseState::AwaitingLateResults),
            ]
        );
        assert_eq!(store.leases(later, 1).await.unwrap().len(), 1);
        let status = store.status(later).await.unwrap();
        assert_eq!(
            (
                status.active_leases,
                status.awaiting_late_results,
                status.expired_leases
            ),
            (1, 1, 1)
        );

        // Cancelled, b holds nothing and is not listed.
        assert!(store.update_lease(b.id, LeaseUpdate::Cancel).await.unwrap());
        let ids: Vec<_> = store
            .leases(later, 10)
            .await
            .unwrap()
            .iter()
            .map(|l| l.id)
            .collect();
        assert_eq!(ids, vec![a.id, c.id]);
    }

    /// Many tasks leasing at once never lease a pair twice, and together lease exactly the
    /// free pairs.
    pub async fn concurrent_leases_never_overlap(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 12, 10).await;
        // Some pairs researched, some held by a lease, before the race.
        let researched: Vec<_> = es
            .iter()
            .step_by(3)
            .flat_map(|e| cs.iter().step_by(2).map(move |c| (e, c)))
            .map(|(e, c)| result(Uuid::new_v4(), e, c, &[]))
            .collect();
        store.record_results(&researched).await.unwrap();
        let held = lease(&*store, 4, t0()).await.unwrap();

        let mut all = HashSet::new();
        for e in &es {
            for c in &cs {
                all.insert((e.title.clone(), c.title.clone()));
            }
        }
        for r in &researched {
            all.remove(&(r.episode.title.clone(), r.clip_title.clone()));
        }
        for p in pairs(&held) {
            assert!(all.remove(&p));
        }

        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some(l) = store.lease_next(request(3, t0())).await.unwrap() {
                        assert!(!l.clips.is_empty() && l.clips.len() <= 3);
                        got.extend(pairs(&l));
                    }
                    got
                })
            })
            .collect();
        let mut leased = HashSet::new();
        for task in tasks {
            for p in task.await.unwrap() {
                assert!(leased.insert(p.clone()), "pair {p:?} leased twice");
            }
        }
        assert_eq!(leased, all);
        let status = store.status(t0()).await.unwrap();
        assert_eq!(
            status.leased_pairs,
            (leased.len() + held.clips.len()) as u64
        );
    }

    /// Times keep microsecond precision.
    pub async fn times_round_trip_at_microseconds(store: Arc<dyn DataStore>) {
        let us = |n: i64| Duration::microseconds(n);
        let mut e = episode(1);
        e.date_aired += us(123_456);
        e.initial_date_curated += us(1);
        e.last_date_curated += us(999_999);
        let mut c = clip(1);
        c.initial_date_curated += us(654_321);
        c.last_date_curated += us(654_322);
        store.upsert_episode(&e).await.unwrap();
        store.upsert_clip(&c).await.unwrap();
        let now = t0() + us(7);
        let l = store
            .lease_next(LeaseRequest {
                max_clips: 1,
                duration: Duration::seconds(90) + us(5),
                now,
                lease_id: uuid::Uuid::new_v4(),
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(l.episode, e);
        assert_eq!(l.clips, vec![c.clone()]);
        assert_eq!(l.expires_at, now + Duration::seconds(90) + us(5));
        // Active up to the microsecond before expiry.
        let status = store.status(l.expires_at - us(1)).await.unwrap();
        assert_eq!(status.active_leases, 1);
        let status = store.status(l.expires_at).await.unwrap();
        assert_eq!(status.active_leases, 0);

        let mut r = result(l.id, &e, &c, &[1]);
        r.research_date += us(42);
        store.record_result(&r).await.unwrap();
        let matches = store.matches(&MatchFilter::default()).await.unwrap();
        assert_eq!(matches[0].episode_date_aired, e.date_aired);
        assert_eq!(matches[0].research_date, r.research_date);
    }

    /// Episodes with one title and different airing dates are different episodes.
    pub async fn episode_identity_is_title_and_date_aired(store: Arc<dyn DataStore>) {
        let first = episode(1);
        let mut rerun = episode(2);
        rerun.title = first.title.clone();
        store
            .upsert_episodes(&[first.clone(), rerun.clone()])
            .await
            .unwrap();
        store.upsert_clip(&clip(1)).await.unwrap();
        assert_eq!(store.status(t0()).await.unwrap().episodes, 2);
        let a = lease(&*store, 5, t0()).await.unwrap();
        let b = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(a.episode, rerun);
        assert_eq!(b.episode, first);
        let outcomes = store
            .record_results(&[
                result(a.id, &first, &clip(1), &[1]),
                result(a.id, &rerun, &clip(1), &[2]),
            ])
            .await
            .unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Recorded; 2]);
        let matches = store.matches(&MatchFilter::default()).await.unwrap();
        assert_eq!(matches.len(), 2);
        assert_eq!(matches[0].episode_date_aired, rerun.date_aired);
        assert_eq!(matches[0].clip_offsets_ns, vec![2]);
    }

    /// Batches larger than any statement limit are written whole.
    pub async fn large_batches(store: Arc<dyn DataStore>) {
        let n = 5_000;
        let mut es: Vec<_> = (0..n).map(episode).collect();
        let cs: Vec<_> = (0..3).map(clip).collect();
        store.upsert_episodes(&es).await.unwrap();
        store.upsert_clips(&cs).await.unwrap();
        for e in &mut es {
            e.priority = 1;
            e.description = "updated".into();
        }
        es[17].priority = 2;
        store.upsert_episodes(&es).await.unwrap();
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.episodes, status.research_pairs), (5_000, 15_000));
        let l = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l.episode, es[17]);

        let results: Vec<_> = es
            .iter()
            .flat_map(|e| cs.iter().map(move |c| (e, c)))
            .enumerate()
            .map(|(i, (e, c))| {
                let offsets: &[i64] = if i % 7 == 0 { &[7, 14] } else { &[] };
                result(l.id, e, c, offsets)
            })
            .collect();
        let outcomes = store.record_results(&results).await.unwrap();
        assert!(outcomes.iter().all(|o| *o == RecordOutcome::Recorded));
        let status = store.status(t0()).await.unwrap();
        assert_eq!(status.researched_pairs, 15_000);
        assert_eq!(status.matched_pairs, 15_000_u64.div_ceil(7));
        assert_eq!((status.active_leases, status.leased_pairs), (0, 0));
        assert!(lease(&*store, 5, t0()).await.is_none());
        let matches = store.matches(&MatchFilter::default()).await.unwrap();
        assert_eq!(matches.len() as u64, status.matched_pairs);
        let outcomes = store.record_results(&results).await.unwrap();
        assert!(outcomes.iter().all(|o| *o == RecordOutcome::Duplicate));
    }

    /// A result that arrives after its lease expired still records, and frees the pair
    /// from whichever lease took it over.
    pub async fn recording_under_an_expired_lease(store: Arc<dyn DataStore>) {
        let (es, _) = seed(&*store, 1, 3).await;
        let old = lease(&*store, 3, t0()).await.unwrap();
        let later = t0() + Duration::hours(2);
        // Late result for the first pair, while the old lease is expired but still holds it.
        let outcome = store
            .record_result(&result(old.id, &es[0], &old.clips[0], &[]))
            .await
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Recorded);
        let status = store.status(later).await.unwrap();
        assert_eq!(
            (
                status.expired_leases,
                status.active_leases,
                status.leased_pairs
            ),
            (1, 0, 0)
        );
        // A new lease takes over the other two.
        let new = lease(&*store, 3, later).await.unwrap();
        assert_eq!(new.reclaimed_pairs, 2);
        assert_eq!(titles(&new), titles(&old)[1..].to_vec());
        // A late result for a pair the new lease now holds frees it from the new lease.
        let outcome = store
            .record_result(&result(old.id, &es[0], &old.clips[1], &[]))
            .await
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Recorded);
        let status = store.status(later).await.unwrap();
        assert_eq!(
            (
                status.expired_leases,
                status.active_leases,
                status.leased_pairs,
                status.researched_pairs
            ),
            (0, 1, 1, 2)
        );
        assert!(lease(&*store, 3, later).await.is_none());
    }

    /// (researched, failed, matched) pairs as status counts them.
    async fn done_counts(store: &dyn DataStore) -> (u64, u64, u64) {
        let s = store.status(t0()).await.unwrap();
        (s.researched_pairs, s.failed_pairs, s.matched_pairs)
    }

    /// A failed pair is recorded with its reason, counted as failed (not researched), freed
    /// from its lease and never leased again; its reason is listed.
    pub async fn failed_pairs_are_recorded_and_not_leased(store: Arc<dyn DataStore>) {
        let (_, cs) = seed(&*store, 1, 3).await;
        let l = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l.clips.len(), 3);
        let outcomes = store
            .record_results(&[
                failed(l.id, &l.episode, &cs[0], "media gone: HTTP 404"),
                failed(l.id, &l.episode, &cs[1], "media gone: HTTP 404"),
                result(l.id, &l.episode, &cs[2], &[7]),
            ])
            .await
            .unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Recorded; 3]);
        assert_eq!(done_counts(&*store).await, (1, 2, 1));
        let status = store.status(t0()).await.unwrap();
        assert_eq!(status.leased_pairs, 0, "failed pairs leave their lease");
        assert!(lease(&*store, 5, t0()).await.is_none());
        assert!(lease(&*store, 5, t0() + Duration::days(1)).await.is_none());
        assert_eq!(
            store.failure_reasons(10).await.unwrap(),
            vec![crate::FailureReason {
                reason: "media gone: HTTP 404".into(),
                pairs: 2
            }]
        );
        assert!(store.failure_reasons(0).await.unwrap().is_empty());
        // Only successes with offsets are matches.
        let matches = store.matches(&MatchFilter::default()).await.unwrap();
        assert_eq!(matches.len(), 1);
        assert_eq!(matches[0].clip_title, cs[2].title);
        // A failure again is a duplicate.
        assert_eq!(
            store
                .record_result(&failed(l.id, &l.episode, &cs[0], "another reason"))
                .await
                .unwrap(),
            RecordOutcome::Duplicate
        );
        assert_eq!(done_counts(&*store).await, (1, 2, 1));
        // A new clip is work again, for that clip only.
        store.upsert_clip(&clip(9)).await.unwrap();
        let again = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(titles(&again), vec![clip(9).title]);
    }

    /// A success recorded after a failure replaces it; a failure after a success changes
    /// nothing.
    pub async fn success_replaces_failure_but_not_the_reverse(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 2).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[failed(id, &es[0], &cs[0], "not audio")])
            .await
            .unwrap();
        assert_eq!(done_counts(&*store).await, (0, 1, 0));
        // In one batch: the success replaces the failure; the failure for the other pair
        // after its success is a duplicate.
        let outcomes = store
            .record_results(&[
                result(id, &es[0], &cs[0], &[3]),
                result(id, &es[0], &cs[1], &[]),
                failed(id, &es[0], &cs[1], "too late"),
            ])
            .await
            .unwrap();
        assert_eq!(
            outcomes,
            vec![
                RecordOutcome::Recorded,
                RecordOutcome::Recorded,
                RecordOutcome::Duplicate
            ]
        );
        assert_eq!(done_counts(&*store).await, (2, 0, 1));
        assert!(store.failure_reasons(10).await.unwrap().is_empty());
        assert_eq!(
            store
                .record_result(&failed(id, &es[0], &cs[0], "not audio"))
                .await
                .unwrap(),
            RecordOutcome::Duplicate
        );
        assert_eq!(
            store
                .record_result(&result(id, &es[0], &cs[0], &[3]))
                .await
                .unwrap(),
            RecordOutcome::Duplicate
        );
        assert_eq!(done_counts(&*store).await, (2, 0, 1));
        let m = store.matches(&MatchFilter::default()).await.unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].clip_offsets_ns, vec![3]);
        assert!(lease(&*store, 5, t0()).await.is_none());
        assert_eq!(store.retry_failed(None, None).await.unwrap(), 0);
    }

    /// `retry_failed` frees failed pairs by episode title, by clip title, or all, and they are
    /// leased again, also after selection walked past their episodes.
    pub async fn retry_failed_makes_pairs_researchable_again(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 3, 2).await;
        let id = Uuid::new_v4();
        // Episode 2 (the most urgent) and episode 1 fail entirely; episode 0 is researched.
        let mut batch = Vec::new();
        for e in &es[1..] {
            for c in &cs {
                batch.push(failed(id, e, c, "media gone: HTTP 410"));
            }
        }
        batch.push(result(id, &es[0], &cs[0], &[]));
        batch.push(result(id, &es[0], &cs[1], &[]));
        store.record_results(&batch).await.unwrap();
        assert_eq!(done_counts(&*store).await, (2, 4, 0));
        // Selection walks past everything, twice (a store may remember where work starts).
        assert!(lease(&*store, 5, t0()).await.is_none());
        assert!(lease(&*store, 5, t0()).await.is_none());

        assert_eq!(
            store
                .retry_failed(Some("no such episode"), None)
                .await
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .retry_failed(Some(&es[2].title), Some(&cs[1].title))
                .await
                .unwrap(),
            1
        );
        assert_eq!(done_counts(&*store).await, (2, 3, 0));
        let l = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(
            (l.episode.title.clone(), titles(&l)),
            (es[2].title.clone(), vec![cs[1].title.clone()])
        );
        assert!(lease(&*store, 5, t0()).await.is_none());

        assert_eq!(
            store.retry_failed(None, Some(&cs[0].title)).await.unwrap(),
            2
        );
        assert_eq!(done_counts(&*store).await, (2, 1, 0));
        let l2 = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l2.episode.title, es[2].title);
        assert_eq!(titles(&l2), vec![cs[0].title.clone()]);
        let l3 = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l3.episode.title, es[1].title);
        assert_eq!(titles(&l3), vec![cs[0].title.clone()]);

        assert_eq!(store.retry_failed(None, None).await.unwrap(), 1);
        assert_eq!(done_counts(&*store).await, (2, 0, 0));
        let l4 = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l4.episode.title, es[1].title);
        assert_eq!(titles(&l4), vec![cs[1].title.clone()]);
        assert!(lease(&*store, 5, t0()).await.is_none());
        let status = store.status(t0()).await.unwrap();
        assert_eq!(status.leased_pairs, 4);
    }

    /// `forget_episode_results` forgets every result of one episode (matched, unmatched,
    /// failed), with its counters and its completion, and only of it: its pairs are leased
    /// again, also after selection walked past it, and recorded anew.
    pub async fn forget_episode_results_makes_every_pair_researchable_again(
        store: Arc<dyn DataStore>,
    ) {
        let (es, cs) = seed(&*store, 2, 2).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[
                result(id, &es[0], &cs[0], &[5]),
                failed(id, &es[0], &cs[1], "not audio"),
                result(id, &es[1], &cs[0], &[7]),
                result(id, &es[1], &cs[1], &[]),
            ])
            .await
            .unwrap();
        assert_eq!(done_counts(&*store).await, (3, 1, 2));
        assert_eq!(store.completions(10).await.unwrap().len(), 2);
        // Selection walks past everything, twice (a store may remember where work starts).
        assert!(lease(&*store, 5, t0()).await.is_none());
        assert!(lease(&*store, 5, t0()).await.is_none());

        // No such episode: another title, or the same title aired another day.
        let none = store
            .forget_episode_results("no such episode", es[0].date_aired)
            .await
            .unwrap();
        assert_eq!(none, None);
        let none = store
            .forget_episode_results(&es[0].title, es[1].date_aired)
            .await
            .unwrap();
        assert_eq!(none, None);
        assert_eq!(done_counts(&*store).await, (3, 1, 2));

        let forgot = store
            .forget_episode_results(&es[0].title, es[0].date_aired)
            .await
            .unwrap();
        assert_eq!(forgot, Some(2));
        assert_eq!(done_counts(&*store).await, (2, 0, 1));
        let m = store.matches(&MatchFilter::default()).await.unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].episode_title, es[1].title);
        let done = store.completions(10).await.unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].episode, es[1]);
        // Nothing left to forget: the episode is known, its results are none.
        assert_eq!(
            store
                .forget_episode_results(&es[0].title, es[0].date_aired)
                .await
                .unwrap(),
            Some(0)
        );

        let l = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l.episode.title, es[0].title);
        assert_eq!(titles(&l), vec![cs[1].title.clone(), cs[0].title.clone()]);
        assert!(lease(&*store, 5, t0()).await.is_none());
        let outcomes = store
            .record_results(&[
                result(l.id, &es[0], &cs[0], &[6]),
                result(l.id, &es[0], &cs[1], &[]),
            ])
            .await
            .unwrap();
        assert_eq!(outcomes, vec![RecordOutcome::Recorded; 2]);
        assert_eq!(done_counts(&*store).await, (4, 0, 2));
        assert_eq!(store.completions(10).await.unwrap().len(), 2);
        let m = store
            .matches(&MatchFilter {
                episode_title: Some(es[0].title.clone()),
                ..MatchFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].clip_offsets_ns, vec![6]);
    }

    /// Curating an episode or clip again with another `media_uri` frees its failed pairs;
    /// with the same one, nothing changes.
    pub async fn curated_anew_makes_failed_pairs_researchable_again(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 2, 2).await;
        let id = Uuid::new_v4();
        let mut batch = Vec::new();
        for e in &es {
            for c in &cs {
                batch.push(failed(id, e, c, "not audio"));
            }
        }
        store.record_results(&batch).await.unwrap();
        assert_eq!(done_counts(&*store).await, (0, 4, 0));
        assert!(lease(&*store, 5, t0()).await.is_none());

        // The same curation delivered again, or an older one: still failed.
        store.upsert_episode(&es[1]).await.unwrap();
        store.upsert_clip(&cs[0]).await.unwrap();
        let mut older = cs[0].clone();
        older.last_date_curated -= Duration::minutes(1);
        store.upsert_clip(&older).await.unwrap();
        assert_eq!(done_counts(&*store).await, (0, 4, 0));
        assert!(lease(&*store, 5, t0()).await.is_none());
        let mut e1 = es[1].clone();

        // Another URI for episode 1: its two pairs come back.
        e1.last_date_curated += Duration::hours(1);
        e1.media_uri = "https://media.example.invalid/episodes/1-fixed.mp3".into();
        store.upsert_episode(&e1).await.unwrap();
        assert_eq!(done_counts(&*store).await, (0, 2, 0));
        let l = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l.episode.media_uri, e1.media_uri);
        assert_eq!(l.clips.len(), 2);
        assert!(lease(&*store, 5, t0()).await.is_none());

        // Clip 1 curated anew at the same URI (a curator sends an item again when its media
        // changed): its pair with episode 0 comes back (episode 1's is leased).
        let mut c1 = cs[1].clone();
        c1.last_date_curated += Duration::hours(1);
        store.upsert_clip(&c1).await.unwrap();
        assert_eq!(done_counts(&*store).await, (0, 1, 0));
        let l2 = lease(&*store, 5, t0()).await.unwrap();
        assert_eq!(l2.episode.title, es[0].title);
        assert_eq!(titles(&l2), vec![c1.title.clone()]);
        assert!(lease(&*store, 5, t0()).await.is_none());
        assert_eq!(
            store.failure_reasons(5).await.unwrap(),
            vec![crate::FailureReason {
                reason: "not audio".into(),
                pairs: 1
            }]
        );
    }

    /// The completions waiting to be announced: (episode title, researched, matched, failed,
    /// matched clip titles in order).
    async fn pending(store: &dyn DataStore) -> Vec<(String, u64, u64, u64, Vec<String>)> {
        store
            .completions(100)
            .await
            .unwrap()
            .into_iter()
            .map(|c| {
                (
                    c.episode.title,
                    c.clips_researched,
                    c.clips_matched,
                    c.clips_failed,
                    c.matches.into_iter().map(|m| m.clip.title).collect(),
                )
            })
            .collect()
    }

    /// An episode's completion is kept when its last pair is recorded, with its counts and its
    /// matches in the order they occur, and not before; the other episode stays open.
    pub async fn completion_is_kept_when_the_last_pair_is_recorded(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 2, 3).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[
                result(id, &es[1], &cs[0], &[9_000, 2_000]),
                result(id, &es[1], &cs[1], &[]),
                result(id, &es[0], &cs[0], &[5]),
            ])
            .await
            .unwrap();
        assert!(pending(&*store).await.is_empty(), "nothing complete yet");
        let mut last = result(id, &es[1], &cs[2], &[1_000]);
        last.research_date = t0() + Duration::minutes(5);
        store.record_results(&[last]).await.unwrap();
        let done = store.completions(10).await.unwrap();
        assert_eq!(done.len(), 1);
        let c = &done[0];
        assert_eq!(c.episode, es[1]);
        assert_eq!(c.completed_at, t0() + Duration::minutes(5));
        assert_eq!(
            (c.clips_researched, c.clips_matched, c.clips_failed),
            (3, 2, 0)
        );
        // In the order they occur: clip 2 at 1 µs, clip 0 first at 2 µs, its offsets sorted.
        assert_eq!(c.matches.len(), 2);
        assert_eq!(c.matches[0].clip, cs[2]);
        assert_eq!(c.matches[0].clip_offsets_ns, vec![1_000]);
        assert_eq!(c.matches[1].clip, cs[0]);
        assert_eq!(c.matches[1].clip_offsets_ns, vec![2_000, 9_000]);
        assert!(store.completions(0).await.unwrap().is_empty());
        assert_eq!(store.completions_announced(&[c.id]).await.unwrap(), 1);
        assert!(pending(&*store).await.is_empty());
        assert_eq!(store.completions_announced(&[c.id]).await.unwrap(), 0);
    }

    /// Failed pairs count toward completion; results delivered again complete nothing again.
    pub async fn completion_counts_failures_and_survives_duplicates(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 2).await;
        let id = Uuid::new_v4();
        let batch = [
            failed(id, &es[0], &cs[0], "not audio"),
            result(id, &es[0], &cs[1], &[]),
        ];
        store.record_results(&batch).await.unwrap();
        let done = store.completions(10).await.unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(
            (
                done[0].clips_researched,
                done[0].clips_matched,
                done[0].clips_failed
            ),
            (1, 0, 1)
        );
        assert!(done[0].matches.is_empty());
        store.completions_announced(&[done[0].id]).await.unwrap();
        // Duplicates, and a success replacing the failure, do not complete it again.
        store.record_results(&batch).await.unwrap();
        store
            .record_results(&[result(id, &es[0], &cs[0], &[3])])
            .await
            .unwrap();
        assert!(pending(&*store).await.is_empty());
    }

    /// A clip curated after an episode completed reopens it; recording that pair completes it
    /// again. Retrying a failed pair reopens it too.
    pub async fn a_later_clip_reopens_and_completes_again(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 1).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[result(id, &es[0], &cs[0], &[])])
            .await
            .unwrap();
        let first = store.completions(10).await.unwrap();
        assert_eq!(first.len(), 1);
        store.completions_announced(&[first[0].id]).await.unwrap();
        store.upsert_clip(&clip(7)).await.unwrap();
        assert!(pending(&*store).await.is_empty(), "reopened, not complete");
        store
            .record_results(&[failed(id, &es[0], &clip(7), "media gone: HTTP 404")])
            .await
            .unwrap();
        assert_eq!(
            pending(&*store).await,
            vec![(es[0].title.clone(), 1, 0, 1, vec![])]
        );
        let second = store.completions(10).await.unwrap();
        store.completions_announced(&[second[0].id]).await.unwrap();
        assert_eq!(store.retry_failed(None, None).await.unwrap(), 1);
        store
            .record_results(&[result(id, &es[0], &clip(7), &[4])])
            .await
            .unwrap();
        assert_eq!(
            pending(&*store).await,
            vec![(es[0].title.clone(), 2, 1, 0, vec![clip(7).title])]
        );
    }

    /// Clips curated again, alone or twice in one batch, are one clip each: the episode has
    /// one pair per distinct clip to lease, and completes on the last of them, not before nor
    /// never. (The stores keep the clip count apart from the clips.)
    pub async fn clips_curated_again_count_once(store: Arc<dyn DataStore>) {
        let e = episode(0);
        store.upsert_episode(&e).await.unwrap();
        store.upsert_clip(&clip(0)).await.unwrap();
        let mut again = clip(0);
        again.last_date_curated += Duration::hours(1);
        store.upsert_clip(&again).await.unwrap();
        store.upsert_clip(&again).await.unwrap();
        let mut newer = clip(1);
        newer.last_date_curated += Duration::hours(2);
        store
            .upsert_clips(&[clip(1), newer, again.clone(), clip(2)])
            .await
            .unwrap();
        let status = store.status(t0()).await.unwrap();
        assert_eq!((status.clips, status.research_pairs), (3, 3));
        let l = lease(&*store, 10, t0()).await.unwrap();
        assert_eq!(titles(&l).len(), 3);
        assert!(lease(&*store, 10, t0()).await.is_none());
        let id = l.id;
        store
            .record_results(&[result(id, &e, &clip(0), &[]), result(id, &e, &clip(1), &[])])
            .await
            .unwrap();
        assert!(pending(&*store).await.is_empty(), "a pair is left");
        store
            .record_results(&[result(id, &e, &clip(2), &[7])])
            .await
            .unwrap();
        assert_eq!(
            pending(&*store).await,
            vec![(e.title.clone(), 3, 1, 0, vec![clip(2).title])]
        );
    }

    /// Announcing lets go of the completion as it was read: one that completed again meanwhile
    /// stays, to be announced with what it is now.
    pub async fn announcing_lets_go_only_of_what_was_read(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 1).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[result(id, &es[0], &cs[0], &[])])
            .await
            .unwrap();
        let read = store.completions(10).await.unwrap();
        // Reopened and completed again before the announcement went out.
        store.upsert_clip(&clip(5)).await.unwrap();
        store
            .record_results(&[result(id, &es[0], &clip(5), &[8])])
            .await
            .unwrap();
        assert_eq!(store.completions_announced(&[read[0].id]).await.unwrap(), 0);
        assert_eq!(
            pending(&*store).await,
            vec![(es[0].title.clone(), 2, 1, 0, vec![clip(5).title])]
        );
        let again = store.completions(10).await.unwrap();
        assert_eq!(
            store.completions_announced(&[again[0].id]).await.unwrap(),
            1
        );
        assert!(pending(&*store).await.is_empty());
    }

    /// Claimers at once (recorders announcing on a bus outside the database) never get the
    /// same completion, and between them get every one.
    pub async fn concurrent_claims_never_share_a_completion(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 60, 1).await;
        let id = Uuid::new_v4();
        let all: Vec<_> = es.iter().map(|e| result(id, e, &cs[0], &[])).collect();
        store.record_results(&all).await.unwrap();
        let until = t0() + Duration::minutes(10);
        let n = es.len();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    loop {
                        let claimed = store.claim_completions(4, t0(), until).await.unwrap();
                        if claimed.is_empty() {
                            return got;
                        }
                        assert!(claimed.len() <= 4);
                        got.extend(claimed.into_iter().map(|c| c.episode.title));
                        assert!(got.len() <= n, "claimed more than there are: {got:?}");
                    }
                })
            })
            .collect();
        let mut claimed = HashSet::new();
        for task in tasks {
            for title in task.await.unwrap() {
                assert!(claimed.insert(title.clone()), "{title} claimed twice");
            }
        }
        assert_eq!(claimed.len(), es.len());
        // Still kept (to be let go once announced), and nobody else's while the claims last.
        assert_eq!(store.completions(100).await.unwrap().len(), es.len());
        let later = t0() + Duration::minutes(9);
        assert!(store
            .claim_completions(100, later, until)
            .await
            .unwrap()
            .is_empty());
    }

    /// A claim ends when it runs out (its claimer stopped), when it is given back (its send
    /// failed), or when its episode completes again (the newer completion is anyone's);
    /// letting go of a claimed completion ends it for good.
    pub async fn claims_run_out_are_given_back_and_end_on_completing_again(
        store: Arc<dyn DataStore>,
    ) {
        let (es, cs) = seed(&*store, 3, 1).await;
        let id = Uuid::new_v4();
        let all: Vec<_> = es.iter().map(|e| result(id, e, &cs[0], &[])).collect();
        store.record_results(&all).await.unwrap();
        let minutes = |m: i64| t0() + Duration::minutes(m);
        let title = |c: &[crate::EpisodeCompletion]| -> Vec<String> {
            let mut t: Vec<String> = c.iter().map(|c| c.episode.title.clone()).collect();
            t.sort();
            t
        };
        let first = store.claim_completions(2, t0(), minutes(10)).await.unwrap();
        assert_eq!(first.len(), 2);
        assert!(first[0].matches.is_empty());
        let rest = store.claim_completions(5, t0(), minutes(10)).await.unwrap();
        assert_eq!(rest.len(), 1);
        assert!(store
            .claim_completions(5, minutes(1), minutes(11))
            .await
            .unwrap()
            .is_empty());
        // Given back: anyone's at once.
        assert_eq!(store.release_completions(&[rest[0].id]).await.unwrap(), 1);
        let again = store
            .claim_completions(5, minutes(1), minutes(11))
            .await
            .unwrap();
        assert_eq!(title(&again), title(&rest));
        // Run out: anyone's.
        let expired = store
            .claim_completions(5, minutes(10), minutes(20))
            .await
            .unwrap();
        assert_eq!(title(&expired), title(&first));
        // Let go of: gone for good.
        let ids: Vec<_> = expired.iter().map(|c| c.id).collect();
        assert_eq!(store.completions_announced(&ids).await.unwrap(), 2);
        assert!(store
            .claim_completions(5, minutes(60), minutes(70))
            .await
            .unwrap()
            .iter()
            .all(|c| c.episode.title == again[0].episode.title));
        // Completed again while claimed: the newer completion is anyone's; letting go of (or
        // giving back) the old claim changes nothing.
        let held = store
            .claim_completions(5, minutes(80), minutes(90))
            .await
            .unwrap();
        assert_eq!(title(&held), title(&again));
        let episode = es
            .iter()
            .find(|e| e.title == held[0].episode.title)
            .unwrap();
        store.upsert_clip(&clip(9)).await.unwrap();
        store
            .record_results(&[result(id, episode, &clip(9), &[5])])
            .await
            .unwrap();
        let newer = store
            .claim_completions(5, minutes(81), minutes(91))
            .await
            .unwrap();
        assert_eq!(title(&newer), title(&held));
        assert_eq!(newer[0].clips_matched, 1);
        assert_eq!(store.release_completions(&[held[0].id]).await.unwrap(), 0);
        assert_eq!(store.completions_announced(&[held[0].id]).await.unwrap(), 0);
        assert_eq!(
            store.completions_announced(&[newer[0].id]).await.unwrap(),
            1
        );
        assert!(store.completions(10).await.unwrap().is_empty());
        assert!(store
            .claim_completions(0, minutes(100), minutes(110))
            .await
            .unwrap()
            .is_empty());
    }

    // ------------------------------------------------------------------------ browsing

    fn browse(store: &dyn DataStore) -> &dyn crate::Browse {
        store.browse().expect("the SQL adapters offer browsing")
    }

    fn list(search: Option<&str>, cursor: Option<String>, limit: u32) -> crate::ListQuery {
        crate::ListQuery {
            search: search.map(str::to_string),
            cursor,
            limit,
        }
    }

    /// Clips listed most occurrences first (ties: title), each with its failures and pairs;
    /// paged by cursor through every clip exactly once; a bad cursor or page size is refused.
    pub async fn browse_lists_clips_by_occurrences(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 3, 4).await;
        let id = Uuid::new_v4();
        // Clip 2 once in each of three episodes, clip 0 four times in one, clip 3 failed once,
        // clip 1 nowhere: occurrences are times found, not episodes.
        let mut batch = Vec::new();
        for e in &es {
            batch.push(result(id, e, &cs[2], &[5_000_000_000]));
        }
        batch.push(result(
            id,
            &es[0],
            &cs[0],
            &[1_000_000_000, 2_000_000_000, 3_000_000_000, 9_000_000_000],
        ));
        batch.push(result(id, &es[1], &cs[0], &[]));
        batch.push(failed(id, &es[2], &cs[3], "not audio"));
        store.record_results(&batch).await.unwrap();

        let page = browse(&*store)
            .list_clips(&list(None, None, 50))
            .await
            .unwrap();
        let rows: Vec<(String, u64, u64, u64, u64)> = page
            .items
            .iter()
            .map(|c| {
                (
                    c.clip.title.clone(),
                    c.occurrences,
                    c.episodes,
                    c.failed_pairs,
                    c.total_pairs,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("Clip 0".to_string(), 4, 1, 0, 3),
                ("Clip 2".to_string(), 3, 3, 0, 3),
                ("Clip 1".to_string(), 0, 0, 0, 3),
                ("Clip 3".to_string(), 0, 0, 1, 3),
            ]
        );
        assert_eq!(page.items[0].clip, cs[0]);
        assert_eq!(page.next_cursor, None);

        // One at a time: the same rows, each once, and no cursor after the last.
        let mut walked = Vec::new();
        let mut cursor = None;
        loop {
            let page = browse(&*store)
                .list_clips(&list(None, cursor, 1))
                .await
                .unwrap();
            assert!(page.items.len() <= 1);
            walked.extend(page.items.iter().map(|c| c.clip.title.clone()));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
            assert!(walked.len() <= 4, "paging does not end: {walked:?}");
        }
        let expected: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        assert_eq!(walked, expected);

        // A cursor is the listing's own; sizes are bounded.
        for bad in ["zz", "00", "", "not a cursor"] {
            let e = browse(&*store)
                .list_clips(&list(None, Some(bad.to_string()), 10))
                .await
                .unwrap_err();
            assert!(matches!(e, DataStoreError::Invalid(_)), "{bad}: {e}");
        }
        let episodes_cursor = browse(&*store)
            .list_episodes(&list(None, None, 1))
            .await
            .unwrap()
            .next_cursor
            .unwrap();
        assert!(matches!(
            browse(&*store)
                .list_clips(&list(None, Some(episodes_cursor), 10))
                .await,
            Err(DataStoreError::Invalid(_))
        ));
        for limit in [0, crate::MAX_PAGE + 1] {
            assert!(matches!(
                browse(&*store).list_clips(&list(None, None, limit)).await,
                Err(DataStoreError::Invalid(_))
            ));
        }
    }

    /// Titles are searched by word (any case, each word a prefix, all words required) through
    /// the datastore's index; input that is query syntax elsewhere finds by its words only.
    pub async fn browse_searches_titles(store: Arc<dyn DataStore>) {
        let titles = [
            "The Archive Strikes Back",
            "Archivists, united",
            "Bonus: <b>Live</b> & \"loud\" — Zürich",
            "Episode 4012: The Archive",
            "Nothing here",
            "Mail a@b.example, /srv/show/77.mp3 <script>x</script>",
        ];
        let es: Vec<EpisodeInfo> = titles
            .iter()
            .enumerate()
            .map(|(i, t)| EpisodeInfo {
                title: (*t).to_string(),
                ..episode(i as u32)
            })
            .collect();
        store.upsert_episodes(&es).await.unwrap();
        let cs: Vec<ClipInfo> = titles
            .iter()
            .enumerate()
            .map(|(i, t)| ClipInfo {
                title: (*t).to_string(),
                ..clip(i as u32)
            })
            .collect();
        store.upsert_clips(&cs).await.unwrap();

        let episodes = |q: &'static str| {
            let store = store.clone();
            async move {
                let page = browse(&*store)
                    .list_episodes(&list(Some(q), None, 50))
                    .await
                    .unwrap();
                let mut found: Vec<String> =
                    page.items.into_iter().map(|e| e.episode.title).collect();
                found.sort();
                found
            }
        };
        let clips = |q: &'static str| {
            let store = store.clone();
            async move {
                let page = browse(&*store)
                    .list_clips(&list(Some(q), None, 50))
                    .await
                    .unwrap();
                let mut found: Vec<String> = page.items.into_iter().map(|c| c.clip.title).collect();
                found.sort();
                found
            }
        };
        let archive = vec![
            "Episode 4012: The Archive".to_string(),
            "The Archive Strikes Back".to_string(),
        ];
        assert_eq!(episodes("archive").await, archive);
        assert_eq!(episodes("ARCHIVE the").await, archive);
        assert_eq!(
            episodes("archiv").await,
            vec![
                "Archivists, united".to_string(),
                "Episode 4012: The Archive".to_string(),
                "The Archive Strikes Back".to_string(),
            ]
        );
        assert_eq!(episodes("4012").await, vec![archive[0].clone()]);
        assert_eq!(episodes("live loud").await, vec![titles[2].to_string()]);
        assert_eq!(episodes("zürich").await, vec![titles[2].to_string()]);
        assert_eq!(episodes("<b>live</b>").await, vec![titles[2].to_string()]);
        assert!(episodes("absent").await.is_empty());
        // Words inside markup, addresses and paths are words like any other.
        for q in ["script", "example", "mp3", "srv show", "b.example"] {
            assert_eq!(episodes(q).await, vec![titles[5].to_string()], "{q}");
        }
        // Syntax of tsquery, FTS5 and SQL, and nothing at all to search for.
        assert!(episodes("' OR 1=1 --").await.len() <= titles.len());
        assert!(episodes("\"archive* NEAR(").await.len() <= 3);
        assert_eq!(episodes("  :*&| ").await.len(), titles.len());
        assert_eq!(episodes("").await.len(), titles.len());
        assert_eq!(clips("archive").await, archive);
        assert_eq!(
            clips("united").await,
            vec!["Archivists, united".to_string()]
        );
        // A new episode is found at once.
        store
            .upsert_episode(&EpisodeInfo {
                title: "A Fresh Archive".into(),
                ..episode(9)
            })
            .await
            .unwrap();
        assert_eq!(episodes("fresh").await, vec!["A Fresh Archive".to_string()]);
    }

    /// Episodes listed latest aired first, with their research counts, paged by cursor.
    pub async fn browse_lists_episodes_newest_first(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 5, 3).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[
                result(id, &es[4], &cs[0], &[7]),
                result(id, &es[4], &cs[1], &[]),
                failed(id, &es[4], &cs[2], "gone"),
                result(id, &es[1], &cs[0], &[]),
            ])
            .await
            .unwrap();
        let page = browse(&*store)
            .list_episodes(&list(None, None, 50))
            .await
            .unwrap();
        let titles: Vec<&str> = page
            .items
            .iter()
            .map(|e| e.episode.title.as_str())
            .collect();
        assert_eq!(
            titles,
            [
                "Episode 4",
                "Episode 3",
                "Episode 2",
                "Episode 1",
                "Episode 0"
            ]
        );
        let e4 = &page.items[0];
        assert_eq!(e4.episode, es[4]);
        assert_eq!(
            (
                e4.researched_pairs,
                e4.failed_pairs,
                e4.matched_pairs,
                e4.total_pairs
            ),
            (2, 1, 1, 3)
        );
        let e1 = &page.items[3];
        assert_eq!(
            (
                e1.researched_pairs,
                e1.failed_pairs,
                e1.matched_pairs,
                e1.total_pairs
            ),
            (1, 0, 0, 3)
        );

        let first = browse(&*store)
            .list_episodes(&list(None, None, 2))
            .await
            .unwrap();
        assert_eq!(first.items.len(), 2);
        let second = browse(&*store)
            .list_episodes(&list(None, first.next_cursor.clone(), 2))
            .await
            .unwrap();
        let third = browse(&*store)
            .list_episodes(&list(None, second.next_cursor.clone(), 2))
            .await
            .unwrap();
        assert_eq!(third.next_cursor, None);
        let walked: Vec<String> = [first, second, third]
            .into_iter()
            .flat_map(|p| p.items.into_iter().map(|e| e.episode.title))
            .collect();
        assert_eq!(walked, titles);
        // Two episodes aired at once: both listed, once each, across a page boundary.
        store
            .upsert_episode(&EpisodeInfo {
                title: "Episode 4 again".into(),
                media_uri: "https://media.example.invalid/episodes/4b.mp3".into(),
                ..es[4].clone()
            })
            .await
            .unwrap();
        let first = browse(&*store)
            .list_episodes(&list(None, None, 1))
            .await
            .unwrap();
        let second = browse(&*store)
            .list_episodes(&list(None, first.next_cursor, 1))
            .await
            .unwrap();
        let mut both = vec![
            first.items[0].episode.title.clone(),
            second.items[0].episode.title.clone(),
        ];
        both.sort();
        assert_eq!(both, ["Episode 4", "Episode 4 again"]);
    }

    /// A clip's page: its episodes latest aired first with their offsets ascending, paged;
    /// an unknown id is `None`.
    pub async fn browse_clip_page_lists_its_episodes(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 4, 2).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[
                result(id, &es[0], &cs[1], &[3_000_000_000]),
                result(id, &es[2], &cs[1], &[3_723_000_000_000, 61_000_000_000]),
                result(id, &es[3], &cs[1], &[1]),
                result(id, &es[1], &cs[1], &[]),
                result(id, &es[1], &cs[0], &[42]),
            ])
            .await
            .unwrap();
        let clips = browse(&*store)
            .list_clips(&list(Some("Clip 1"), None, 10))
            .await
            .unwrap();
        let clip_id = clips
            .items
            .iter()
            .find(|c| c.clip.title == "Clip 1")
            .unwrap()
            .id;
        let page = browse(&*store)
            .clip_page(clip_id, &list(None, None, 50))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(page.summary.clip, cs[1]);
        // Found four times, in three episodes.
        assert_eq!(
            (
                page.summary.occurrences,
                page.summary.episodes,
                page.summary.total_pairs
            ),
            (4, 3, 4)
        );
        let rows: Vec<(&str, Vec<i64>)> = page
            .occurrences
            .items
            .iter()
            .map(|o| (o.episode.title.as_str(), o.clip_offsets_ns.clone()))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("Episode 3", vec![1]),
                ("Episode 2", vec![61_000_000_000, 3_723_000_000_000]),
                ("Episode 0", vec![3_000_000_000]),
            ]
        );
        assert_eq!(page.occurrences.items[1].episode, es[2]);
        assert_eq!(page.occurrences.items[1].research_date, t0());
        assert_eq!(page.occurrences.next_cursor, None);

        let first = browse(&*store)
            .clip_page(clip_id, &list(None, None, 2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.occurrences.items.len(), 2);
        let rest = browse(&*store)
            .clip_page(clip_id, &list(None, first.occurrences.next_cursor, 2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(rest.occurrences.items.len(), 1);
        assert_eq!(rest.occurrences.items[0].episode.title, "Episode 0");
        assert_eq!(rest.occurrences.next_cursor, None);

        assert!(browse(&*store)
            .clip_page(clip_id + 1000, &list(None, None, 10))
            .await
            .unwrap()
            .is_none());
    }

    /// An episode's page: its clips in the order they occur, its pairs leased (judged at the
    /// time given), left and failed with their reasons; an unknown id is `None`.
    pub async fn browse_episode_page_shows_timeline_and_work_left(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 1, 6).await;
        let id = Uuid::new_v4();
        store
            .record_results(&[
                result(id, &es[0], &cs[0], &[90_000_000_000, 10_000_000_000]),
                result(id, &es[0], &cs[1], &[50_000_000_000]),
                result(id, &es[0], &cs[2], &[]),
                failed(id, &es[0], &cs[3], "not audio: <script>"),
            ])
            .await
            .unwrap();
        // Two of the remaining pairs leased for an hour from t0.
        let leased = lease(&*store, 1, t0()).await.unwrap();
        assert_eq!(leased.clips.len(), 1);
        let leased = lease(&*store, 1, t0()).await.unwrap();
        assert_eq!(leased.clips.len(), 1);

        let episodes = browse(&*store)
            .list_episodes(&list(None, None, 1))
            .await
            .unwrap();
        let episode_id = episodes.items[0].id;
        let page = browse(&*store)
            .episode_page(episode_id, t0())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(page.summary.episode, es[0]);
        let timeline: Vec<(i64, &str)> = page
            .timeline
            .iter()
            .map(|t| (t.offset_ns, t.clip_title.as_str()))
            .collect();
        assert_eq!(
            timeline,
            vec![
                (10_000_000_000, "Clip 0"),
                (50_000_000_000, "Clip 1"),
                (90_000_000_000, "Clip 0"),
            ]
        );
        assert_eq!(
            (
                page.summary.researched_pairs,
                page.summary.failed_pairs,
                page.summary.matched_pairs,
                page.summary.total_pairs
            ),
            (3, 1, 2, 6)
        );
        // The lengths the researchers measured, for drawing the timeline.
        assert_eq!(page.duration_ns, Some(3_600_000_000_000));
        assert!(page
            .timeline
            .iter()
            .all(|t| t.clip_duration_ns == 4_000_000_000));
        assert_eq!((page.leased_pairs, page.unresearched_pairs), (2, 0));
        assert_eq!(page.failed.len(), 1);
        assert_eq!(page.failed[0].clip_title, "Clip 3");
        assert_eq!(page.failed[0].reason, "not audio: <script>");

        // Once the leases have expired their pairs are left to research again.
        let later = browse(&*store)
            .episode_page(episode_id, t0() + Duration::hours(2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((later.leased_pairs, later.unresearched_pairs), (0, 2));

        assert!(browse(&*store)
            .episode_page(episode_id + 1000, t0())
            .await
            .unwrap()
            .is_none());
    }

    /// `MatchFilter::since` keeps the matches researched at or after it (incremental exports).
    pub async fn matches_since_a_research_date(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 3, 1).await;
        let id = Uuid::new_v4();
        let at = |e: usize, hours: i64| ResearchResult {
            research_date: t0() + Duration::hours(hours),
            ..result(id, &es[e], &cs[0], &[1_000])
        };
        store
            .record_results(&[at(0, 0), at(1, 5), at(2, 10)])
            .await
            .unwrap();
        let since = |hours: i64| {
            let store = store.clone();
            async move {
                store
                    .matches(&MatchFilter {
                        since: Some(t0() + Duration::hours(hours)),
                        ..MatchFilter::default()
                    })
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|m| m.episode_title)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(since(-1).await, ["Episode 2", "Episode 1", "Episode 0"]);
        assert_eq!(since(5).await, ["Episode 2", "Episode 1"]);
        assert_eq!(since(6).await, ["Episode 2"]);
        assert!(since(11).await.is_empty());
        let with_clip = store
            .matches(&MatchFilter {
                since: Some(t0() + Duration::hours(1)),
                clip_title: Some("Clip 0".into()),
                limit: Some(1),
                ..MatchFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(with_clip.len(), 1);
        assert_eq!(with_clip[0].episode_title, "Episode 2");
    }

    /// Matches, a clip's occurrences and an episode's timeline name the SHA-256 of the media
    /// each result was measured on (its `episode_hash`) where that is a SHA-256, and nothing
    /// where the result named none or named it otherwise.
    pub async fn matches_name_the_media_they_were_measured_on(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 2, 2).await;
        let id = Uuid::new_v4();
        let sha = |n: u8| format!("{n:02x}").repeat(32);
        let measured = |e: usize, c: usize, hash: String| ResearchResult {
            episode_hash: hash,
            ..result(id, &es[e], &cs[c], &[5_000_000_000])
        };
        store
            .record_results(&[
                measured(0, 0, sha(0xab)),
                measured(0, 1, sha(0xcd)),
                // Not a SHA-256: an analyser's own name, an upper-case one.
                measured(1, 0, "sha256:episode:1".into()),
                measured(1, 1, sha(0xab).to_uppercase()),
            ])
            .await
            .unwrap();
        let named = |ms: Vec<crate::Match>| {
            let mut out: Vec<(String, String, Option<String>)> = ms
                .into_iter()
                .map(|m| (m.episode_title, m.clip_title, m.episode_media_sha256))
                .collect();
            out.sort();
            out
        };
        let expected = vec![
            (
                "Episode 0".to_string(),
                "Clip 0".to_string(),
                Some(sha(0xab)),
            ),
            (
                "Episode 0".to_string(),
                "Clip 1".to_string(),
                Some(sha(0xcd)),
            ),
            ("Episode 1".to_string(), "Clip 0".to_string(), None),
            ("Episode 1".to_string(), "Clip 1".to_string(), None),
        ];
        let all = store.matches(&MatchFilter::default()).await.unwrap();
        assert_eq!(named(all), expected);
        assert_eq!(named(store.recent_matches(10).await.unwrap()), expected);

        let clip_id = browse(&*store)
            .list_clips(&list(Some("Clip 0"), None, 10))
            .await
            .unwrap()
            .items
            .iter()
            .find(|c| c.clip.title == "Clip 0")
            .unwrap()
            .id;
        let page = browse(&*store)
            .clip_page(clip_id, &list(None, None, 10))
            .await
            .unwrap()
            .unwrap();
        let occurrences: Vec<(&str, Option<&str>)> = page
            .occurrences
            .items
            .iter()
            .map(|o| (o.episode.title.as_str(), o.episode_media_sha256.as_deref()))
            .collect();
        assert_eq!(
            occurrences,
            [("Episode 1", None), ("Episode 0", Some(sha(0xab).as_str()))]
        );

        let episode_id = browse(&*store)
            .list_episodes(&list(Some("Episode 0"), None, 10))
            .await
            .unwrap()
            .items
            .iter()
            .find(|e| e.episode.title == "Episode 0")
            .unwrap()
            .id;
        let page = browse(&*store)
            .episode_page(episode_id, t0())
            .await
            .unwrap()
            .unwrap();
        let timeline: Vec<(&str, Option<&str>)> = page
            .timeline
            .iter()
            .map(|t| (t.clip_title.as_str(), t.episode_media_sha256.as_deref()))
            .collect();
        assert_eq!(
            timeline,
            [
                ("Clip 0", Some(sha(0xab).as_str())),
                ("Clip 1", Some(sha(0xcd).as_str()))
            ]
        );
    }

    /// A result's findability is kept on its clip and shown by the clip listing and page:
    /// absent until a result carries one, "not found even at the loudest level" kept apart
    /// from a level, the batch's last for a clip standing, a later result's replacing it, a
    /// result without one (an outside analyser's) leaving it, and a failure carrying one
    /// keeping it too.
    pub async fn findability_is_kept_on_the_clip(store: Arc<dyn DataStore>) {
        use crate::Findability;
        let (es, cs) = seed(&*store, 3, 3).await;
        let id = Uuid::new_v4();
        let with = |e: usize, c: usize, f: Option<Option<i32>>| ResearchResult {
            clip_findability: f.map(|from_db| Findability { from_db }),
            ..result(id, &es[e], &cs[c], &[1_000])
        };
        let Some(browse) = store.browse() else {
            return;
        };
        let shown = || {
            let browse = store.browse().unwrap();
            async move {
                let mut clips: Vec<(String, Option<Findability>)> = browse
                    .list_clips(&list(None, None, 10))
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|c| (c.clip.title, c.findability))
                    .collect();
                clips.sort_by(|a, b| a.0.cmp(&b.0));
                clips
            }
        };
        let level = |db: Option<i32>| Some(Findability { from_db: db });
        assert!(shown().await.iter().all(|(_, f)| f.is_none()));
        store
            .record_results(&[
                with(0, 0, Some(Some(6))),
                with(1, 0, Some(Some(-6))),
                with(0, 1, Some(None)),
                with(0, 2, None),
            ])
            .await
            .unwrap();
        assert_eq!(
            shown().await,
            [
                ("Clip 0".to_string(), level(Some(-6))),
                ("Clip 1".to_string(), level(None)),
                ("Clip 2".to_string(), None),
            ]
        );
        // A later result replaces it; one without a prediction leaves it; so does a duplicate.
        store
            .record_results(&[with(2, 1, Some(Some(12))), with(1, 2, None)])
            .await
            .unwrap();
        store
            .record_results(&[with(2, 0, None), with(0, 0, None)])
            .await
            .unwrap();
        assert_eq!(
            shown().await,
            [
                ("Clip 0".to_string(), level(Some(-6))),
                ("Clip 1".to_string(), level(Some(12))),
                ("Clip 2".to_string(), None),
            ]
        );
        // A failure that carries one (the clip decoded, the episode did not) keeps it too.
        store
            .record_results(&[ResearchResult {
                clip_findability: level(Some(0)),
                ..failed(id, &es[1], &cs[2], "the episode: not audio")
            }])
            .await
            .unwrap();
        let clips = browse
            .list_clips(&list(Some("Clip 2"), None, 10))
            .await
            .unwrap();
        let clip = clips
            .items
            .iter()
            .find(|c| c.clip.title == "Clip 2")
            .unwrap();
        assert_eq!(clip.findability, level(Some(0)));
        let page = browse
            .clip_page(clip.id, &list(None, None, 10))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(page.summary.findability, level(Some(0)));
        // As the API gives it: an object with the level, null for "not found even at the
        // loudest level tried"; absent before any prediction.
        let json = serde_json::to_value(&page.summary).unwrap();
        assert_eq!(json["findability"], serde_json::json!({ "from_db": 0 }));
        let json = serde_json::to_value(Findability { from_db: None }).unwrap();
        assert_eq!(json, serde_json::json!({ "from_db": null }));
    }

    /// Match scores are kept as given, one per offset (absent when the analyser gave none),
    /// and come back in `matches`, `recent_matches`, the clip page (sorted with their offsets)
    /// and the episode's timeline; a success replacing a failure brings its scores; scores
    /// that are not one per offset are refused.
    pub async fn match_scores_round_trip(store: Arc<dyn DataStore>) {
        let (es, cs) = seed(&*store, 2, 3).await;
        let id = Uuid::new_v4();
        let scored = |e: usize, c: usize, offsets: &[i64], scores: &[f64]| ResearchResult {
            clip_match_scores: Some(scores.to_vec()),
            ..result(id, &es[e], &cs[c], offsets)
        };
        store
            .record_results(&[
                // Recorded out of order: the pages sort the scores with their offsets.
                scored(0, 0, &[9_000_000_000, 2_000_000_000], &[0.25, 1.0]),
                result(id, &es[0], &cs[1], &[5_000_000_000]),
                scored(1, 0, &[], &[]),
                failed(id, &es[1], &cs[1], "gone"),
            ])
            .await
            .unwrap();
        // A success replacing the failure brings its scores.
        store
            .record_results(&[scored(1, 1, &[7], &[0.0])])
            .await
            .unwrap();
        let mut found = store.matches(&MatchFilter::default()).await.unwrap();
        found.sort_by(|a, b| {
            (&a.episode_title, &a.clip_title).cmp(&(&b.episode_title, &b.clip_title))
        });
        let got: Vec<_> = found
            .iter()
            .map(|m| {
                (
                    m.episode_title.as_str(),
                    m.clip_title.as_str(),
                    m.clip_offsets_ns.clone(),
                    m.clip_match_scores.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "Episode 0",
                    "Clip 0",
                    vec![9_000_000_000, 2_000_000_000],
                    Some(vec![0.25, 1.0])
                ),
                ("Episode 0", "Clip 1", vec![5_000_000_000], None),
                ("Episode 1", "Clip 1", vec![7], Some(vec![0.0])),
            ]
        );
        let recent = store.recent_matches(10).await.unwrap();
        assert_eq!(recent.len(), 3);
        for m in &recent {
            let unscored =
                (m.episode_title.as_str(), m.clip_title.as_str()) == ("Episode 0", "Clip 1");
            assert_eq!(m.clip_match_scores.is_none(), unscored, "{m:?}");
        }

        // Scores that are not one per offset are refused.
        let err = store
            .record_results(&[scored(1, 2, &[1, 2], &[0.5])])
            .await
            .unwrap_err();
        assert!(matches!(err, DataStoreError::Invalid(_)), "{err:?}");

        let Some(browse) = store.browse() else {
            return;
        };
        let clips = browse
            .list_clips(&list(Some("Clip 0"), None, 10))
            .await
            .unwrap();
        let clip_id = clips
            .items
            .iter()
            .find(|c| c.clip.title == "Clip 0")
            .unwrap()
            .id;
        let page = browse
            .clip_page(clip_id, &list(None, None, 10))
            .await
            .unwrap()
            .unwrap();
        let occurrences: Vec<_> = page
            .occurrences
            .items
            .iter()
            .map(|o| (o.clip_offsets_ns.clone(), o.clip_match_scores.clone()))
            .collect();
        assert_eq!(
            occurrences,
            [(vec![2_000_000_000, 9_000_000_000], Some(vec![1.0, 0.25]))]
        );
        let episodes = browse
            .list_episodes(&list(Some("Episode 0"), None, 10))
            .await
            .unwrap();
        let episode_id = episodes
            .items
            .iter()
            .find(|e| e.episode.title == "Episode 0")
            .unwrap()
            .id;
        let page = browse
            .episode_page(episode_id, t0())
            .await
            .unwrap()
            .unwrap();
        let timeline: Vec<_> = page
            .timeline
            .iter()
            .map(|t| (t.offset_ns, t.clip_title.as_str(), t.clip_match_score))
            .collect();
        assert_eq!(
            timeline,
            [
                (2_000_000_000, "Clip 0", Some(1.0)),
                (5_000_000_000, "Clip 1", None),
                (9_000_000_000, "Clip 0", Some(0.25)),
            ]
        );
    }

    fn api(store: &dyn DataStore) -> &dyn crate::ApiAccess {
        store
            .api_access()
            .expect("the SQL adapters keep the API's tokens")
    }

    /// Tokens: stored by hash, listed by name without it, found by hash (last use kept to the
    /// minute), a taken name refused, revoked for good.
    pub async fn tokens_are_created_listed_used_and_revoked(store: Arc<dyn DataStore>) {
        use crate::{NewToken, TokenScope};
        let api = api(&*store);
        assert!(api.tokens().await.unwrap().is_empty());
        let new = |name: &str, scope, hash: &str| NewToken {
            name: name.into(),
            scope,
            hash: hash.into(),
            created: t0(),
            max_researchers: 3,
        };
        api.create_token(&new("alice", TokenScope::Curator, "aa"))
            .await
            .unwrap();
        api.create_token(&new("bob", TokenScope::Researcher, "bb"))
            .await
            .unwrap();
        let taken = api
            .create_token(&new("alice", TokenScope::Reader, "cc"))
            .await
            .unwrap_err();
        assert!(
            matches!(taken, crate::DataStoreError::Conflict(_)),
            "{taken:?}"
        );
        let listed = api.tokens().await.unwrap();
        assert!(listed.iter().all(|t| t.max_researchers == 3));
        let names: Vec<_> = listed
            .iter()
            .map(|t| (t.name.as_str(), t.scope, t.created, t.last_used))
            .collect();
        assert_eq!(
            names,
            [
                ("alice", TokenScope::Curator, t0(), None),
                ("bob", TokenScope::Researcher, t0(), None)
            ]
        );

        assert_eq!(api.use_token("zz", t0()).await.unwrap(), None);
        let used = api
            .use_token("bb", t0() + Duration::seconds(5))
            .await
            .unwrap();
        assert_eq!(
            used.map(|t| (t.name, t.scope)),
            Some(("bob".into(), TokenScope::Researcher))
        );
        let bob = |tokens: Vec<crate::TokenInfo>| {
            tokens
                .into_iter()
                .find(|t| t.name == "bob")
                .unwrap()
                .last_used
        };
        assert_eq!(
            bob(api.tokens().await.unwrap()),
            Some(t0() + Duration::seconds(5))
        );
        // Within the minute: not written again.
        api.use_token("bb", t0() + Duration::seconds(30))
            .await
            .unwrap();
        assert_eq!(
            bob(api.tokens().await.unwrap()),
            Some(t0() + Duration::seconds(5))
        );
        api.use_token("bb", t0() + Duration::minutes(2))
            .await
            .unwrap();
        assert_eq!(
            bob(api.tokens().await.unwrap()),
            Some(t0() + Duration::minutes(2))
        );

        assert_eq!(api.revoked_token("bb").await.unwrap(), None);
        assert!(api.revoke_token("bob").await.unwrap());
        assert!(!api.revoke_token("bob").await.unwrap());
        assert_eq!(api.use_token("bb", t0()).await.unwrap(), None);
        // Known as revoked, by name, for the logs; an unknown hash is not.
        assert_eq!(api.revoked_token("bb").await.unwrap(), Some("bob".into()));
        assert_eq!(api.revoked_token("zz").await.unwrap(), None);
        assert_eq!(api.revoked_token("aa").await.unwrap(), None);
        let left: Vec<_> = api
            .tokens()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(left, ["alice"]);
        // The name may be taken again; the revoked token stays refused.
        api.create_token(&new("bob", TokenScope::Reader, "b2"))
            .await
            .unwrap();
        assert_eq!(api.use_token("bb", t0()).await.unwrap(), None);
        assert_eq!(
            api.use_token("b2", t0()).await.unwrap().map(|t| t.scope),
            Some(TokenScope::Reader)
        );
    }

    /// Held items: kept by receipt hash, found by it and by token, dropped, forgotten when old.
    pub async fn held_items_are_kept_by_receipt_and_token(store: Arc<dyn DataStore>) {
        use crate::HeldItem;
        let api = api(&*store);
        let held = |receipt: &str, token: &str, bus: Option<&str>, at| HeldItem {
            receipt_hash: receipt.into(),
            token: token.into(),
            bus_receipt: bus.map(Into::into),
            item: format!("{{\"receipt\":\"{receipt}\"}}"),
            seen_at: at,
        };
        assert_eq!(api.held_item("r1").await.unwrap(), None);
        let r1 = held("r1", "alice", Some("7.abc"), t0());
        let r2 = held("r2", "alice", None, t0() + Duration::seconds(1));
        let r3 = held("r3", "bob", Some("8.def"), t0() + Duration::minutes(5));
        for h in [&r2, &r1, &r3] {
            api.hold_item(h).await.unwrap();
        }
        assert_eq!(api.held_item("r1").await.unwrap(), Some(r1.clone()));
        assert_eq!(api.held_item("r2").await.unwrap(), Some(r2.clone()));
        assert_eq!(
            api.held_by("alice").await.unwrap(),
            [r1.clone(), r2.clone()]
        );
        assert_eq!(api.held_by("carol").await.unwrap(), []);
        // Kept again under the same receipt: replaced.
        let r1b = held("r1", "alice", Some("7.xyz"), t0() + Duration::seconds(2));
        api.hold_item(&r1b).await.unwrap();
        assert_eq!(api.held_item("r1").await.unwrap(), Some(r1b.clone()));
        assert!(api.drop_held("r2").await.unwrap());
        assert!(!api.drop_held("r2").await.unwrap());
        assert_eq!(api.held_by("alice").await.unwrap(), [r1b]);
        assert_eq!(
            api.forget_held(t0() + Duration::minutes(1)).await.unwrap(),
            1
        );
        assert_eq!(api.held_item("r1").await.unwrap(), None);
        assert_eq!(api.held_by("bob").await.unwrap(), [r3]);
    }

    /// Presence: researchers and gateways' receivers seen since a moment, touched again,
    /// left, forgotten when old.
    pub async fn presence_counts_who_was_seen_since(store: Arc<dyn DataStore>) {
        use crate::{Presence, PresenceKind};
        let api = api(&*store);
        assert_eq!(api.presence(t0()).await.unwrap(), Presence::default());
        api.touch_presence("r1", PresenceKind::Researcher, 1, t0())
            .await
            .unwrap();
        api.touch_presence(
            "r2",
            PresenceKind::Researcher,
            1,
            t0() + Duration::seconds(30),
        )
        .await
        .unwrap();
        api.touch_presence("g1", PresenceKind::GatewayReceivers, 2, t0())
            .await
            .unwrap();
        let seen = |researchers, gateway_receivers| Presence {
            researchers,
            gateway_receivers,
        };
        assert_eq!(api.presence(t0()).await.unwrap(), seen(2, 2));
        assert_eq!(
            api.presence(t0() + Duration::seconds(10)).await.unwrap(),
            seen(1, 0)
        );
        // Seen again later; an older touch arriving late does not move it back.
        api.touch_presence(
            "r1",
            PresenceKind::Researcher,
            1,
            t0() + Duration::minutes(1),
        )
        .await
        .unwrap();
        api.touch_presence("r1", PresenceKind::Researcher, 1, t0())
            .await
            .unwrap();
        assert_eq!(
            api.presence(t0() + Duration::seconds(45)).await.unwrap(),
            seen(1, 0)
        );
        api.leave_presence("r1").await.unwrap();
        assert_eq!(api.presence(t0()).await.unwrap(), seen(1, 2));
        assert_eq!(
            api.forget_presence(t0() + Duration::seconds(10))
                .await
                .unwrap(),
            1
        );
        assert_eq!(api.presence(t0()).await.unwrap(), seen(1, 0));
    }
}
