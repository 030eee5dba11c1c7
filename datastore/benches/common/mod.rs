//! What the datastore benchmarks share: SCALE.md's sizes and targets, the seeded data set,
//! the statistics, and the throwaway databases they run in.
#![allow(dead_code)] // each benchmark uses its own part of this

pub(crate) mod cpu;
pub(crate) mod quiet;

use std::str::FromStr;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, TimeZone, Utc};
use datastore::{ClipInfo, EpisodeInfo, Lease, PgDataStore, ResearchResult};
use rand::{Rng, SeedableRng};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

// ------------------------------------------------------------------------------ sizes, targets

#[derive(Clone, Copy)]
pub(crate) struct Size {
    pub(crate) name: &'static str,
    pub(crate) episodes: u32,
    pub(crate) clips: u32,
    pub(crate) active_leases: u32,
    pub(crate) lease_samples: usize,
    pub(crate) baseline_lease_samples: usize,
    pub(crate) record_results: usize,
}

pub(crate) const SIZES: [Size; 3] = [
    Size {
        name: "small",
        episodes: 200,
        clips: 40,
        active_leases: 5,
        lease_samples: 50,
        baseline_lease_samples: 20,
        record_results: 1_000,
    },
    Size {
        name: "reference",
        episodes: 4_000,
        clips: 1_000,
        active_leases: 50,
        lease_samples: 200,
        baseline_lease_samples: 10,
        record_results: 5_000,
    },
    Size {
        name: "large",
        episodes: 20_000,
        clips: 5_000,
        active_leases: 500,
        lease_samples: 200,
        baseline_lease_samples: 5,
        record_results: 5_000,
    },
];

pub(crate) const MAX_CLIPS: u32 = 50;
/// The bus hands the archivists up to 10 messages at a time.
pub(crate) const BUS_BATCH: usize = 10;
pub(crate) const SINGLE_SAMPLES: usize = 30;

/// SCALE.md's targets: (reference, large). `None`: not stated.
pub(crate) struct Targets {
    pub(crate) lease_ms: f64,
    pub(crate) new_clip_ms: f64,
    pub(crate) new_episode_ms: f64,
    pub(crate) load_s: f64,
    pub(crate) size_mb: f64,
    pub(crate) record_per_s: f64,
    pub(crate) status_ms: f64,
}

pub(crate) fn targets(size: &Size) -> Option<Targets> {
    match size.name {
        "reference" => Some(Targets {
            lease_ms: 5.0,
            new_clip_ms: 10.0,
            new_episode_ms: 10.0,
            load_s: 2.0,
            size_mb: 50.0,
            record_per_s: 10_000.0,
            status_ms: 100.0,
        }),
        "large" => Some(Targets {
            lease_ms: 10.0,
            new_clip_ms: 20.0,
            new_episode_ms: 10.0,
            load_s: 10.0,
            size_mb: 250.0,
            record_per_s: 10_000.0,
            status_ms: 500.0,
        }),
        _ => None,
    }
}

// ------------------------------------------------------------------------------ data set

pub(crate) struct DataSet {
    pub(crate) episodes: Vec<EpisodeInfo>,
    pub(crate) clips: Vec<ClipInfo>,
}

pub(crate) fn ts(y: i32, m: u32, d: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, m, d, 0, 0, 0).unwrap()
}

/// The same data for the same size, every run: seeded, no clock.
pub(crate) fn generate(size: &Size) -> DataSet {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5ca1e);
    let first_aired = ts(1990, 1, 1);
    let episodes = (0..size.episodes)
        .map(|i| {
            let aired = first_aired + Duration::days(i64::from(i));
            let curated = aired + Duration::hours(rng.gen_range(1..48));
            EpisodeInfo {
                initial_date_curated: curated,
                last_date_curated: curated + Duration::days(rng.gen_range(0..30)),
                curator_information: "tbtl.net archive crawl".into(),
                date_aired: aired,
                title: format!("Episode {i:05}: notes from the archive"),
                description: format!(
                    "Episode {i} of the daily show. Guests, segments and listener mail; \
                     transcript pending. Tags: {}, {}.",
                    rng.gen_range(0..1000),
                    rng.gen_range(0..1000)
                ),
                media_uri: format!("https://media.example.invalid/episodes/{i:05}.mp3"),
                media_type: "mp3".into(),
                // Mostly 0; a few urgent ones.
                priority: if rng.gen_bool(0.05) {
                    rng.gen_range(1..5)
                } else {
                    0
                },
            }
        })
        .collect();
    let first_curated = ts(2020, 1, 1);
    let clips = (0..size.clips)
        .map(|i| {
            let curated = first_curated + Duration::minutes(i64::from(i) * 37);
            ClipInfo {
                initial_date_curated: curated,
                last_date_curated: curated,
                curator_information: "listener submission".into(),
                title: format!("Clip {i:05}: a recurring bit"),
                description: format!("A catchphrase or jingle, about {} seconds.", 2 + i % 9),
                media_uri: format!("https://media.example.invalid/clips/{i:05}.mp3"),
                media_type: "mp3".into(),
                priority: if rng.gen_bool(0.1) {
                    rng.gen_range(1..3)
                } else {
                    0
                },
            }
        })
        .collect();
    DataSet { episodes, clips }
}

