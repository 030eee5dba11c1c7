//! Cases every dialect of the database bus runs beyond the conformance suite, written once:
//! `sql_bus_tests!(fresh_with, bus_on)` with `fresh_with(SqlBusConfig) -> TestBus` (a new
//! database) and `bus_on(db, SqlBusConfig) -> TestBus` (another bus on the same database, as
//! another process would open it).
#![allow(dead_code)]

use messagebus::sql::SqlBusConfig;
use messagebus::testing::QueueSettings;

/// The bus config that gives queues `settings`.
pub(crate) fn config(settings: QueueSettings) -> SqlBusConfig {
    SqlBusConfig {
        visibility_timeout: settings.visibility_timeout,
        max_receives: settings.max_receives,
        ..SqlBusConfig::default()
    }
}

macro_rules! sql_bus_tests {
    ($fresh_with:path, $bus_on:path) => {
        mod sql_bus {
            use std::sync::Arc;
            use std::time::Duration;

            use messagebus::sql::SqlBusConfig;
            use messagebus::testing::{assert_empty, receive_n};
            use messagebus::{Bus, BusError};

            #[allow(unused_imports)]
            use super::*;

            /// A burst sent on another bus instance (as another process would) reaches every
            /// receiver waiting on this one within moments, though a send wakes one receiver
            /// at a time (each that got all it asked for wakes the next) and on SQLite one
            /// receiver polls for the others. Their own polls would come after an hour.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_burst_from_elsewhere_reaches_every_waiting_receiver() {
                let config = SqlBusConfig {
                    poll_interval: Duration::from_secs(3600),
                    ..SqlBusConfig::default()
                };
                let a = $fresh_with(config.clone()).await;
                let b = $bus_on(Arc::clone(&a.db), config).await;
                a.create_queue("q").await.unwrap();
                let mut waiting = tokio::task::JoinSet::new();
                for _ in 0..4 {
                    let rx = a.receiver("q").await.unwrap();
                    waiting.spawn(async move { rx.receive(1, Duration::from_secs(120)).await });
                }
                // Time to fall asleep first, or they find the burst as they start. Too short
                // a pause on a busy machine only makes the case easier: it cannot fail it.
                tokio::time::sleep(Duration::from_millis(500)).await;
                let bodies = (0..4).map(|i| format!("m{i}").into_bytes()).collect();
                b.sender("q").await.unwrap().send_batch(bodies).await.unwrap();
                // Held to the end: a delivery dropped unsettled is released, which would wake
                // the next receiver in the baton's place.
                let mut held = Vec::new();
                let mut got = Vec::new();
                while let Some(joined) = tokio::time::timeout(Duration::from_secs(30), waiting.join_next())
                    .await
                    .expect("a waiting receiver was not woken")
                {
                    let deliveries = joined.unwrap().unwrap();
                    assert_eq!(deliveries.len(), 1, "a waiting receiver was not woken");
                    got.extend(deliveries.iter().map(|d| d.body().to_vec()));
                    held.extend(deliveries);
                }
                got.sort();
                assert_eq!(got, [b"m0", b"m1", b"m2", b"m3"]);
            }

            /// A delivery whose visibility ran out and was received again cannot settle the
            /// newer delivery: its receipt is stale.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stale_receipt_settles_nothing() {
                let bus = $fresh_with(SqlBusConfig::default()).await;
                bus.create_queue("q").await.unwrap();
                bus.sender("q").await.unwrap().send(b"m".to_vec()).await.unwrap();
                let rx = bus.receiver("q").await.unwrap();
                let old = receive_n(rx.as_ref(), 1).await.remove(0);
                bus.expire_visibility().await;
                let new = receive_n(rx.as_ref(), 1).await.remove(0);
                assert_eq!(new.receive_count(), 2);
                assert_ne!(old.sql_receipt(), new.sql_receipt());
                old.ack().await.unwrap();
                let stats = bus.sender("q").await.unwrap().inspect().await.unwrap();
                assert_eq!((stats.waiting, stats.in_flight), (0, 1), "the stale ack deleted it");
                new.ack().await.unwrap();
                let stats = bus.sender("q").await.unwrap().inspect().await.unwrap();
                assert_eq!((stats.waiting, stats.in_flight), (0, 0));
            }

            /// Every settlement draws the message away from its old receipt: a heartbeat
            /// that was already under way for a delivery just released, dead-lettered or
            /// moved aside over the receive limit extends nothing, and the message stays
            /// where it went, visible.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_heartbeat_after_a_settlement_hides_nothing() {
                let bus = $fresh_with(SqlBusConfig {
                    max_receives: 2,
                    ..SqlBusConfig::default()
                })
                .await;
                bus.create_queue("q").await.unwrap();
                let tx = bus.sender("q").await.unwrap();
                let rx = bus.receiver("q").await.unwrap();
                let dead = bus.receiver("q_dead_letter").await.unwrap();
                let long = Duration::from_secs(600);

                tx.send(b"released".to_vec()).await.unwrap();
                let d = receive_n(rx.as_ref(), 1).await.remove(0);
                let stale = d.sql_receipt().unwrap();
                d.release().await.unwrap();
                bus.bus.extend_visibility(&stale, long).await.unwrap();
                let again = rx.receive(1, Duration::ZERO).await.unwrap();
                assert_eq!(again.len(), 1, "a stale heartbeat hid a released message");
                // Its second receive: at the limit, so the next claim moves it aside.
                let stale = again[0].sql_receipt().unwrap();
                again.into_iter().for_each(|d| d.let_expire());
                bus.expire_visibility().await;
                assert!(rx.receive(1, Duration::ZERO).await.unwrap().is_empty());
                bus.bus.extend_visibility(&stale, long).await.unwrap();
                let moved = dead.receive(1, Duration::ZERO).await.unwrap();
                assert_eq!(moved.len(), 1, "a stale heartbeat hid a message moved aside");
                for d in moved {
                    d.ack().await.unwrap();
                }

                tx.send(b"poison".to_vec()).await.unwrap();
                let d = receive_n(rx.as_ref(), 1).await.remove(0);
                let stale = d.sql_receipt().unwrap();
                d.dead_letter("poison").await.unwrap();
                bus.bus.extend_visibility(&stale, long).await.unwrap();
                let dead_letters = dead.receive(1, Duration::ZERO).await.unwrap();
                assert_eq!(dead_letters.len(), 1, "a stale heartbeat hid a dead letter");
                assert_eq!(dead_letters[0].body(), b"poison");
            }

            /// A message held longer than its visibility timeout is not handed to a second
            /// receiver: the heartbeat extends it while it is held, and it comes back once
            /// the holder lets go without settling.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn heartbeat_keeps_held_messages() {
                let bus = $fresh_with(SqlBusConfig {
                    visibility_timeout: Duration::from_secs(2),
                    ..SqlBusConfig::default()
                })
                .await;
                bus.create_queue("q").await.unwrap();
                bus.sender("q").await.unwrap().send(b"long work".to_vec()).await.unwrap();
                let rx = bus.receiver("q").await.unwrap();
                let held = receive_n(rx.as_ref(), 1).await.remove(0);
                let other = bus.receiver("q").await.unwrap();
                // Three visibility timeouts pass while the first receiver holds it.
                let got = other.receive(1, Duration::from_secs(6)).await.unwrap();
                assert!(got.is_empty(), "a held message was handed out again: {got:?}");
                held.let_expire();
                let again = receive_n(other.as_ref(), 1).await;
                assert_eq!(again[0].body(), b"long work");
                assert_eq!(again[0].receive_count(), 2);
            }

            /// A delivery dropped unsettled (its holder was given up on) is released: once
            /// `close` returns it is visible again, not in flight until its visibility
            /// timeout (30 s) runs out.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_dropped_delivery_is_released_by_close() {
                let bus = $fresh_with(SqlBusConfig::default()).await;
                bus.create_queue("q").await.unwrap();
                let tx = bus.sender("q").await.unwrap();
                tx.send(b"dropped".to_vec()).await.unwrap();
                let rx = bus.receiver("q").await.unwrap();
                drop(receive_n(rx.as_ref(), 1).await);
                bus.close().await.unwrap();
                let stats = tx.inspect().await.unwrap();
                assert_eq!((stats.waiting, stats.in_flight), (1, 0));
                let again = receive_n(rx.as_ref(), 1).await;
                assert_eq!(again[0].receive_count(), 2);
            }

            /// Messages survive every process: a bus opened afresh on the same database finds
            /// what the first one sent, and what it held comes back.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn messages_survive_a_restart() {
                let config = SqlBusConfig {
                    visibility_timeout: Duration::from_secs(1),
                    ..SqlBusConfig::default()
                };
                let first = $fresh_with(config.clone()).await;
                first.create_queue("q").await.unwrap();
                first
                    .sender("q")
                    .await
                    .unwrap()
                    .send_batch(vec![b"a".to_vec(), b"b".to_vec()])
                    .await
                    .unwrap();
                let rx = first.receiver("q").await.unwrap();
                let in_hand = receive_n(rx.as_ref(), 1).await;
                let db = Arc::clone(&first.db);
                // The process ends holding a message: nothing is settled.
                drop(in_hand);
                drop(rx);
                drop(first);
                let second = $bus_on(db, config).await;
                let rx = second.receiver("q").await.unwrap();
                let got = receive_n(rx.as_ref(), 2).await;
                let mut bodies: Vec<_> = got.iter().map(|d| d.body().to_vec()).collect();
                bodies.sort();
                assert_eq!(bodies, vec![b"a".to_vec(), b"b".to_vec()]);
            }

            /// Bodies the bus cannot carry are refused before anything is sent.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bad_bodies_refused() {
                let bus = $fresh_with(SqlBusConfig::default()).await;
                bus.create_queue("q").await.unwrap();
                let tx = bus.sender("q").await.unwrap();
                for bad in [vec![b'o', b'k', 0xff], b"nul\0".to_vec()] {
                    let out = tx.send_batch(vec![b"fine".to_vec(), bad]).await;
                    assert!(matches!(out, Err(BusError::InvalidBody(_))), "{out:?}");
                }
                assert_eq!(tx.inspect().await.unwrap().waiting, 0);
                let rx = bus.receiver("q").await.unwrap();
                assert_empty(rx.as_ref()).await;
            }

            /// A receiver of a queue nobody created says which queue.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn missing_queue_named() {
                let bus = $fresh_with(SqlBusConfig::default()).await;
                let err = bus.receiver("nope").await.err().unwrap();
                assert!(matches!(&err, BusError::QueueNotFound(q) if q == "nope"), "{err}");
                assert!(err.to_string().contains("\"nope\""), "{err}");
            }
        }
    };
}
