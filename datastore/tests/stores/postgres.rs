//! The Postgres adapter: the conformance suite, plus what only Postgres has (connect errors,
//! concurrent migrations, error classification, surviving dropped connections).
//! Each test runs on a fresh database of its own (`datastore::testing_pg`).
#![cfg(all(feature = "postgres", feature = "test-utils"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use datastore::testing_pg::{fresh, fresh_pg_store, PgTestDb};
use datastore::{DataStore, DataStoreError, PgDataStore};

datastore::datastore_conformance_tests!(fresh);

#[tokio::test]
async fn two_concurrent_migrations_on_a_fresh_database_both_succeed() {
    let db = PgTestDb::create().await;
    let a = db.store(2).await;
    let b = db.store(2).await;
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    ra.unwrap();
    rb.unwrap();
    // And once more: harmless.
    a.migrate().await.unwrap();
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'
         AND table_name IN ('episodes', 'clips', 'leases', 'leased_pairs', 'research_results')",
    )
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!(tables, 5);
}

#[tokio::test]
async fn unreachable_server_is_unavailable_and_retryable_without_leaking_the_password() {
    // Port 1: nothing listens there. (A short acquire timeout: the pool keeps trying to
    // connect until it runs out.)
    let options: sqlx::postgres::PgConnectOptions =
        "postgres://postgres:hunter2@127.0.0.1:1/x".parse().unwrap();
    let err = PgDataStore::connect_with(
        options,
        PgDataStore::pool_options().acquire_timeout(std::time::Duration::from_millis(500)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, DataStoreError::Unavailable(_)), "{err:?}");
    assert!(err.is_retryable());
    assert!(!format!("{err} {err:?}").contains("hunter2"));
}

#[tokio::test]
async fn missing_database_and_bad_urls_are_configuration_errors() {
    let db = PgTestDb::create().await;
    let missing = datastore::testing_pg::with_database(db.url(), "archivist_no_such_db");
    let err = PgDataStore::connect(&missing).await.unwrap_err();
    assert!(matches!(err, DataStoreError::Config(_)), "{err:?}");
    assert!(!err.is_retryable());

    let err = PgDataStore::connect("postgres://u:hunter2@127.0.0.1:notaport/x")
        .await
        .unwrap_err();
    assert!(matches!(err, DataStoreError::Config(_)), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("hunter2"));

    // Through the URL dispatcher too.
    let err = datastore::connect(&missing).await.err().unwrap();
    assert!(matches!(err, DataStoreError::Config(_)), "{err:?}");
}

