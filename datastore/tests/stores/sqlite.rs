//! The SQLite adapter: the datastore conformance suite on a fresh file per case (and again on
//! an in-memory store), and SQLite-specific behaviour: the file is created if missing, several
//! stores and several processes on one file migrate and lease concurrently without leasing a
//! pair twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use chrono::Duration;
use datastore::testing::{clip, episode, t0, Fresh};
use datastore::{DataStore, DataStoreError, LeaseRequest, SqliteDataStore};

fn url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

/// A migrated store on a new file in a temporary directory that lives as long as the case.
async fn fresh() -> Fresh {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteDataStore::connect(&url(&dir.path().join("archivist.db")))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    Fresh::new(Arc::new(store), dir)
}

datastore::datastore_conformance_tests!(fresh);

/// The suite again on `SqliteDataStore::in_memory`.
mod memory {
    use super::*;

    async fn fresh_memory() -> Fresh {
        let store = SqliteDataStore::in_memory().await.unwrap();
        store.migrate().await.unwrap();
        Fresh::new(Arc::new(store), ())
    }

    datastore::datastore_conformance_tests!(fresh_memory);
}

fn request(max_clips: u32) -> LeaseRequest {
    LeaseRequest {
        max_clips,
        duration: Duration::hours(1),
        now: t0(),
        lease_id: uuid::Uuid::new_v4(),
    }
}

async fn seed(store: &dyn DataStore, episodes: u32, clips: u32) -> HashSet<(String, String)> {
    let es: Vec<_> = (0..episodes).map(episode).collect();
    let cs: Vec<_> = (0..clips).map(clip).collect();
    store.upsert_episodes(&es).await.unwrap();
    store.upsert_clips(&cs).await.unwrap();
    es.iter()
        .flat_map(|e| cs.iter().map(|c| (e.title.clone(), c.title.clone())))
        .collect()
}

/// Leases until there is nothing left; returns the pairs leased.
async fn lease_all(store: Arc<dyn DataStore>, max_clips: u32) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    while let Some(lease) = store.lease_next(request(max_clips)).await.unwrap() {
        pairs.extend(
            lease
                .clips
                .iter()
                .map(|c| (lease.episode.title.clone(), c.title.clone())),
        );
    }
    pairs
}

#[tokio::test]
async fn file_is_created_if_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    assert!(!path.exists());
    let store = datastore::connect(&url(&path)).await.unwrap();
    store.migrate().await.unwrap();
    assert!(path.exists());
    store.upsert_episode(&episode(1)).await.unwrap();
    drop(store);

    // Reopened, the data is there; `sqlite:` without slashes names the same file.
    let store = datastore::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    assert_eq!(store.status(t0()).await.unwrap().episodes, 1);
}

#[tokio::test]
async fn a_file_in_a_missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/a.db");
    let err = SqliteDataStore::connect(&url(&path)).await.unwrap_err();
    assert!(!matches!(err, DataStoreError::Invalid(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_migrate_and_lease_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let url = url(&dir.path().join("shared.db"));
    let a: Arc<dyn DataStore> = Arc::new(SqliteDataStore::connect(&url).await.unwrap());
    let b: Arc<dyn DataStore> = Arc::new(SqliteDataStore::connect(&url).await.unwrap());
    let (ma, mb) = tokio::join!(a.migrate(), b.migrate());
    ma.unwrap();
    mb.unwrap();
    let all = seed(&*a, 20, 10).await;

    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(lease_all(store, 3))
        })
        .collect();
    let mut leased = HashSet::new();
    for task in tasks {
        for pair in task.await.unwrap() {
            assert!(leased.insert(pair.clone()), "{pair:?} leased twice");
        }
    }
    assert_eq!(leased, all);
    let status = b.status(t0()).await.unwrap();
    assert_eq!(status.leased_pairs, 200);
}

/// Set by `processes_on_one_file_lease_concurrently` for the copies of this test binary it
/// starts; they then act as `child_process_leaser`.
const CHILD_DB: &str = "ARCHIVIST_TEST_SQLITE_CHILD_DB";

