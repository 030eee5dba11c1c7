//! The in-memory bus: the bus conformance suite, and what only the memory bus can show
//! (misbehaviour on demand, exact consumer counts, paused time, no loss under load).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use messagebus::testing::QueueSettings;
use messagebus::{dead_letter_queue_name, Bus, BusError, MemoryBus, MemoryBusConfig, Receiver};

async fn fresh(settings: QueueSettings) -> Arc<dyn Bus> {
    Arc::new(MemoryBus::new(MemoryBusConfig {
        visibility_timeout: settings.visibility_timeout,
        max_receives: settings.max_receives,
        ..MemoryBusConfig::default()
    }))
}

messagebus::bus_conformance_tests!(fresh);

const HOUR: Duration = Duration::from_secs(3600);

fn config(visibility_secs: u64, max_receives: u32) -> MemoryBusConfig {
    MemoryBusConfig {
        visibility_timeout: Duration::from_secs(visibility_secs),
        max_receives,
        ..MemoryBusConfig::default()
    }
}

async fn bus_with_queue(bus: &MemoryBus, queue: &str) {
    bus.create_queue(queue).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn fresh_messages_come_in_order() {
    let bus = MemoryBus::new(config(30, 5));
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    let bodies: Vec<Vec<u8>> = (0..20).map(|i| vec![i]).collect();
    tx.send_batch(bodies.clone()).await.unwrap();
    let got = rx.receive(20, HOUR).await.unwrap();
    let order: Vec<Vec<u8>> = got.iter().map(|d| d.body().to_vec()).collect();
    assert_eq!(order, bodies);
}

#[tokio::test(start_paused = true)]
async fn misbehave_duplicates_and_reorders() {
    let bus = MemoryBus::with_seed(
        MemoryBusConfig {
            misbehave: 1.0,
            ..config(30, 5)
        },
        7,
    );
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    let bodies: Vec<Vec<u8>> = (0..20).map(|i| vec![i]).collect();
    tx.send_batch(bodies.clone()).await.unwrap();

    // Acknowledge everything as it comes, until a receive finds nothing more.
    let mut first_seen: Vec<Vec<u8>> = Vec::new();
    let mut times: HashMap<String, usize> = HashMap::new();
    loop {
        let got = rx.receive(3, Duration::from_secs(1)).await.unwrap();
        if got.is_empty() {
            break;
        }
        for d in got {
            let n = times.entry(d.message_id().to_owned()).or_default();
            *n += 1;
            if *n == 1 {
                first_seen.push(d.body().to_vec());
            }
            d.ack().await.unwrap();
        }
    }
    assert_eq!(times.len(), 20, "every message arrives");
    // Every original spawns one duplicate at probability 1; duplicates never spawn more.
    assert!(times.values().all(|&n| n == 2), "{times:?}");
    assert_ne!(first_seen, bodies, "fresh messages came out of order");
    let mut sorted = first_seen.clone();
    sorted.sort();
    assert_eq!(sorted, bodies);
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn misbehave_is_repeatable_with_a_seed() {
    async fn run(seed: u64) -> Vec<String> {
        let bus = MemoryBus::with_seed(
            MemoryBusConfig {
                misbehave: 0.5,
                ..config(30, 5)
            },
            seed,
        );
        bus_with_queue(&bus, "q").await;
        let tx = bus.sender("q").await.unwrap();
        let rx = bus.receiver("q").await.unwrap();
        tx.send_batch((0..30).map(|i| vec![i]).collect())
            .await
            .unwrap();
        let mut ids = Vec::new();
        loop {
            let got = rx.receive(4, Duration::from_secs(1)).await.unwrap();
            if got.is_empty() {
                return ids;
            }
            for d in got {
                ids.push(d.message_id().to_owned());
                d.ack().await.unwrap();
            }
        }
    }
    assert_eq!(run(11).await, run(11).await);
}

#[tokio::test]
async fn consumers_follow_live_receivers() {
    let bus = MemoryBus::default();
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(0));
    let receivers: Vec<Arc<dyn Receiver>> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(bus.receiver("q").await.unwrap());
        }
        v
    };
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(5));
    // A clone of the handle is the same consumer.
    let clone = Arc::clone(&receivers[0]);
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(5));
    // Another clone of the bus sees the same queue and counts.
    let other = bus.clone();
    let extra = other.receiver("q").await.unwrap();
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(6));
    drop(receivers);
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(2));
    drop(clone);
    drop(extra);
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(0));
    // Receivers moved into tasks count until the tasks end.
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let rx = bus.receiver("q").await.unwrap();
    let task = tokio::spawn(async move {
        let _rx = rx;
        done_rx.await.ok();
    });
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(1));
    done_tx.send(()).unwrap();
    task.await.unwrap();
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(0));
}