/// Serialization failures, deadlocks and killed connections, produced for real, classify as
/// retryable.
#[tokio::test]
async fn transient_postgres_errors_are_retryable() {
    let (store, _db) = fresh_pg_store().await;
    let pool = store.pool();
    sqlx::query("CREATE TABLE t (k int PRIMARY KEY, v int)")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO t VALUES (1, 0), (2, 0)")
        .execute(pool)
        .await
        .unwrap();

    // Serialization failure: two SERIALIZABLE transactions each read what the other writes.
    let mut a = pool.begin().await.unwrap();
    let mut b = pool.begin().await.unwrap();
    for tx in [&mut a, &mut b] {
        sqlx::query("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
            .execute(&mut **tx)
            .await
            .unwrap();
        sqlx::query("SELECT sum(v) FROM t")
            .execute(&mut **tx)
            .await
            .unwrap();
    }
    sqlx::query("UPDATE t SET v = 1 WHERE k = 1")
        .execute(&mut *a)
        .await
        .unwrap();
    sqlx::query("UPDATE t SET v = 1 WHERE k = 2")
        .execute(&mut *b)
        .await
        .unwrap();
    a.commit().await.unwrap();
    let err = DataStoreError::from(b.commit().await.unwrap_err());
    assert!(err.is_retryable(), "serialization failure: {err:?}");

    // Deadlock: each transaction holds the row the other wants.
    let mut a = pool.begin().await.unwrap();
    let mut b = pool.begin().await.unwrap();
    sqlx::query("UPDATE t SET v = 2 WHERE k = 1")
        .execute(&mut *a)
        .await
        .unwrap();
    sqlx::query("UPDATE t SET v = 2 WHERE k = 2")
        .execute(&mut *b)
        .await
        .unwrap();
    let (ra, rb) = tokio::join!(
        sqlx::query("UPDATE t SET v = 3 WHERE k = 2").execute(&mut *a),
        sqlx::query("UPDATE t SET v = 3 WHERE k = 1").execute(&mut *b),
    );
    let err = DataStoreError::from(ra.err().or(rb.err()).expect("one side deadlocks"));
    assert!(err.is_retryable(), "deadlock: {err:?}");
    drop((a, b));

    // A connection killed under the pool (as a restarting server does).
    let mut conn = pool.acquire().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let killer = PgDataStore::connect(&datastore::testing_pg::admin_url())
        .await
        .unwrap();
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(killer.pool())
        .await
        .unwrap();
    assert!(killed);
    let err = DataStoreError::from(
        sqlx::query("SELECT 1")
            .execute(&mut *conn)
            .await
            .unwrap_err(),
    );
    assert!(err.is_retryable(), "killed connection: {err:?}");
}

/// Every connection of the store's pool is killed; the next operations still succeed (the
/// pool replaces dead connections, and the adapter retries what fails on one).
#[tokio::test]
async fn operations_survive_all_connections_being_killed() {
    use datastore::testing::{clip, episode, t0};
    let (store, db) = fresh_pg_store().await;
    store.upsert_episode(&episode(1)).await.unwrap();
    store.upsert_clip(&clip(1)).await.unwrap();
    // Fill the pool (8), so that every connection it has is dead when the next operation runs:
    // more dead connections than the adapter has attempts.
    let held: Vec<_> = hold_connections(&store).await;
    drop(held);
    let killer = PgDataStore::connect(&datastore::testing_pg::admin_url())
        .await
        .unwrap();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
    )
    .bind(db.name())
    .fetch_all(killer.pool())
    .await
    .unwrap();
    assert!(!killed.is_empty());
    let status = store.status(t0()).await.unwrap();
    assert_eq!((status.episodes, status.clips), (1, 1));
    let lease = store
        .lease_next(datastore::LeaseRequest {
            max_clips: 5,
            duration: chrono::Duration::hours(1),
            now: t0(),
            lease_id: uuid::Uuid::new_v4(),
        })
        .await
        .unwrap();
    assert!(lease.is_some());
}

/// A lease selection's settings (a commit that does not wait for the WAL's sync, no
/// sequential scans: `SET LOCAL` in its own transaction) stay in it: on a pool of one
/// connection, the settings are the server's again after a lease and after a selection that
/// found nothing, so the renewals, recordings and upserts that follow on that connection keep
/// them.
#[tokio::test]
async fn lease_transaction_settings_stay_in_it() {
    use datastore::testing::{clip, episode, result, t0};
    let db = PgTestDb::create().await;
    let store = db.store(1).await;
    store.migrate().await.unwrap();
    let setting = || async {
        sqlx::query_as::<_, (String, String)>(
            "SELECT current_setting('synchronous_commit'), current_setting('enable_seqscan')",
        )
        .fetch_one(store.pool())
        .await
        .unwrap()
    };
    let server = ("on".to_string(), "on".to_string());
    assert_eq!(setting().await, server);
    let request = || datastore::LeaseRequest {
        max_clips: 5,
        duration: chrono::Duration::hours(1),
        now: t0(),
        lease_id: uuid::Uuid::new_v4(),
    };
    // Nothing to lease: the selection commits empty-handed.
    assert!(store.lease_next(request()).await.unwrap().is_none());
    assert_eq!(setting().await, server);
    store.upsert_episode(&episode(1)).await.unwrap();
    store.upsert_clip(&clip(1)).await.unwrap();
    let lease = store.lease_next(request()).await.unwrap().unwrap();
    assert_eq!(setting().await, server);
    store
        .update_lease(lease.id, datastore::LeaseUpdate::Renew { now: t0() })
        .await
        .unwrap();
    assert_eq!(setting().await, server);
    let recorded = store
        .record_results(&[result(lease.id, &episode(1), &clip(1), &[])])
        .await
        .unwrap();
    assert_eq!(recorded, vec![datastore::RecordOutcome::Recorded]);
    assert_eq!(setting().await, server);
    // The lease was committed: another connection sees it (its one pair is recorded, so it
    // holds none; it ends when revoked).
    let other = db.store(1).await;
    assert!(other
        .update_lease(lease.id, datastore::LeaseUpdate::Revoke)
        .await
        .unwrap());
    // The variant the benchmark compares with leaves them alone too.
    let before = store.with_lease_transaction_as_before();
    store.upsert_clip(&clip(2)).await.unwrap();
    assert!(before.lease_next(request()).await.unwrap().is_some());
    assert_eq!(setting().await, server);
}

