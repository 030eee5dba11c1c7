//! The datastore at the sizes of `shared/SCALE.md`, measured against its targets and against
//! the baseline design SCALE.md describes, side by side in one run.
//!
//! ```text
//! cargo bench -p datastore --bench datastore --all-features -- [small|reference|large]...
//!     [--no-baseline] [--no-sqlite] [--no-postgres] [--sqlite-sync] [--baseline-large] [--keep]
//! ```
//!
//! For each size: a deterministic data set (seeded generator), then on Postgres (ours, in a
//! fresh database), the baseline (one backlog row per pair, its own fresh database) and SQLite
//! (ours, in a temporary file): loading the data set as the ingestion archivists do (batches of
//! 10, episodes and clips at once), the size before any research, `lease_next` of 50 clips with
//! the stated number of active leases (after each timed lease, the oldest lease is completed:
//! its results recorded and it is revoked, untimed, so the count stays and the work frontier
//! moves as in production), ingesting one new clip and one new episode, recording results in
//! batches, and `status`. Prints one Markdown table per size.
//!
//! Postgres: `ARCHIVIST_BENCH_PG_URL`, else `ARCHIVIST_TEST_PG_URL`, else
//! `postgres://postgres@127.0.0.1:5432/test` (an admin URL: databases are created through it
//! and dropped afterwards, unless `--keep`). The baseline at the large size is 100 million
//! backlog rows; it runs only with `--baseline-large`. With `ARCHIVIST_BENCH_LOG_STATEMENTS`
//! set, the server logs every statement of ours with its duration (to see where time goes).
//!
//! `--sqlite-sync` also runs SQLite with no write synced at commit (`synchronous = NORMAL`, as
//! before writes that precede an acknowledgement elsewhere were made durable) and prints what
//! durability costs, side by side. `--no-postgres` leaves Postgres out (and so the baseline).
//!
//! After loading, each Postgres database gets `VACUUM ANALYZE`, as autovacuum would soon do:
//! planner statistics, and the visibility map that index-only scans need.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use datastore::{
    ClipInfo, DataStore, EpisodeInfo, Lease, LeaseRequest, LeaseUpdate, PgDataStore,
    ResearchResult, SqliteDataStore,
};
use sqlx::PgPool;
use uuid::Uuid;

mod common;
use common::*;

/// The benchmark's "now": every lease is taken and judged at it.
fn now() -> DateTime<Utc> {
    ts(2026, 6, 1)
}

fn request() -> LeaseRequest {
    LeaseRequest {
        max_clips: MAX_CLIPS,
        duration: Duration::hours(2),
        now: now(),
        lease_id: uuid::Uuid::new_v4(),
    }
}

// ------------------------------------------------------------------------------ figures

#[derive(Default, Clone)]
struct Figures {
    load_s: Option<f64>,
    size_mb: Option<f64>,
    lease_ms: Option<(f64, f64)>,
    lease_half_done_ms: Option<(f64, f64)>,
    lease_sorting_ms: Option<(f64, f64)>,
    new_clip_ms: Option<(f64, f64)>,
    new_episode_ms: Option<(f64, f64)>,
    record_10_per_s: Option<f64>,
    record_10x4_per_s: Option<f64>,
    record_500_per_s: Option<f64>,
    status_ms: Option<(f64, f64)>,
    clip_list_ms: Option<(f64, f64)>,
    clip_page_ms: Option<(f64, f64)>,
    search_one_ms: Option<(f64, f64)>,
    search_all_ms: Option<(f64, f64)>,
    note: Option<String>,
}

// ------------------------------------------------------------------------------ ours

/// Where the store keeps its bytes, for the size row.
enum Backing {
    Pg(PgPool),
    Sqlite(std::path::PathBuf),
}

impl Backing {
    async fn size_mb(&self) -> f64 {
        match self {
            Backing::Pg(pool) => {
                let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
                    .fetch_one(pool)
                    .await
                    .unwrap();
                bytes as f64 / 1e6
            }
            Backing::Sqlite(path) => {
                let mut bytes = 0;
                for suffix in ["", "-wal", "-shm"] {
                    let p = format!("{}{suffix}", path.display());
                    bytes += std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                }
                bytes as f64 / 1e6
            }
        }
    }

    /// What autovacuum would have done shortly after a bulk load: statistics for the planner,
    /// and the visibility map for index-only scans.
    async fn settle(&self) {
        match self {
            Backing::Pg(pool) => {
                sqlx::query("VACUUM ANALYZE").execute(pool).await.unwrap();
            }
            Backing::Sqlite(_) => {}
        }
    }
}

async fn load(store: &Arc<dyn DataStore>, data: &DataSet) -> f64 {
    let start = Instant::now();
    let episodes = {
        let store = store.clone();
        let items = data.episodes.clone();
        tokio::spawn(async move {
            for chunk in items.chunks(BUS_BATCH) {
                store.upsert_episodes(chunk).await.unwrap();
            }
        })
    };
    let clips = {
        let store = store.clone();
        let items = data.clips.clone();
        tokio::spawn(async move {
            for chunk in items.chunks(BUS_BATCH) {
                store.upsert_clips(chunk).await.unwrap();
            }
        })
    };
    episodes.await.unwrap();
    clips.await.unwrap();
    start.elapsed().as_secs_f64()
}