#[tokio::test(start_paused = true)]
async fn visibility_timeout_on_paused_clock() {
    let bus = MemoryBus::new(config(30, 5));
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    tx.send(b"m".to_vec()).await.unwrap();
    let first = rx.receive(1, Duration::ZERO).await.unwrap().pop().unwrap();
    assert_eq!(first.receive_count(), 1);
    // Still invisible 29 s later.
    assert!(rx
        .receive(1, Duration::from_secs(29))
        .await
        .unwrap()
        .is_empty());
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 1));
    // A receiver already waiting is woken by the expiry, without any send.
    let start = tokio::time::Instant::now();
    let second = rx.receive(1, HOUR).await.unwrap().pop().unwrap();
    assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(1));
    assert_eq!(second.message_id(), first.message_id());
    assert_eq!(second.receive_count(), 2);

    // The first delivery is stale: settling it must not touch the second.
    first.ack().await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 1));
    second.ack().await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn stale_release_and_dead_letter_do_nothing() {
    let bus = MemoryBus::new(config(10, 5));
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    tx.send(b"m".to_vec()).await.unwrap();
    let a = rx.receive(1, HOUR).await.unwrap().pop().unwrap();
    let b = rx.receive(1, HOUR).await.unwrap().pop().unwrap();
    let c = rx.receive(1, HOUR).await.unwrap().pop().unwrap();
    assert_eq!(c.receive_count(), 3);
    a.release().await.unwrap();
    b.dead_letter("stale").await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!(
        (stats.waiting, stats.in_flight, stats.dead_letters),
        (0, 1, 0)
    );
    c.ack().await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!(
        (stats.waiting, stats.in_flight, stats.dead_letters),
        (0, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn expired_messages_redrive_after_max_receives() {
    let bus = MemoryBus::new(config(30, 3));
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    tx.send(b"crashes the worker".to_vec()).await.unwrap();
    for n in 1..=3 {
        let d = rx.receive(1, HOUR).await.unwrap().pop().unwrap();
        assert_eq!(d.receive_count(), n);
        drop(d); // the worker died: visibility runs out
    }
    assert!(rx.receive(1, HOUR).await.unwrap().is_empty());
    let stats = tx.inspect().await.unwrap();
    assert_eq!(
        (stats.waiting, stats.in_flight, stats.dead_letters),
        (0, 0, 1)
    );
    let dlq = bus.receiver(&dead_letter_queue_name("q")).await.unwrap();
    let d = dlq
        .receive(10, Duration::ZERO)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(d.body(), b"crashes the worker");
    assert_eq!(d.dead_letter_reason(), Some("exceeded 3 receives"));
    assert_eq!(d.receive_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn dead_letter_reason_survives_redelivery_from_the_dead_letter_queue() {
    let bus = MemoryBus::new(config(30, 5));
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    let dlq = bus.receiver("q_dead_letter").await.unwrap();
    tx.send(b"poison".to_vec()).await.unwrap();
    let reason = "missing field `clip_id` at line 1 column 9";
    rx.receive(1, HOUR)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .dead_letter(reason)
        .await
        .unwrap();
    let d = dlq.receive(1, HOUR).await.unwrap().pop().unwrap();
    assert_eq!(d.dead_letter_reason(), Some(reason));
    let id = d.message_id().to_owned();
    d.release().await.unwrap();
    let d = dlq.receive(1, HOUR).await.unwrap().pop().unwrap();
    assert_eq!(d.message_id(), id);
    assert_eq!(d.dead_letter_reason(), Some(reason));
    assert_eq!(d.receive_count(), 2);
    // A dead-letter queue has none of its own: the message stays put and comes back.
    match d.dead_letter("again").await {
        Err(BusError::Unsupported(_)) => {}
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let d = dlq.receive(1, HOUR).await.unwrap().pop().unwrap();
    assert_eq!(d.dead_letter_reason(), Some(reason));
    // Nothing on the dead-letter queue is ever redriven, however often it is received.
    for _ in 0..10 {
        d_release(&dlq).await;
    }
    let d = dlq.receive(1, HOUR).await.unwrap().pop().unwrap();
    d.ack().await.unwrap();
    assert_eq!(tx.inspect().await.unwrap().dead_letters, 0);
}

async fn d_release(rx: &Arc<dyn Receiver>) {
    rx.receive(1, HOUR)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropped_receive_future_loses_nothing() {
    let bus = MemoryBus::new(config(30, 5));
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    {
        let pending = rx.receive(1, HOUR);
        futures::pin_mut!(pending);
        assert!(futures::poll!(pending.as_mut()).is_pending());
        tx.send(b"m".to_vec()).await.unwrap();
        // Dropped while woken but before it ran again.
    }
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (1, 0));
    // And a receive cut short by a timeout leaves the queue as it was.
    let rx2 = bus.receiver("q").await.unwrap();
    let taken = rx2.receive(1, Duration::ZERO).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), rx.receive(1, HOUR))
            .await
            .is_err()
    );
    taken.into_iter().next().unwrap().release().await.unwrap();
    let d = rx.receive(1, HOUR).await.unwrap().pop().unwrap();
    assert_eq!(d.receive_count(), 2);
}

#[tokio::test]
async fn missing_queue_and_zero_max() {
    let bus = MemoryBus::default();
    assert!(matches!(
        bus.sender("nope").await.err(),
        Some(BusError::QueueNotFound(q)) if q == "nope"
    ));
    bus_with_queue(&bus, "q").await;
    let tx = bus.sender("q").await.unwrap();
    tx.send(b"m".to_vec()).await.unwrap();
    let rx = bus.receiver("q").await.unwrap();
    assert!(rx.receive(0, HOUR).await.unwrap().is_empty());
    assert_eq!(rx.receive(5, HOUR).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_lost_under_concurrent_senders_and_receivers() {
    const SENDERS: usize = 8;
    const PER_SENDER: usize = 500;
    const RECEIVERS: usize = 8;
    const TOTAL: usize = SENDERS * PER_SENDER;
    let bus = MemoryBus::new(config(60, 5));
    bus_with_queue(&bus, "q").await;

    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let tx = bus.sender("q").await.unwrap();
        senders.push(tokio::spawn(async move {
            for chunk in (0..PER_SENDER).collect::<Vec<_>>().chunks(7) {
                let bodies = chunk
                    .iter()
                    .map(|i| format!("{s}:{i}").into_bytes())
                    .collect();
                tx.send_batch(bodies).await.unwrap();
                tokio::task::yield_now().await;
            }
        }));
    }

    let acked = Arc::new(AtomicUsize::new(0));
    let mut receivers = Vec::new();
    for r in 0..RECEIVERS {
        let rx = bus.receiver("q").await.unwrap();
        let acked = Arc::clone(&acked);
        receivers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while acked.load(Ordering::SeqCst) < TOTAL {
                for d in rx.receive(5, Duration::from_millis(50)).await.unwrap() {
                    // Every third message on its first receive is released, to mix
                    // redeliveries into the traffic.
                    let body = d.body().to_vec();
                    if d.receive_count() == 1 && (body.len() + r) % 3 == 0 {
                        d.release().await.unwrap();
                    } else {
                        d.ack().await.unwrap();
                        mine.push(body);
                        acked.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            mine
        }));
    }
    for s in senders {
        s.await.unwrap();
    }
    let mut all = Vec::new();
    for r in receivers {
        all.extend(r.await.unwrap());
    }
    assert_eq!(all.len(), TOTAL, "each message acknowledged exactly once");
    let distinct: HashSet<Vec<u8>> = all.into_iter().collect();
    let expected: HashSet<Vec<u8>> = (0..SENDERS)
        .flat_map(|s| (0..PER_SENDER).map(move |i| format!("{s}:{i}").into_bytes()))
        .collect();
    assert_eq!(distinct, expected);
    let tx = bus.sender("q").await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!(
        (stats.waiting, stats.in_flight, stats.dead_letters),
        (0, 0, 0)
    );
}