async fn hold_connections(store: &PgDataStore) -> Vec<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut conns = Vec::new();
    for _ in 0..8 {
        conns.push(store.pool().acquire().await.unwrap());
    }
    conns
}

/// A store made by the first schema (before leases kept their length) is carried forward by
/// `migrate`: its leases keep the length they had (creation to expiry), and until it is
/// migrated the store names the migration it lacks.
#[tokio::test]
async fn a_store_made_by_the_first_schema_is_carried_forward() {
    use chrono::Duration;
    use datastore::testing::t0;
    let db = PgTestDb::create().await;
    let first = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/migrations/postgres/0001_schema.sql"
        ),
        first.path().join("0001_schema.sql"),
    )
    .unwrap();
    let old = sqlx::PgPool::connect(db.url()).await.unwrap();
    sqlx::migrate::Migrator::new(first.path())
        .await
        .unwrap()
        .run(&old)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO episodes (id, title, date_aired, initial_date_curated, last_date_curated,
         curator_information, description, media_uri, media_type, priority)
         VALUES (1, 'e', $1, $1, $1, 'c', 'd', 'u', 'mp3', 0)",
    )
    .bind(t0())
    .execute(&old)
    .await
    .unwrap();
    let lease_id = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO leases (id, episode_id, created_at, expires_at, held_pairs)
         VALUES ($1, 1, $2, $3, 1)",
    )
    .bind(lease_id)
    .bind(t0())
    .bind(t0() + Duration::minutes(20))
    .execute(&old)
    .await
    .unwrap();
    old.close().await;

    let store = db.store(4).await;
    assert_eq!(
        store.missing_migrations().await.unwrap(),
        [
            "0002 lease duration",
            "0003 lease frontier",
            "0004 leased pairs unchecked lease",
            "0005 episodes hot counters",
            "0006 recent matches",
            "0007 failed research",
            "0008 episode completions",
            "0009 newer curation retries failures",
            "0010 browse",
            "0011 clip count",
            "0012 completion claims",
            "0013 match scores",
            "0014 api access",
            "0015 api held items",
            "0016 clip findability"
        ]
    );
    store.migrate().await.unwrap();
    assert!(store.missing_migrations().await.unwrap().is_empty());
    let renew = datastore::LeaseUpdate::Renew {
        now: t0() + Duration::minutes(10),
    };
    assert!(store.update_lease(lease_id, renew).await.unwrap());
    let at = |m| t0() + Duration::minutes(m);
    assert_eq!(store.status(at(29)).await.unwrap().active_leases, 1);
    assert_eq!(store.status(at(30)).await.unwrap().expired_leases, 1);
}