/// Records `results` in batches of `batch` from `streams` concurrent tasks; results/s.
async fn record_rate(
    store: &Arc<dyn DataStore>,
    results: Vec<ResearchResult>,
    batch: usize,
    streams: usize,
) -> f64 {
    let n = results.len();
    let per_stream = n.div_ceil(streams);
    let start = Instant::now();
    let tasks: Vec<_> = results
        .chunks(per_stream)
        .map(|part| {
            let store = store.clone();
            let part = part.to_vec();
            tokio::spawn(async move {
                for chunk in part.chunks(batch) {
                    store.record_results(chunk).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn lease_results(store: &Arc<dyn DataStore>, pairs: usize) -> Vec<ResearchResult> {
    let mut out = Vec::new();
    while out.len() < pairs {
        let lease = store
            .lease_next(request())
            .await
            .unwrap()
            .expect("free work");
        out.extend(results_for(&lease, now()));
    }
    out.truncate(pairs);
    out
}

async fn measure_ours(
    store: Arc<dyn DataStore>,
    backing: &Backing,
    size: &Size,
    data: &DataSet,
) -> Figures {
    let mut f = Figures::default();
    store.migrate().await.unwrap();
    f.load_s = Some(load(&store, data).await);
    f.size_mb = Some(backing.size_mb().await);
    backing.settle().await;

    // The stated number of active leases.
    let mut active: VecDeque<Lease> = VecDeque::new();
    for _ in 0..size.active_leases {
        active.push_back(
            store
                .lease_next(request())
                .await
                .unwrap()
                .expect("free work"),
        );
    }
    let mut samples = Vec::with_capacity(size.lease_samples);
    for _ in 0..size.lease_samples {
        let start = Instant::now();
        let lease = store
            .lease_next(request())
            .await
            .unwrap()
            .expect("free work");
        samples.push(ms(start.elapsed()));
        active.push_back(lease);
        // Untimed: the oldest work item is done.
        let done = active.pop_front().unwrap();
        store
            .record_results(&results_for(&done, now()))
            .await
            .unwrap();
        store
            .update_lease(done.id, LeaseUpdate::Revoke)
            .await
            .unwrap();
    }
    f.lease_ms = Some(median_p95(samples));

    let status: Vec<f64> = {
        let mut s = Vec::new();
        for _ in 0..SINGLE_SAMPLES {
            let start = Instant::now();
            store.status(now()).await.unwrap();
            s.push(ms(start.elapsed()));
        }
        s
    };
    f.status_ms = Some(median_p95(status));

    let results = lease_results(&store, size.record_results).await;
    f.record_10_per_s = Some(record_rate(&store, results, BUS_BATCH, 1).await);
    let results = lease_results(&store, size.record_results).await;
    f.record_10x4_per_s = Some(record_rate(&store, results, BUS_BATCH, 4).await);
    let results = lease_results(&store, size.record_results).await;
    f.record_500_per_s = Some(record_rate(&store, results, 500, 1).await);

    let mut s = Vec::new();
    for k in 0..SINGLE_SAMPLES {
        let c = new_clip(k);
        let start = Instant::now();
        store.upsert_clip(&c).await.unwrap();
        s.push(ms(start.elapsed()));
    }
    f.new_clip_ms = Some(median_p95(s));
    let mut s = Vec::new();
    for k in 0..SINGLE_SAMPLES {
        let e = new_episode(k);
        let start = Instant::now();
        store.upsert_episode(&e).await.unwrap();
        s.push(ms(start.elapsed()));
    }
    f.new_episode_ms = Some(median_p95(s));

    if let Backing::Pg(pool) = backing {
        // Later in the archive's life: the most urgent half of the episodes fully researched
        // (research goes in urgency order). Counters set directly, without result rows: only
        // the choice of episode depends on them, and that is what this row measures.
        sqlx::query(
            "UPDATE episodes SET researched_count = (SELECT count(*) FROM clips)
             WHERE id IN (SELECT id FROM episodes ORDER BY priority DESC, date_aired DESC,
                          initial_date_curated DESC, id DESC LIMIT $1)",
        )
        .bind(i64::from(size.episodes / 2))
        .execute(pool)
        .await
        .unwrap();
        backing.settle().await;
        let mut s = Vec::new();
        for _ in 0..size.lease_samples.min(100) {
            let start = Instant::now();
            let lease = store
                .lease_next(request())
                .await
                .unwrap()
                .expect("free work");
            s.push(ms(start.elapsed()));
            store
                .update_lease(lease.id, LeaseUpdate::Cancel)
                .await
                .unwrap();
        }
        f.lease_half_done_ms = Some(median_p95(s));
    }
    measure_browse(&store, data, &mut f).await;
    f
}

/// The pages of `serve` (`/clips`, `/clips/{id}`, `/episodes?q=`): matches spread over every
/// clip first (three per episode, recorded through the API), then the clip listing (counts
/// aggregated over the matched results), a clip's page (50 episodes), and a title search that
/// one title matches and one that every title matches (the first page of 50, newest first).
async fn measure_browse(store: &Arc<dyn DataStore>, data: &DataSet, f: &mut Figures) {
    let clips = data.clips.len();
    let matched: Vec<ResearchResult> = data
        .episodes
        .iter()
        .enumerate()
        .flat_map(|(i, e)| {
            (0..3).map(move |k| {
                let c = &data.clips[(i * 7 + k * 331) % clips];
                ResearchResult {
                    lease_id: Uuid::new_v4(),
                    episode: e.key(),
                    clip_title: c.title.clone(),
                    research_date: now(),
                    episode_duration_ns: 3_600_000_000_000,
                    episode_hash: format!("{i:064x}"),
                    clip_duration_ns: 4_000_000_000,
                    clip_hash: format!("{k:064x}"),
                    clip_offsets_ns: vec![60_000_000_000 * (k as i64 + 1)],
                    clip_match_scores: None,
                    failure: None,
                    clip_findability: None,
                }
            })
        })
        .collect();
    for batch in matched.chunks(500) {
        store.record_results(batch).await.unwrap();
    }
    let browse = store.browse().expect("the SQL adapters browse");
    let page = |search: Option<String>| datastore::ListQuery {
        search,
        cursor: None,
        limit: 50,
    };
    let mut s = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..SINGLE_SAMPLES {
        let start = Instant::now();
        let listed = browse.list_clips(&page(None)).await.unwrap();
        s.push(ms(start.elapsed()));
        ids = listed.items.iter().map(|c| c.id).collect();
    }
    f.clip_list_ms = Some(median_p95(s));
    let mut s = Vec::new();
    for k in 0..SINGLE_SAMPLES {
        let id = ids[k % ids.len()];
        let start = Instant::now();
        let p = browse.clip_page(id, &page(None)).await.unwrap().unwrap();
        s.push(ms(start.elapsed()));
        assert!(!p.occurrences.items.is_empty());
    }
    f.clip_page_ms = Some(median_p95(s));
    let mut s = Vec::new();
    for k in 0..SINGLE_SAMPLES {
        let i = (k * 997) % data.episodes.len();
        let start = Instant::now();
        let found = browse
            .list_episodes(&page(Some(format!("{i:05}"))))
            .await
            .unwrap();
        s.push(ms(start.elapsed()));
        assert_eq!(found.items.len(), 1);
    }
    f.search_one_ms = Some(median_p95(s));
    let mut s = Vec::new();
    for _ in 0..SINGLE_SAMPLES {
        let start = Instant::now();
        let found = browse
            .list_episodes(&page(Some("Archive".into())))
            .await
            .unwrap();
        s.push(ms(start.elapsed()));
        assert_eq!(found.items.len(), 50);
    }
    f.search_all_ms = Some(median_p95(s));
}

// ------------------------------------------------------------------------------ baseline

/// SCALE.md's straightforward design: one backlog row per pair, anti-joined against the leases
/// and sorted by episode priority at each selection. Same indexes on episodes and clips as
/// ours, so the difference is the backlog.
const BASELINE_SCHEMA: &str = "
CREATE TABLE episodes (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    title text NOT NULL, date_aired timestamptz NOT NULL,
    initial_date_curated timestamptz NOT NULL, last_date_curated timestamptz NOT NULL,
    curator_information text NOT NULL, description text NOT NULL,
    media_uri text NOT NULL UNIQUE, media_type text NOT NULL, priority int NOT NULL,
    UNIQUE (title, date_aired));
CREATE INDEX episodes_urgency
    ON episodes (priority DESC, date_aired DESC, initial_date_curated DESC, id DESC);
CREATE TABLE clips (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    title text NOT NULL UNIQUE,
    initial_date_curated timestamptz NOT NULL, last_date_curated timestamptz NOT NULL,
    curator_information text NOT NULL, description text NOT NULL,
    media_uri text NOT NULL UNIQUE, media_type text NOT NULL, priority int NOT NULL);
CREATE INDEX clips_urgency ON clips (priority DESC, initial_date_curated DESC, id DESC);
CREATE TABLE backlog (
    episode_id bigint NOT NULL REFERENCES episodes (id),
    clip_id bigint NOT NULL REFERENCES clips (id),
    PRIMARY KEY (episode_id, clip_id));
CREATE TABLE leases (
    id uuid PRIMARY KEY, episode_id bigint NOT NULL,
    created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL);
CREATE TABLE leased_pairs (
    lease_id uuid NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
    episode_id bigint NOT NULL, clip_id bigint NOT NULL,
    PRIMARY KEY (episode_id, clip_id, lease_id));
CREATE INDEX leased_pairs_lease ON leased_pairs (lease_id);
CREATE TABLE research_results (
    episode_id bigint NOT NULL, clip_id bigint NOT NULL, lease_id uuid NOT NULL,
    research_date timestamptz NOT NULL, episode_duration_ns bigint NOT NULL,
    episode_hash text NOT NULL, clip_duration_ns bigint NOT NULL, clip_hash text NOT NULL,
    clip_offsets_ns bigint[] NOT NULL, matched boolean NOT NULL,
    PRIMARY KEY (episode_id, clip_id));
";

const B_UPSERT_EPISODES: &str = "
WITH up AS (
    INSERT INTO episodes (title, date_aired, initial_date_curated, last_date_curated,
                          curator_information, description, media_uri, media_type, priority)
    SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[],
                         $5::text[], $6::text[], $7::text[], $8::text[], $9::int4[])
    ON CONFLICT (title, date_aired) DO UPDATE SET last_date_curated = EXCLUDED.last_date_curated
    RETURNING id, (xmax = 0) AS inserted)
INSERT INTO backlog (episode_id, clip_id)
SELECT up.id, c.id FROM up CROSS JOIN clips c WHERE up.inserted ON CONFLICT DO NOTHING";

const B_UPSERT_CLIPS: &str = "
WITH up AS (
    INSERT INTO clips (title, initial_date_curated, last_date_curated, curator_information,
                       description, media_uri, media_type, priority)
    SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[],
                         $5::text[], $6::text[], $7::text[], $8::int4[])
    ON CONFLICT (title) DO UPDATE SET last_date_curated = EXCLUDED.last_date_curated
    RETURNING id, (xmax = 0) AS inserted)
INSERT INTO backlog (episode_id, clip_id)
SELECT e.id, up.id FROM up CROSS JOIN episodes e WHERE up.inserted ON CONFLICT DO NOTHING";

const B_CHOOSE: &str = "
SELECT b.episode_id FROM backlog b JOIN episodes e ON e.id = b.episode_id
WHERE NOT EXISTS (SELECT 1 FROM leased_pairs lp JOIN leases l ON l.id = lp.lease_id
                  WHERE lp.episode_id = b.episode_id AND lp.clip_id = b.clip_id
                    AND l.expires_at > $1)
ORDER BY e.priority DESC, e.date_aired DESC, e.initial_date_curated DESC, e.id DESC
LIMIT 1";

const B_CLIPS: &str = "
SELECT b.clip_id FROM backlog b JOIN clips c ON c.id = b.clip_id
WHERE b.episode_id = $1
  AND NOT EXISTS (SELECT 1 FROM leased_pairs lp JOIN leases l ON l.id = lp.lease_id
                  WHERE lp.episode_id = b.episode_id AND lp.clip_id = b.clip_id
                    AND l.expires_at > $2)
ORDER BY c.priority DESC, c.initial_date_curated DESC, c.id DESC
LIMIT $3";

struct Baseline {
    pool: PgPool,
}

impl Baseline {
    async fn upsert_episodes(&self, batch: &[EpisodeInfo]) {
        sqlx::query(B_UPSERT_EPISODES)
            .bind(batch.iter().map(|e| e.title.clone()).collect::<Vec<_>>())
            .bind(batch.iter().map(|e| e.date_aired).collect::<Vec<_>>())
            .bind(
                batch
                    .iter()
                    .map(|e| e.initial_date_curated)
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|e| e.last_date_curated)
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|e| e.curator_information.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|e| e.description.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|e| e.media_uri.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|e| e.media_type.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(batch.iter().map(|e| e.priority).collect::<Vec<_>>())
            .execute(&self.pool)
            .await
            .unwrap();
    }

    async fn upsert_clips(&self, batch: &[ClipInfo]) {
        sqlx::query(B_UPSERT_CLIPS)
            .bind(batch.iter().map(|c| c.title.clone()).collect::<Vec<_>>())
            .bind(
                batch
                    .iter()
                    .map(|c| c.initial_date_curated)
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| c.last_date_curated)
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| c.curator_information.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| c.description.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| c.media_uri.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| c.media_type.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(batch.iter().map(|c| c.priority).collect::<Vec<_>>())
            .execute(&self.pool)
            .await
            .unwrap();
    }

    /// Select and lease in one transaction, serialised like ours. Returns (lease, pairs).
    async fn lease_next(&self) -> Option<(Uuid, i64, Vec<i64>)> {
        let mut tx = self.pool.begin().await.unwrap();
        sqlx::query("SELECT pg_advisory_xact_lock(42)")
            .execute(&mut *tx)
            .await
            .unwrap();
        let episode: Option<i64> = sqlx::query_scalar(B_CHOOSE)
            .bind(now())
            .fetch_optional(&mut *tx)
            .await
            .unwrap();
        let episode = episode?;
        let clips: Vec<i64> = sqlx::query_scalar(B_CLIPS)
            .bind(episode)
            .bind(now())
            .bind(i64::from(MAX_CLIPS))
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        let id = Uuid::new_v4();
        sqlx::query(
            "DELETE FROM leased_pairs lp USING leases l WHERE lp.lease_id = l.id
             AND lp.episode_id = $1 AND lp.clip_id = ANY($2) AND l.expires_at <= $3",
        )
        .bind(episode)
        .bind(&clips)
        .bind(now())
        .execute(&mut *tx)
        .await
        .unwrap();
        sqlx::query("INSERT INTO leases VALUES ($1, $2, $3, $4)")
            .bind(id)
            .bind(episode)
            .bind(now())
            .bind(now() + Duration::hours(2))
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO leased_pairs (lease_id, episode_id, clip_id)
             SELECT $1, $2, unnest($3::int8[])",
        )
        .bind(id)
        .bind(episode)
        .bind(&clips)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        Some((id, episode, clips))
    }

    /// Records results by ids (the resolution of titles is the same in both designs) and
    /// removes the pairs from the backlog.
    async fn record(&self, lease: Uuid, episode: i64, clips: &[i64]) {
        let mut tx = self.pool.begin().await.unwrap();
        sqlx::query(
            "WITH ins AS (
                INSERT INTO research_results
                SELECT $2, c, $1, $3, 3600000000000, 'h', 4000000000, 'h', '{}', false
                FROM unnest($4::int8[]) AS c
                ON CONFLICT DO NOTHING RETURNING episode_id, clip_id)
             DELETE FROM backlog b USING ins
             WHERE b.episode_id = ins.episode_id AND b.clip_id = ins.clip_id",
        )
        .bind(lease)
        .bind(episode)
        .bind(now())
        .bind(clips)
        .execute(&mut *tx)
        .await
        .unwrap();
        sqlx::query("DELETE FROM leased_pairs WHERE episode_id = $1 AND clip_id = ANY($2)")
            .bind(episode)
            .bind(clips)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }

    async fn revoke(&self, lease: Uuid) {
        sqlx::query("DELETE FROM leases WHERE id = $1")
            .bind(lease)
            .execute(&self.pool)
            .await
            .unwrap();
    }

    async fn status(&self) {
        let _: (i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM episodes), (SELECT count(*) FROM clips),
                    (SELECT count(*) FROM backlog), (SELECT count(*) FROM research_results),
                    (SELECT count(*) FROM leases WHERE expires_at > $1)",
        )
        .bind(now())
        .fetch_one(&self.pool)
        .await
        .unwrap();
    }
}

async fn measure_baseline(pool: PgPool, size: &Size, data: &DataSet) -> Figures {
    let mut f = Figures::default();
    sqlx::raw_sql(BASELINE_SCHEMA).execute(&pool).await.unwrap();
    let b = Arc::new(Baseline { pool: pool.clone() });

    let start = Instant::now();
    let episodes = {
        let b = b.clone();
        let items = data.episodes.clone();
        tokio::spawn(async move {
            for chunk in items.chunks(BUS_BATCH) {
                b.upsert_episodes(chunk).await;
            }
        })
    };
    let clips = {
        let b = b.clone();
        let items = data.clips.clone();
        tokio::spawn(async move {
            for chunk in items.chunks(BUS_BATCH) {
                b.upsert_clips(chunk).await;
            }
        })
    };
    episodes.await.unwrap();
    clips.await.unwrap();
    f.load_s = Some(start.elapsed().as_secs_f64());
    let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&pool)
        .await
        .unwrap();
    f.size_mb = Some(bytes as f64 / 1e6);
    sqlx::query("VACUUM ANALYZE").execute(&pool).await.unwrap();
    // A pair lost when episodes and clips raced (neither saw the other's row) is added now,
    // untimed, so the backlog is complete.
    sqlx::query(
        "INSERT INTO backlog SELECT e.id, c.id FROM episodes e CROSS JOIN clips c
         ON CONFLICT DO NOTHING",
    )
    .execute(&pool)
    .await
    .unwrap();

    // The active leases: set up directly (the same pairs ours leases first), untimed.
    let mut active: VecDeque<(Uuid, i64, Vec<i64>)> = VecDeque::new();
    {
        let mut eps: Vec<&EpisodeInfo> = data.episodes.iter().collect();
        eps.sort_by(|a, b| {
            (b.priority, b.date_aired, b.initial_date_curated).cmp(&(
                a.priority,
                a.date_aired,
                a.initial_date_curated,
            ))
        });
        let clip_ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM clips ORDER BY priority DESC, initial_date_curated DESC, id DESC",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        'outer: for e in eps {
            let eid: i64 = sqlx::query_scalar("SELECT id FROM episodes WHERE title = $1")
                .bind(&e.title)
                .fetch_one(&pool)
                .await
                .unwrap();
            for chunk in clip_ids.chunks(MAX_CLIPS as usize) {
                if active.len() >= size.active_leases as usize {
                    break 'outer;
                }
                let id = Uuid::new_v4();
                sqlx::query("INSERT INTO leases VALUES ($1, $2, $3, $4)")
                    .bind(id)
                    .bind(eid)
                    .bind(now())
                    .bind(now() + Duration::hours(2))
                    .execute(&pool)
                    .await
                    .unwrap();
                sqlx::query("INSERT INTO leased_pairs SELECT $1, $2, unnest($3::int8[])")
                    .bind(id)
                    .bind(eid)
                    .bind(chunk)
                    .execute(&pool)
                    .await
                    .unwrap();
                active.push_back((id, eid, chunk.to_vec()));
            }
        }
    }
    let mut samples = Vec::new();
    for _ in 0..size.baseline_lease_samples {
        let start = Instant::now();
        let lease = b.lease_next().await.expect("free work");
        samples.push(ms(start.elapsed()));
        active.push_back(lease);
        let (id, e, clips) = active.pop_front().unwrap();
        b.record(id, e, &clips).await;
        b.revoke(id).await;
    }
    f.lease_ms = Some(median_p95(samples));

    // SCALE.md's literal wording: the backlog sorted by episode priority at each selection,
    // with no index that already has that order. A few samples: each sorts every pair.
    sqlx::query("DROP INDEX episodes_urgency")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE episodes")
        .execute(&pool)
        .await
        .unwrap();
    let mut s = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let lease = b.lease_next().await.expect("free work");
        s.push(ms(start.elapsed()));
        b.revoke(lease.0).await;
    }
    f.lease_sorting_ms = Some(median_p95(s));
    sqlx::query(
        "CREATE INDEX episodes_urgency
         ON episodes (priority DESC, date_aired DESC, initial_date_curated DESC, id DESC)",
    )
    .execute(&pool)
    .await
    .unwrap();

    let mut s = Vec::new();
    for _ in 0..SINGLE_SAMPLES {
        let start = Instant::now();
        b.status().await;
        s.push(ms(start.elapsed()));
    }
    f.status_ms = Some(median_p95(s));

    // Recording: results for pairs leased up front (by ids; untimed leasing would take
    // minutes at the baseline's selection speed, so the pairs are taken straight from the
    // backlog), recorded in batches of 10.
    let pairs: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT episode_id, clip_id FROM backlog ORDER BY episode_id DESC, clip_id LIMIT $1",
    )
    .bind(size.record_results as i64)
    .fetch_all(&pool)
    .await
    .unwrap();
    let start = Instant::now();
    let mut n = 0;
    for chunk in pairs.chunks(BUS_BATCH) {
        // A batch of the bus can span episodes; record per episode within it.
        let mut i = 0;
        while i < chunk.len() {
            let e = chunk[i].0;
            let clips: Vec<i64> = chunk[i..]
                .iter()
                .take_while(|p| p.0 == e)
                .map(|p| p.1)
                .collect();
            i += clips.len();
            b.record(Uuid::new_v4(), e, &clips).await;
            n += clips.len();
        }
    }
    f.record_10_per_s = Some(n as f64 / start.elapsed().as_secs_f64());

    let mut s = Vec::new();
    for k in 0..SINGLE_SAMPLES {
        let c = new_clip(k);
        let start = Instant::now();
        b.upsert_clips(std::slice::from_ref(&c)).await;
        s.push(ms(start.elapsed()));
    }
    f.new_clip_ms = Some(median_p95(s));
    let mut s = Vec::new();
    for k in 0..SINGLE_SAMPLES {
        let e = new_episode(k);
        let start = Instant::now();
        b.upsert_episodes(std::slice::from_ref(&e)).await;
        s.push(ms(start.elapsed()));
    }
    f.new_episode_ms = Some(median_p95(s));
    f
}

