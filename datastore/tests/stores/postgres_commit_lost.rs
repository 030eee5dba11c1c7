//! A COMMIT whose outcome the client never hears: a TCP proxy in the test lets a lease's
//! COMMIT reach the server, swallows the server's answer and cuts the connection. The lease is
//! committed, the client gets an I/O error. The datastore must answer with the lease it made
//! (found by the id chosen before the commit), not lease again: a second lease would strand the
//! first one's pairs for its whole duration (two-step path) or publish a second work item past
//! the researchers' capacity (lease and publish in one transaction).
#![cfg(all(feature = "postgres", feature = "test-utils"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::Ordering;

use chrono::Duration;
use datastore::testing::{clip, episode, t0};
use datastore::testing_pg::{CommitCutter, PgTestDb};
use datastore::{DataStore, Lease, LeaseRequest, PgDataStore, TransactionalBus};
use messagebus::sql::{PgBus, SqlBusConfig};
use messagebus::testing::receive_n;
use messagebus::Bus;
use uuid::Uuid;

fn request() -> LeaseRequest {
    LeaseRequest {
        max_clips: 2,
        duration: Duration::hours(2),
        now: t0(),
        lease_id: Uuid::new_v4(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_commit_was_lost_is_answered_once_never_leased_twice() {
    let db = PgTestDb::create().await;
    let direct = db.store(4).await;
    direct.migrate().await.unwrap();
    direct
        .upsert_episodes(&[episode(1), episode(2), episode(3)])
        .await
        .unwrap();
    direct.upsert_clips(&[clip(1), clip(2)]).await.unwrap();
    let bus = PgBus::connect(db.url(), SqlBusConfig::default())
        .await
        .unwrap();
    bus.create_queue("pending_research").await.unwrap();
    let bus_id = bus.migrate().await.unwrap();

    let proxy = CommitCutter::start(db.url(), None);
    let store = PgDataStore::connect(&proxy.url(db.url())).await.unwrap();

    // Two-step path: lease, (the caller publishes afterwards).
    let req = request();
    proxy.armed.store(true, Ordering::SeqCst);
    let first = store.lease_next(req).await.unwrap().unwrap();
    assert_eq!(
        proxy.cuts.load(Ordering::SeqCst),
        1,
        "the COMMIT was not cut"
    );
    assert_eq!(first.id, req.lease_id);
    assert_eq!(first.clips.len(), 2);

    // Lease and publish in one transaction.
    let req = request();
    let encode = |lease: &Lease| lease.id.to_string().into_bytes();
    proxy.armed.store(true, Ordering::SeqCst);
    let second = store
        .lease_next_and_publish(req, &bus_id, "pending_research", &encode)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        proxy.cuts.load(Ordering::SeqCst),
        2,
        "the COMMIT was not cut"
    );
    assert_eq!(second.id, req.lease_id);

    // Exactly the two leases, each holding its pairs; exactly one work item, the second's.
    let leases: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM leases ORDER BY created_at, id")
        .fetch_all(direct.pool())
        .await
        .unwrap();
    let mut want = vec![first.id, second.id];
    want.sort();
    let mut got = leases.clone();
    got.sort();
    assert_eq!(got, want, "a lease was made twice or lost");
    let status = direct.status(t0()).await.unwrap();
    assert_eq!((status.active_leases, status.leased_pairs), (2, 4));
    let rx = bus.receiver("pending_research").await.unwrap();
    let items = receive_n(rx.as_ref(), 1).await;
    assert_eq!(items[0].body(), second.id.to_string().as_bytes());
    let more = rx
        .receive(10, std::time::Duration::from_millis(200))
        .await
        .unwrap();
    assert!(
        more.is_empty(),
        "a second work item was published: {more:?}"
    );
}