/// A store made by the schema before the lease frontier (0001 and 0002), part researched, is
/// carried forward: selection starts from the top once, then from the frontier it sets, and
/// an episode curated ahead of the researched ones is still leased first.
#[tokio::test]
async fn a_store_made_before_the_lease_frontier_is_carried_forward() {
    use chrono::Duration;
    use datastore::testing::{episode, t0};
    let db = PgTestDb::create().await;
    let before = tempfile::tempdir().unwrap();
    for file in ["0001_schema.sql", "0002_lease_duration.sql"] {
        std::fs::copy(
            format!("{}/migrations/postgres/{file}", env!("CARGO_MANIFEST_DIR")),
            before.path().join(file),
        )
        .unwrap();
    }
    let old = sqlx::PgPool::connect(db.url()).await.unwrap();
    sqlx::migrate::Migrator::new(before.path())
        .await
        .unwrap()
        .run(&old)
        .await
        .unwrap();
    // Three episodes, aired a day apart, and one clip; the latest aired is researched.
    for i in 101..=103_i64 {
        sqlx::query(
            "INSERT INTO episodes (id, title, date_aired, initial_date_curated,
             last_date_curated, curator_information, description, media_uri, media_type,
             priority, researched_count)
             VALUES ($1, 'Old ' || $1, $2, $2, $2, 'c', 'd', 'u' || $1, 'mp3', 0, $3)",
        )
        .bind(i)
        .bind(t0() + Duration::days(i - 100))
        .bind(i32::from(i == 103))
        .execute(&old)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO clips (id, title, initial_date_curated, last_date_curated,
         curator_information, description, media_uri, media_type, priority)
         VALUES (1, 'Clip', $1, $1, 'c', 'd', 'clip', 'mp3', 0)",
    )
    .bind(t0())
    .execute(&old)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO research_results (episode_id, clip_id, lease_id, research_date,
         episode_duration_ns, episode_hash, clip_duration_ns, clip_hash, clip_offsets_ns, matched)
         VALUES (103, 1, $1, $2, 1, 'h', 1, 'h', '{}', false)",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(t0())
    .execute(&old)
    .await
    .unwrap();
    old.close().await;

    let store = db.store(4).await;
    assert_eq!(
        store.missing_migrations().await.unwrap(),
        [
            "0003 lease frontier",
            "0004 leased pairs unchecked lease",
            "0005 episodes hot counters",
            "0006 recent matches",
            "0007 failed research",
            "0008 episode completions",
            "0009 newer curation retries failures",
            "0010 browse",
            "0011 clip count",
            "0012 completion claims",
            "0013 match scores",
            "0014 api access",
            "0015 api held items",
            "0016 clip findability"
        ]
    );
    store.migrate().await.unwrap();
    let request = datastore::LeaseRequest {
        max_clips: 5,
        duration: Duration::hours(1),
        now: t0(),
        lease_id: uuid::Uuid::new_v4(),
    };
    let next = |store: PgDataStore| async move {
        let lease = store.lease_next(request).await.unwrap().unwrap();
        store
            .update_lease(lease.id, datastore::LeaseUpdate::Cancel)
            .await
            .unwrap();
        lease.episode.title
    };
    assert_eq!(next(store.clone()).await, "Old 102");
    assert_eq!(next(store.clone()).await, "Old 102");
    let mut new = episode(1);
    new.date_aired = t0() + Duration::days(10);
    store.upsert_episode(&new).await.unwrap();
    assert_eq!(next(store.clone()).await, new.title);
}

/// Data Postgres cannot keep (a NUL in text, a time outside its range) is the data's fault:
/// `Invalid`, so an archivist dead-letters the message instead of stopping on every
/// redelivery. The archivists' validation refuses both first; this is the net behind it.
#[tokio::test]
async fn data_postgres_cannot_keep_is_invalid_not_a_failure() {
    let (store, _db) = fresh_pg_store().await;
    let mut nul = datastore::testing::episode(1);
    nul.title = "nul\u{0}title".into();
    let mut ancient = datastore::testing::episode(2);
    ancient.date_aired = chrono::DateTime::from_timestamp(-400_000_000_000, 0).unwrap();
    for e in [nul, ancient] {
        let err = store.upsert_episode(&e).await.unwrap_err();
        assert!(
            matches!(err, DataStoreError::Invalid(_)) && !err.is_retryable(),
            "{err:?}"
        );
    }
    assert_eq!(store.status(chrono::Utc::now()).await.unwrap().episodes, 0);
}