// ------------------------------------------------------------------------------ report

fn fmt_pair(v: Option<(f64, f64)>) -> String {
    v.map(|(m, p)| format!("{m:.2} / {p:.2}"))
        .unwrap_or_else(|| "—".into())
}

fn fmt_one(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "—".into())
}

fn ratio(ours: Option<f64>, base: Option<f64>) -> String {
    match (ours, base) {
        (Some(o), Some(b)) if b > 0.0 => {
            let r = o / b;
            if r >= 0.1 {
                format!("{r:.2}")
            } else {
                format!("{r:.4}")
            }
        }
        _ => "—".into(),
    }
}

fn verdict(value: Option<f64>, target: Option<f64>, higher_is_better: bool) -> &'static str {
    match (value, target) {
        (Some(v), Some(t)) => {
            if (higher_is_better && v > t) || (!higher_is_better && v < t) {
                " ✅"
            } else {
                " ❌"
            }
        }
        _ => "",
    }
}

/// A figure of [`Figures`] with its label: a (median, p95) time, or a single value.
type PairRow = (&'static str, fn(&Figures) -> Option<(f64, f64)>);
type ValueRow = (&'static str, fn(&Figures) -> Option<f64>);

/// What durable commits cost SQLite: the same operations synced at commit (ours) and not.
fn sync_report(size: &Size, full: &Figures, normal: &Figures) -> String {
    let mut out = format!(
        "\n#### {}: SQLite, writes synced at commit (FULL, ours) and not (NORMAL)\n\n\
         | operation | FULL | NORMAL | FULL / NORMAL |\n| --- | --- | --- | --- |\n",
        size.name
    );
    let med = |v: Option<(f64, f64)>| v.map(|p| p.0);
    let pairs: [PairRow; 4] = [
        ("lease next work item, median / p95 ms", |f| f.lease_ms),
        ("ingest one new clip, median / p95 ms", |f| f.new_clip_ms),
        ("ingest one new episode, median / p95 ms", |f| {
            f.new_episode_ms
        }),
        ("status, median / p95 ms", |f| f.status_ms),
    ];
    for (label, get) in pairs {
        out.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            fmt_pair(get(full)),
            fmt_pair(get(normal)),
            ratio(med(get(full)), med(get(normal))),
        ));
    }
    let rates: [ValueRow; 4] = [
        ("load the data set, s", |f| f.load_s),
        ("record results, batches of 10, one archivist, /s", |f| {
            f.record_10_per_s
        }),
        ("record results, batches of 10, four archivists, /s", |f| {
            f.record_10x4_per_s
        }),
        ("record results, batches of 500, /s", |f| f.record_500_per_s),
    ];
    for (label, get) in rates {
        let show = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "—".into());
        out.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            show(get(full)),
            show(get(normal)),
            ratio(get(full), get(normal)),
        ));
    }
    out
}