pub(crate) fn new_clip(k: usize) -> ClipInfo {
    let curated = ts(2030, 1, 1) + Duration::minutes(k as i64);
    ClipInfo {
        initial_date_curated: curated,
        last_date_curated: curated,
        curator_information: "bench".into(),
        title: format!("New clip {k}"),
        description: "Ingested during the benchmark.".into(),
        media_uri: format!("https://media.example.invalid/new-clips/{k}.mp3"),
        media_type: "mp3".into(),
        priority: 0,
    }
}

pub(crate) fn new_episode(k: usize) -> EpisodeInfo {
    let aired = ts(2100, 1, 1) + Duration::days(k as i64);
    EpisodeInfo {
        initial_date_curated: aired,
        last_date_curated: aired,
        curator_information: "bench".into(),
        date_aired: aired,
        title: format!("New episode {k}"),
        description: "Ingested during the benchmark.".into(),
        media_uri: format!("https://media.example.invalid/new-episodes/{k}.mp3"),
        media_type: "mp3".into(),
        priority: 0,
    }
}

pub(crate) fn results_for(lease: &Lease, research_date: DateTime<Utc>) -> Vec<ResearchResult> {
    lease
        .clips
        .iter()
        .enumerate()
        .map(|(i, c)| ResearchResult {
            lease_id: lease.id,
            episode: lease.episode.key(),
            clip_title: c.title.clone(),
            research_date,
            episode_duration_ns: 3_600_000_000_000,
            episode_hash: format!("{:064x}", i + 1),
            clip_duration_ns: 4_000_000_000,
            clip_hash: format!("{:064x}", i + 7),
            // About one pair in ten is a match.
            clip_offsets_ns: if i % 10 == 3 {
                vec![120_000_000_000, 2_400_000_000_000]
            } else {
                vec![]
            },
            // Scored, as the reference analyser's matches are.
            clip_match_scores: (i % 10 == 3).then(|| vec![0.97, 0.81]),
            failure: None,
            clip_findability: None,
        })
        .collect()
}

pub(crate) fn ms(d: StdDuration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// (median, p95) in milliseconds.
pub(crate) fn median_p95(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.95))
}

// ------------------------------------------------------------------------------ databases

pub(crate) fn admin_url() -> String {
    std::env::var("ARCHIVIST_BENCH_PG_URL")
        .or_else(|_| std::env::var("ARCHIVIST_TEST_PG_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub(crate) struct BenchDb {
    pub(crate) name: String,
    pub(crate) keep: bool,
}

impl BenchDb {
    pub(crate) async fn create(prefix: &str, keep: bool) -> (Self, PgConnectOptions) {
        let admin = admin_url();
        let name = format!(
            "archivist_bench_{prefix}_{}",
            &Uuid::new_v4().simple().to_string()[..12]
        );
        let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
            panic!(
                "cannot reach Postgres at {} ({e}); set ARCHIVIST_BENCH_PG_URL",
                datastore::redact_url(&admin)
            )
        });
        // An identifier cannot be a bind parameter; the name is ours: [a-z0-9_] only.
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        let mut options = PgConnectOptions::from_str(&admin).unwrap().database(&name);
        if std::env::var_os("ARCHIVIST_BENCH_LOG_STATEMENTS").is_some() {
            // Every statement's duration in the server log, to see where time goes.
            options = options.options([("log_min_duration_statement", "0")]);
        }
        (Self { name, keep }, options)
    }

    pub(crate) async fn drop_now(self) {
        if self.keep {
            eprintln!("kept database {}", self.name);
            return;
        }
        let mut conn = PgConnection::connect(&admin_url()).await.unwrap();
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
}

pub(crate) fn pool_options() -> PgPoolOptions {
    PgDataStore::pool_options()
        .max_connections(8)
        .acquire_timeout(StdDuration::from_secs(120))
}