/// Not a test of its own: the body of each child process of
/// `processes_on_one_file_lease_concurrently`. Without the variable it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process_leaser() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let store: Arc<dyn DataStore> = Arc::new(SqliteDataStore::connect(&url).await.unwrap());
    store.migrate().await.unwrap();
    let tasks: Vec<_> = (0..4)
        .map(|_| tokio::spawn(lease_all(store.clone(), 2)))
        .collect();
    for task in tasks {
        for (e, c) in task.await.unwrap() {
            println!("PAIR\t{e}\t{c}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_on_one_file_lease_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let url = url(&dir.path().join("shared.db"));
    let store = SqliteDataStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let all = seed(&store, 30, 20).await;

    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            tokio::process::Command::new(&exe)
                .args([
                    "sqlite::child_process_leaser",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DB, &url)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut leased = HashSet::new();
    let mut per_child = Vec::new();
    for child in children {
        let output = child.wait_with_output().await.unwrap();
        assert!(output.status.success(), "child failed: {output:?}");
        let stdout = String::from_utf8(output.stdout).unwrap();
        let mut n = 0;
        for line in stdout.lines() {
            // libtest may print "test child_process_leaser ... " on the same line first.
            let Some(at) = line.find("PAIR\t") else {
                continue;
            };
            let rest = &line[at + 5..];
            let (e, c) = rest.split_once('\t').unwrap();
            assert!(
                leased.insert((e.to_string(), c.to_string())),
                "({e}, {c}) leased twice"
            );
            n += 1;
        }
        per_child.push(n);
    }
    assert_eq!(leased, all, "pairs leased per child: {per_child:?}");
}

/// A store made by the first schema (before leases kept their length) is carried forward by
/// `migrate`: its leases keep the length they had (creation to expiry), and until it is
/// migrated the store names the migration it lacks.
#[tokio::test]
async fn a_store_made_by_the_first_schema_is_carried_forward() {
    let dir = tempfile::tempdir().unwrap();
    let url = url(&dir.path().join("old.sqlite"));
    let first = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/migrations/sqlite/0001_schema.sql"
        ),
        first.path().join("0001_schema.sql"),
    )
    .unwrap();
    let old = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc"))
        .await
        .unwrap();
    sqlx::migrate::Migrator::new(first.path())
        .await
        .unwrap()
        .run(&old)
        .await
        .unwrap();
    let us = |t: chrono::DateTime<chrono::Utc>| t.timestamp_micros();
    sqlx::query(
        "INSERT INTO episodes (id, title, date_aired, initial_date_curated, last_date_curated, \
         curator_information, description, media_uri, media_type, priority) \
         VALUES (1, 'e', ?1, ?1, ?1, 'c', 'd', 'u', 'mp3', 0)",
    )
    .bind(us(t0()))
    .execute(&old)
    .await
    .unwrap();
    let lease_id = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO leases (id, episode_id, created_at, expires_at, held_pairs) \
         VALUES (?1, 1, ?2, ?3, 1)",
    )
    .bind(lease_id)
    .bind(us(t0()))
    .bind(us(t0() + Duration::minutes(20)))
    .execute(&old)
    .await
    .unwrap();
    old.close().await;

    let store = SqliteDataStore::connect(&url).await.unwrap();
    assert_eq!(
        store.missing_migrations().await.unwrap(),
        [
            "0002 lease duration",
            "0003 recent matches",
            "0004 failed research",
            "0005 episode completions",
            "0006 newer curation retries failures",
            "0007 browse",
            "0008 clip count",
            "0009 completion claims",
            "0010 match scores",
            "0011 api access",
            "0012 api held items",
            "0013 clip findability"
        ]
    );
    store.migrate().await.unwrap();
    assert!(store.missing_migrations().await.unwrap().is_empty());
    // The old lease keeps its 20 minutes: renewed at 10, due at 30.
    let renew = datastore::LeaseUpdate::Renew {
        now: t0() + Duration::minutes(10),
    };
    assert!(store.update_lease(lease_id, renew).await.unwrap());
    let at = |m| t0() + Duration::minutes(m);
    assert_eq!(store.status(at(29)).await.unwrap().active_leases, 1);
    assert_eq!(store.status(at(30)).await.unwrap().expired_leases, 1);
}