fn report(size: &Size, pg: &Figures, base: Option<&Figures>, lite: Option<&Figures>) -> String {
    let t = targets(size);
    let none = Figures::default();
    let base = base.unwrap_or(&none);
    let lite = lite.unwrap_or(&none);
    let mut out = String::new();
    out.push_str(&format!(
        "\n### {} — {} episodes × {} clips = {} pairs, {} active leases\n\n",
        size.name,
        size.episodes,
        size.clips,
        u64::from(size.episodes) * u64::from(size.clips),
        size.active_leases
    ));
    out.push_str("| operation | target | Postgres (ours) | Postgres baseline | ours / baseline | SQLite (ours) |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- |\n");
    let tgt = |x: Option<f64>, unit: &str, lt: bool| {
        x.map(|v| format!("{} {v} {unit}", if lt { "<" } else { ">" }))
            .unwrap_or_else(|| "—".into())
    };
    let med = |v: Option<(f64, f64)>| v.map(|p| p.0);
    let mut row_pair = |label: String,
                        target: Option<f64>,
                        unit: &str,
                        get: fn(&Figures) -> Option<(f64, f64)>| {
        out.push_str(&format!(
            "| {label} | {} | {}{} | {} | {} | {} |\n",
            tgt(target, unit, true),
            fmt_pair(get(pg)),
            verdict(med(get(pg)), target, false),
            fmt_pair(get(base)),
            ratio(med(get(pg)), med(get(base))),
            fmt_pair(get(lite)),
        ));
    };
    row_pair(
        format!("lease next work item ({MAX_CLIPS} clips), median / p95 ms"),
        t.as_ref().map(|t| t.lease_ms),
        "ms",
        |f| f.lease_ms,
    );
    row_pair(
        "lease next work item, half the episodes fully researched (Postgres: counters \
         set directly), median / p95 ms"
            .into(),
        t.as_ref().map(|t| t.lease_ms),
        "ms",
        |f| f.lease_half_done_ms,
    );
    row_pair(
        "lease next work item, baseline without an urgency index (sorts the backlog at each \
         selection, as SCALE.md describes), median / p95 ms"
            .into(),
        t.as_ref().map(|t| t.lease_ms),
        "ms",
        // Ours has no such variant: its own lease figure stands against it.
        |f| {
            f.lease_sorting_ms
                .or(f.lease_ms.filter(|_| f.lease_half_done_ms.is_some()))
        },
    );
    row_pair(
        "ingest one new clip, median / p95 ms".into(),
        t.as_ref().map(|t| t.new_clip_ms),
        "ms",
        |f| f.new_clip_ms,
    );
    row_pair(
        "ingest one new episode, median / p95 ms".into(),
        t.as_ref().map(|t| t.new_episode_ms),
        "ms",
        |f| f.new_episode_ms,
    );
    row_pair(
        "`status`, median / p95 ms".into(),
        t.as_ref().map(|t| t.status_ms),
        "ms",
        |f| f.status_ms,
    );
    // Not in SCALE.md: the pages' own target, well inside the status page's 5 s per read.
    let page_target = t.as_ref().map(|_| 50.0);
    row_pair(
        "`/clips`: clips by occurrences (3 matches per episode), first 50, median / p95 ms".into(),
        page_target,
        "ms",
        |f| f.clip_list_ms,
    );
    row_pair(
        "`/clips/{id}`: a clip's page, 50 episodes, median / p95 ms".into(),
        page_target,
        "ms",
        |f| f.clip_page_ms,
    );
    row_pair(
        "`/episodes?q=`: a word one title has, median / p95 ms".into(),
        page_target,
        "ms",
        |f| f.search_one_ms,
    );
    row_pair(
        "`/episodes?q=`: a word every title has, first 50, median / p95 ms".into(),
        page_target,
        "ms",
        |f| f.search_all_ms,
    );
    let mut row_one = |label: &str,
                       target: Option<f64>,
                       unit: &str,
                       lt: bool,
                       digits: usize,
                       get: fn(&Figures) -> Option<f64>| {
        out.push_str(&format!(
            "| {label} | {} | {}{} | {} | {} | {} |\n",
            tgt(target, unit, lt),
            fmt_one(get(pg), digits),
            verdict(get(pg), target, !lt),
            fmt_one(get(base), digits),
            ratio(get(pg), get(base)),
            fmt_one(get(lite), digits),
        ));
    };
    row_one(
        "load the whole data set into an empty store (batches of 10), s",
        t.as_ref().map(|t| t.load_s),
        "s",
        true,
        2,
        |f| f.load_s,
    );
    row_one(
        "datastore size before any research, MB",
        t.as_ref().map(|t| t.size_mb),
        "MB",
        true,
        1,
        |f| f.size_mb,
    );
    row_one(
        "record results, batches of 10, one archivist, results/s",
        t.as_ref().map(|t| t.record_per_s),
        "/s",
        false,
        0,
        |f| f.record_10_per_s,
    );
    row_one(
        "record results, batches of 10, four archivists, results/s",
        t.as_ref().map(|t| t.record_per_s),
        "/s",
        false,
        0,
        |f| f.record_10x4_per_s,
    );
    row_one(
        "record results, batches of 500, one archivist, results/s",
        t.as_ref().map(|t| t.record_per_s),
        "/s",
        false,
        0,
        |f| f.record_500_per_s,
    );
    for note in [&pg.note, &base.note, &lite.note].into_iter().flatten() {
        out.push_str(&format!("\n{note}\n"));
    }
    out
}

