//! End-to-end tests of `archivist demo` and of what it leaves behind (`status`, `matches`,
//! `migrate` on a used datastore), on SQLite and on a fresh Postgres database.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{archivist, PgDatabase};

/// The demo's data set: a year of weekday episodes and 32 clips.
const EPISODES: u64 = 261;
const CLIPS: u64 = 32;

/// Runs the demo on `url` (and on the database bus there when `bus` names it, else the
/// in-memory bus) and checks everything the datastore then answers.
fn demo_then_inspect(dir: &Path, url: &str, json_summary: bool, bus: Option<&str>) {
    let mut vars = vec![("DATABASE_URL", url)];
    if let Some(bus) = bus {
        vars.push(("ARCHIVIST_BUS", bus));
    }
    let env = vars.as_slice();
    let args: &[&str] = if json_summary {
        &["demo", "--json"]
    } else {
        &["demo"]
    };
    let demo = archivist(dir, args, env).expect_code(0);
    if json_summary {
        let s: serde_json::Value = serde_json::from_str(demo.stdout.trim()).unwrap();
        assert_eq!(s["all_researched_once"], true, "{s}");
        assert_eq!(s["research_pairs"], EPISODES * CLIPS);
        assert_eq!(s["researched_pairs"], EPISODES * CLIPS);
        assert_eq!(s["research_executions"], EPISODES * CLIPS);
        assert_eq!(s["pairs_researched_more_than_once"], 0);
        assert_eq!(s["messages_dead_lettered"], 2);
        assert_eq!(s["leases_expired"], 1);
        assert!(s["pairs_reclaimed"].as_u64().unwrap() > 0, "{s}");
    } else {
        assert!(
            demo.stdout
                .contains("every pair was researched exactly once"),
            "{}",
            demo.stdout
        );
        assert!(
            demo.stdout.contains("8352 of 8352 pairs"),
            "{}",
            demo.stdout
        );
        assert!(
            demo.stdout.contains("dead-lettered    2 messages"),
            "{}",
            demo.stdout
        );
    }
    // The log goes to standard error, never to standard output.
    assert!(!demo.stdout.contains("INFO"), "{}", demo.stdout);

    // migrate on a used datastore changes nothing.
    archivist(dir, &["migrate"], env).expect_code(0);
    archivist(dir, &["migrate"], env).expect_code(0);

    let status = archivist(dir, &["status", "--json"], env).expect_code(0);
    let s: serde_json::Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(s["episodes"], EPISODES);
    assert_eq!(s["clips"], CLIPS);
    assert_eq!(s["research_pairs"], EPISODES * CLIPS);
    assert_eq!(s["researched_pairs"], EPISODES * CLIPS);
    assert_eq!(s["active_leases"], 0);
    assert_eq!(s["expired_leases"], 0);
    let matched = s["matched_pairs"].as_u64().unwrap();
    assert!(matched > 0 && matched < EPISODES * CLIPS, "{s}");
    if bus.is_some() {
        // The demo's messages went through the database's own queues: the curated ones and
        // the results are all taken, the two poison messages kept with their reasons.
        let q = |name: &str| s["queues"][name].clone();
        for name in ["curated_episodes", "curated_clips", "completed_research"] {
            assert_eq!(q(name)["waiting"], 0, "{s}");
        }
        assert_eq!(q("curated_episodes")["dead_letters"], 1, "{s}");
        assert_eq!(q("curated_clips")["dead_letters"], 1, "{s}");
    }

    let table = archivist(dir, &["status"], env).expect_code(0);
    assert!(table.stdout.contains("research pairs"), "{}", table.stdout);
    assert!(table.stdout.contains("8352"), "{}", table.stdout);

    let all = archivist(dir, &["matches"], env)
        .expect_code(0)
        .json_lines();
    assert_eq!(all.len() as u64, matched);
    for m in &all {
        assert!(m["episode_title"].is_string(), "{m}");
        assert!(
            chrono::DateTime::parse_from_rfc3339(m["episode_date_aired"].as_str().unwrap()).is_ok(),
            "{m}"
        );
        assert!(m["clip_title"].is_string(), "{m}");
        let offsets = m["clip_offsets_ns"].as_array().unwrap();
        assert!(!offsets.is_empty(), "{m}");
        assert!(offsets.iter().all(|o| o.as_i64().unwrap() >= 0), "{m}");
    }

    let intro = archivist(dir, &["matches", "--clip", "Intro Jingle"], env)
        .expect_code(0)
        .json_lines();
    assert!(!intro.is_empty() && intro.len() < all.len());
    assert!(intro.iter().all(|m| m["clip_title"] == "Intro Jingle"));
    assert_eq!(
        intro.len(),
        all.iter()
            .filter(|m| m["clip_title"] == "Intro Jingle")
            .count()
    );

    let episode = all[0]["episode_title"].as_str().unwrap().to_string();
    let in_episode = archivist(dir, &["matches", "--episode", &episode], env)
        .expect_code(0)
        .json_lines();
    assert!(!in_episode.is_empty());
    assert!(in_episode
        .iter()
        .all(|m| m["episode_title"] == episode.as_str()));
    assert_eq!(
        in_episode.len(),
        all.iter()
            .filter(|m| m["episode_title"] == episode.as_str())
            .count()
    );

    let both = archivist(
        dir,
        &["matches", "--episode", &episode, "--clip", "No Such Clip"],
        env,
    )
    .expect_code(0);
    assert_eq!(both.stdout, "");

    let limited = archivist(dir, &["matches", "--limit", "5"], env)
        .expect_code(0)
        .json_lines();
    assert_eq!(limited.len(), 5);

    // A second demo on the same datastore is refused: it needs an empty one.
    let again = archivist(dir, &["demo"], env).expect_code(2);
    assert!(
        again.stderr.contains("empty datastore") && again.stderr.contains("DATABASE_URL"),
        "{}",
        again.stderr
    );
}

#[test]
fn demo_on_sqlite_researches_every_pair_once_and_leaves_a_consistent_datastore() {
    let dir = tempfile::tempdir().unwrap();
    demo_then_inspect(dir.path(), "sqlite://demo.sqlite", false, None);
    assert!(dir.path().join("demo.sqlite").exists());
}

#[test]
fn demo_on_the_sqlite_bus_researches_every_pair_once() {
    let dir = tempfile::tempdir().unwrap();
    demo_then_inspect(dir.path(), "sqlite://demo.sqlite", true, Some("sqlite"));
}

#[test]
fn demo_on_the_postgres_bus_researches_every_pair_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    demo_then_inspect(dir.path(), &db.url, false, Some("postgres"));
}

#[test]
fn demo_on_postgres_researches_every_pair_once_and_leaves_a_consistent_datastore() {
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create();
    demo_then_inspect(dir.path(), &db.url, true, None);
}

#[test]
fn demo_without_database_url_uses_a_temporary_datastore() {
    let dir = tempfile::tempdir().unwrap();
    let run = archivist(dir.path(), &["demo", "--json"], &[]).expect_code(0);
    let s: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(s["temporary_datastore"], true);
    assert_eq!(s["all_researched_once"], true);
    // Nothing left in the working directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