// ------------------------------------------------------------------------------ main

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let mut sizes: Vec<Size> = SIZES
        .iter()
        .filter(|s| args.iter().any(|a| a == s.name))
        .copied()
        .collect();
    if sizes.is_empty() {
        sizes.push(SIZES[1]);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tables = String::new();
        for size in &sizes {
            eprintln!("== {}: generating", size.name);
            let data = generate(size);

            let pg = if flag("--no-postgres") {
                Figures::default()
            } else {
                eprintln!("== {}: Postgres (ours)", size.name);
                let (db, options) =
                    BenchDb::create(&format!("ours_{}", size.name), flag("--keep")).await;
                let store = PgDataStore::connect_with(options, pool_options())
                    .await
                    .unwrap();
                let backing = Backing::Pg(store.pool().clone());
                let pg = measure_ours(Arc::new(store), &backing, size, &data).await;
                drop(backing);
                db.drop_now().await;
                pg
            };

            let base = if flag("--no-baseline") || flag("--no-postgres") {
                None
            } else if size.name == "large" && !flag("--baseline-large") {
                Some(Figures {
                    note: Some(
                        "Baseline not run at the large size: it is 100 million backlog rows \
                         (several GB and far longer to load than this benchmark should take on \
                         a two-core machine); `--baseline-large` runs it."
                            .into(),
                    ),
                    ..Figures::default()
                })
            } else {
                eprintln!("== {}: Postgres baseline", size.name);
                let (db, options) =
                    BenchDb::create(&format!("baseline_{}", size.name), flag("--keep")).await;
                let pool = pool_options().connect_with(options).await.unwrap();
                let f = measure_baseline(pool.clone(), size, &data).await;
                pool.close().await;
                db.drop_now().await;
                Some(f)
            };

            let lite = if flag("--no-sqlite") {
                None
            } else {
                eprintln!("== {}: SQLite (ours)", size.name);
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("bench.db");
                let url = format!("sqlite://{}", path.display());
                let store = SqliteDataStore::connect(&url).await.unwrap();
                let f = measure_ours(Arc::new(store), &Backing::Sqlite(path.clone()), size, &data)
                    .await;
                assert!(Path::new(&path).exists());
                Some(f)
            };
            let table = report(size, &pg, base.as_ref(), lite.as_ref());
            println!("{table}");
            tables.push_str(&table);
            if let (true, Some(lite)) = (flag("--sqlite-sync"), lite.as_ref()) {
                eprintln!("== {}: SQLite, no write synced", size.name);
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("bench.db");
                let url = format!("sqlite://{}", path.display());
                let store = SqliteDataStore::connect_without_sync(&url).await.unwrap();
                let normal =
                    measure_ours(Arc::new(store), &Backing::Sqlite(path.clone()), size, &data)
                        .await;
                let table = sync_report(size, lite, &normal);
                println!("{table}");
                tables.push_str(&table);
            }
        }
        println!("\n---- all sizes ----\n{tables}");
    });
}
