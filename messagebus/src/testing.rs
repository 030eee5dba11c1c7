//! The bus conformance suite: one set of cases, written once, run by every adapter.
//!
//! An adapter's test file provides an `async fn(QueueSettings) -> Arc<dyn Bus>` that returns a
//! bus whose queues, once created with [`Bus::create_queue`], use those settings, and invokes
//! [`bus_conformance_tests!`](crate::bus_conformance_tests) with it:
//!
//! ```ignore
//! async fn fresh(settings: QueueSettings) -> Arc<dyn Bus> {
//!     Arc::new(MemoryBus::new(MemoryBusConfig {
//!         visibility_timeout: settings.visibility_timeout,
//!         max_receives: settings.max_receives,
//!         ..MemoryBusConfig::default()
//!     }))
//! }
//! messagebus::bus_conformance_tests!(fresh);
//! ```
//!
//! That generates a module `bus_conformance` with one `#[tokio::test]` per case (the calling
//! crate needs `tokio` with `macros` and `rt-multi-thread`). Each case creates its own queues
//! with a random suffix, so the cases can run in parallel against one server. Waits are
//! generous for a slow emulator but return as soon as the messages come, so a fast bus finishes
//! the suite in about two seconds. The suite does not assume FIFO order, nor exact consumer
//! counts from buses that cannot count consumers, and never sleeps to wait for work.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{
    ack_all as ack_batch, dead_letter_queue_name, release_all, Bus, BusError, Delivery,
    ReceiptAction, Receiver, Sender, MAX_BODY_BYTES,
};

/// Settings applied when a test's queues are created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    /// How long a received message stays invisible before it comes back.
    pub visibility_timeout: Duration,
    /// Receives after which a message goes to the dead-letter queue instead.
    pub max_receives: u32,
}

impl Default for QueueSettings {
    /// Long enough visibility that nothing comes back by itself during a case.
    fn default() -> Self {
        QueueSettings {
            visibility_timeout: Duration::from_secs(60),
            max_receives: 5,
        }
    }
}

/// Generates one `#[tokio::test]` per conformance case, in a module `bus_conformance`
/// (or the module named first: `bus_conformance_tests!(sqs_suite, fresh)`, to run the suite
/// twice in one file). `bus_conformance_tests!(module, fresh, lenient_receipts)` leaves out
/// [`stale_durable_receipts_settle_nothing`](crate::testing::stale_durable_receipts_settle_nothing),
/// for a test server that accepts stale receipts.
///
/// `$fresh` is a path to an `async fn(QueueSettings) -> std::sync::Arc<dyn messagebus::Bus>`,
/// resolved from the module that invokes the macro. See [`crate::testing`].
#[macro_export]
macro_rules! bus_conformance_tests {
    ($fresh:path) => {
        $crate::bus_conformance_tests!(bus_conformance, $fresh);
    };
    ($module:ident, $fresh:path) => {
        $crate::bus_conformance_tests!(@common $module, $fresh; stale_durable_receipts_settle_nothing);
    };
    // A server that accepts stale receipts (moto for SQS: see
    // `testing::stale_durable_receipts_settle_nothing`).
    ($module:ident, $fresh:path, lenient_receipts) => {
        $crate::bus_conformance_tests!(@common $module, $fresh;);
    };
    (@common $module:ident, $fresh:path; $($extra:ident),* $(,)?) => {
        $crate::bus_conformance_tests!(@cases $module, $fresh;
            round_trip,
            send_batch_many,
            receive_respects_max,
            waiting_receiver_gets_later_send,
            empty_queue_returns_empty,
            ack_removes,
            send_and_ack_answers,
            release_redelivers,
            visibility_timeout_redelivers,
            dead_letter_with_reason,
            peek_dead_letters_takes_nothing,
            max_receives_redrives,
            inspect_counts,
            consumers_counted,
            oversized_body_rejected,
            missing_queue,
            concurrent_receivers_no_duplicates,
            redrive_moves_dead_letters_back,
            redrive_counts_without_moving,
            redriven_message_starts_afresh,
            batch_ack_removes,
            batch_with_stale_settles_the_fresh,
            batch_release_redelivers,
            batch_of_part_settles_only_its_own,
            durable_receipts_settle_from_another_receiver,
            $($extra,)*
        );
    };
    (@cases $module:ident, $fresh:path; $($case:ident),* $(,)?) => {
        /// The bus conformance suite (`messagebus::testing`) for this adapter.
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    $crate::testing::$case($fresh).await;
                }
            )*
        }
    };
}

/// The longest any case waits for something that should happen; a failing case fails then.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The wait of one receive call inside a loop that returns as soon as messages come, and of a
/// receive that is expected to come back empty. Whole seconds, as SQS long polling counts them.
pub const SHORT_WAIT: Duration = Duration::from_secs(1);

/// A queue name unique to this run: `conf_<what>_<random hex>`.
pub fn unique_queue_name(what: &str) -> String {
    format!("conf_{what}_{:016x}", rand::random::<u64>())
}

/// A fresh bus with `settings` and one created queue, with its sender and receiver.
pub async fn setup<F, Fut>(
    fresh: F,
    settings: QueueSettings,
    what: &str,
) -> (Arc<dyn Bus>, String, Arc<dyn Sender>, Arc<dyn Receiver>)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let bus = fresh(settings).await;
    let queue = unique_queue_name(what);
    bus.create_queue(&queue).await.unwrap();
    let tx = bus.sender(&queue).await.unwrap();
    let rx = bus.receiver(&queue).await.unwrap();
    (bus, queue, tx, rx)
}

/// Receives until exactly `n` deliveries are in hand, failing after [`PATIENCE`].
/// Does not settle them.
pub async fn receive_n(rx: &dyn Receiver, n: usize) -> Vec<Delivery> {
    let mut got = Vec::with_capacity(n);
    let collect = async {
        while got.len() < n {
            let batch = rx
                .receive((n - got.len()).min(10), SHORT_WAIT)
                .await
                .unwrap();
            got.extend(batch);
        }
    };
    if tokio::time::timeout(PATIENCE, collect).await.is_err() {
        panic!(
            "received only {} of {n} messages within {PATIENCE:?}",
            got.len()
        );
    }
    got
}

/// Asserts that `call` fails with [`BusError::Timeout`] of `deadline`, returning no sooner
/// than `deadline` and no later than a few seconds after it: a call that could not finish
/// (a connection gone silent, a database that stops answering) returns by its deadline.
pub async fn assert_times_out<T>(
    what: &str,
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, BusError>>,
) {
    let slack = Duration::from_secs(5);
    let start = tokio::time::Instant::now();
    let outcome = tokio::time::timeout(deadline + slack, call).await;
    let took = start.elapsed();
    match outcome {
        Ok(Err(BusError::Timeout(d))) => {
            assert_eq!(d, deadline, "{what} timed out after another deadline");
            assert!(
                took >= deadline,
                "{what} gave up after {took:?}, before its deadline {deadline:?}"
            );
        }
        Ok(Ok(_)) => panic!("{what}: expected a timeout after {deadline:?}, it succeeded"),
        Ok(Err(e)) => panic!("{what}: expected a timeout after {deadline:?}, got: {e}"),
        Err(_) => panic!(
            "{what} did not return within {:?} of its deadline {deadline:?}",
            slack
        ),
    }
}

/// Asserts that a receive waiting [`SHORT_WAIT`] gets nothing.
pub async fn assert_empty(rx: &dyn Receiver) {
    let got = rx.receive(10, SHORT_WAIT).await.unwrap();
    assert!(got.is_empty(), "expected no message, got {got:?}");
}

/// Asserts that `inspect` counts (waiting, in flight, dead letters) as expected, within
/// [`PATIENCE`]: a broker may apply a settlement a moment after the call that made it
/// returned (RabbitMQ's quorum queues commit a returned message through their log first).
pub async fn assert_counts(tx: &dyn Sender, expected: (u64, u64, u64)) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let stats = tx.inspect().await.unwrap();
        let counts = (stats.waiting, stats.in_flight, stats.dead_letters);
        if counts == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "inspect counts (waiting, in flight, dead letters) {counts:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until [`Sender::waiting_at_least`] says exactly `waiting` messages wait: at least
/// that many, not one more. Fails after [`PATIENCE`].
pub async fn assert_waiting(tx: &dyn Sender, waiting: u64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let at_least = tx.waiting_at_least(waiting).await.unwrap();
        let more = tx.waiting_at_least(waiting + 1).await.unwrap();
        if at_least && !more {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waiting_at_least({waiting}) {at_least}, waiting_at_least({}) {more}",
            waiting + 1
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn body_set(deliveries: &[Delivery]) -> HashSet<Vec<u8>> {
    deliveries.iter().map(|d| d.body().to_vec()).collect()
}

async fn ack_all(deliveries: Vec<Delivery>) {
    for d in deliveries {
        d.ack().await.unwrap();
    }
}

/// A message comes back byte for byte, multi-byte UTF-8 included, on its first receive.
pub async fn round_trip<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "round_trip").await;
    assert_eq!(tx.queue(), queue);
    assert_eq!(rx.queue(), queue);
    let plain = br#"{"id":1,"title":"plain"}"#.to_vec();
    let utf8 = r#"{"title":"Čaj — 東京 🎧 ünïcödé"}"#.as_bytes().to_vec();
    tx.send(plain.clone()).await.unwrap();
    tx.send(utf8.clone()).await.unwrap();
    let got = receive_n(rx.as_ref(), 2).await;
    assert_eq!(body_set(&got), HashSet::from([plain, utf8]));
    for d in &got {
        assert_eq!(d.receive_count(), 1, "{d:?}");
        assert_eq!(d.dead_letter_reason(), None);
        assert!(!d.message_id().is_empty());
    }
    assert_ne!(got[0].message_id(), got[1].message_id());
    ack_all(got).await;
}

/// A batch larger than one SQS request (25 messages) arrives whole.
pub async fn send_batch_many<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "batch").await;
    // An empty batch sends nothing and is no error (SQS refuses empty batch requests).
    tx.send_batch(Vec::new()).await.unwrap();
    let bodies: Vec<Vec<u8>> = (0..25)
        .map(|i| format!("{{\"n\":{i}}}").into_bytes())
        .collect();
    tx.send_batch(bodies.clone()).await.unwrap();
    let got = receive_n(rx.as_ref(), 25).await;
    assert_eq!(body_set(&got), bodies.into_iter().collect());
    let ids: HashSet<&str> = got.iter().map(|d| d.message_id()).collect();
    assert_eq!(ids.len(), 25);
    ack_all(got).await;
    assert_empty(rx.as_ref()).await;
}

/// A receive hands out at most `max` messages.
pub async fn receive_respects_max<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "max").await;
    let bodies: Vec<Vec<u8>> = (0..5).map(|i| format!("m{i}").into_bytes()).collect();
    tx.send_batch(bodies).await.unwrap();
    let first = rx.receive(2, PATIENCE).await.unwrap();
    assert!(
        (1..=2).contains(&first.len()),
        "asked for 2, got {}",
        first.len()
    );
    let one = rx.receive(1, PATIENCE).await.unwrap();
    assert_eq!(one.len(), 1);
    let rest = receive_n(rx.as_ref(), 5 - first.len() - 1).await;
    let mut all = first;
    all.extend(one);
    all.extend(rest);
    assert_eq!(body_set(&all).len(), 5);
    ack_all(all).await;

    // Zero asks for nothing; more than a bus hands out at once (SQS: ten) is capped, not
    // refused.
    tx.send(b"one more".to_vec()).await.unwrap();
    assert!(rx.receive(0, SHORT_WAIT).await.unwrap().is_empty());
    let many = rx.receive(100, PATIENCE).await.unwrap();
    assert_eq!(many.len(), 1);
    ack_all(many).await;
}

/// A receiver already waiting gets a message sent while it waits, within its wait.
pub async fn waiting_receiver_gets_later_send<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "later").await;
    let waiting = tokio::spawn(async move { rx.receive(10, PATIENCE).await });
    // Most often the receiver is waiting by now; either order must deliver.
    tokio::task::yield_now().await;
    tx.send(b"late".to_vec()).await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].body(), b"late");
    ack_all(got).await;
}

/// A receive on an empty queue returns an empty vector once its wait is over.
pub async fn empty_queue_returns_empty<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, _tx, rx) = setup(fresh, QueueSettings::default(), "empty").await;
    let got = tokio::time::timeout(PATIENCE, rx.receive(10, SHORT_WAIT))
        .await
        .expect("receive must return once its wait is over")
        .unwrap();
    assert!(got.is_empty(), "{got:?}");
}

/// An acknowledged message is gone, even after its visibility timeout would have run out.
pub async fn ack_removes<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(1),
        ..QueueSettings::default()
    };
    let (_bus, _queue, tx, rx) = setup(fresh, settings, "ack").await;
    tx.send(b"ack me".to_vec()).await.unwrap();
    let got = receive_n(rx.as_ref(), 1).await;
    ack_all(got).await;
    // Two seconds is twice the visibility timeout: an unacknowledged message would be back.
    let again = rx.receive(10, Duration::from_secs(2)).await.unwrap();
    assert!(
        again.is_empty(),
        "acknowledged message came back: {again:?}"
    );
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
}

/// `send_and_ack` sends the answers and acknowledges the message they answer (another
/// queue's); a send that fails acknowledges nothing and gives the delivery back unsettled.
pub async fn send_and_ack_answers<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(1),
        ..QueueSettings::default()
    };
    let (bus, _queue, tx, rx) = setup(fresh, settings, "question").await;
    let answers = unique_queue_name("answers");
    bus.create_queue(&answers).await.unwrap();
    let answers_tx = bus.sender(&answers).await.unwrap();
    let answers_rx = bus.receiver(&answers).await.unwrap();
    tx.send(b"question 1".to_vec()).await.unwrap();
    let question = receive_n(rx.as_ref(), 1).await.remove(0);
    answers_tx
        .send_and_ack(vec![b"answer a".to_vec(), b"answer b".to_vec()], question)
        .await
        .unwrap()
        .unwrap();
    // Two seconds is twice the visibility timeout: an unacknowledged question would be back.
    let again = rx.receive(10, Duration::from_secs(2)).await.unwrap();
    assert!(again.is_empty(), "answered message came back: {again:?}");
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
    let got = receive_n(answers_rx.as_ref(), 2).await;
    assert_eq!(
        body_set(&got),
        HashSet::from([b"answer a".to_vec(), b"answer b".to_vec()])
    );
    ack_all(got).await;

    tx.send(b"question 2".to_vec()).await.unwrap();
    let question = receive_n(rx.as_ref(), 1).await.remove(0);
    let big = vec![b'x'; MAX_BODY_BYTES + 1];
    let unsent = answers_tx
        .send_and_ack(vec![b"small".to_vec(), big], question)
        .await
        .unwrap_err();
    assert!(
        matches!(unsent.error, BusError::BodyTooLarge { .. }),
        "{:?}",
        unsent.error
    );
    assert_eq!(unsent.delivery.body(), b"question 2");
    unsent.delivery.release().await.unwrap();
    let back = receive_n(rx.as_ref(), 1).await;
    assert_eq!(back[0].body(), b"question 2");
    ack_all(back).await;
    assert_empty(answers_rx.as_ref()).await;
}

/// A released message comes back at once, same id and body, with receive count 2.
pub async fn release_redelivers<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "release").await;
    tx.send(b"release me".to_vec()).await.unwrap();
    let mut got = receive_n(rx.as_ref(), 1).await;
    let first = got.remove(0);
    assert_eq!(first.receive_count(), 1);
    let id = first.message_id().to_owned();
    first.release().await.unwrap();
    let mut again = receive_n(rx.as_ref(), 1).await;
    let second = again.remove(0);
    assert_eq!(second.message_id(), id);
    assert_eq!(second.body(), b"release me");
    assert_eq!(second.receive_count(), 2);
    second.ack().await.unwrap();
}

/// A delivery neither acknowledged nor released comes back once its visibility runs out.
pub async fn visibility_timeout_redelivers<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(1),
        ..QueueSettings::default()
    };
    let (_bus, _queue, tx, rx) = setup(fresh, settings, "visibility").await;
    tx.send(b"forget me".to_vec()).await.unwrap();
    let mut got = receive_n(rx.as_ref(), 1).await;
    let first = got.remove(0);
    let id = first.message_id().to_owned();
    first.let_expire();
    // receive_n waits in receive calls; the message returns after about one second.
    let mut again = receive_n(rx.as_ref(), 1).await;
    let second = again.remove(0);
    assert_eq!(second.message_id(), id);
    assert_eq!(second.body(), b"forget me");
    assert_eq!(second.receive_count(), 2);
    second.ack().await.unwrap();
}

/// `dead_letter` moves the message to the dead-letter queue, where it carries the reason.
pub async fn dead_letter_with_reason<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "dead_letter").await;
    tx.send(b"{not json".to_vec()).await.unwrap();
    let mut got = receive_n(rx.as_ref(), 1).await;
    let d = got.remove(0);
    let reason = "invalid JSON: expected value at line 1 column 2 — «poison»";
    d.dead_letter(reason).await.unwrap();
    assert_empty(rx.as_ref()).await;
    assert_counts(tx.as_ref(), (0, 0, 1)).await;

    let dlq = bus.receiver(&dead_letter_queue_name(&queue)).await.unwrap();
    let mut dead = receive_n(dlq.as_ref(), 1).await;
    let d = dead.remove(0);
    assert_eq!(d.body(), b"{not json");
    assert_eq!(d.dead_letter_reason(), Some(reason));
    d.ack().await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!(stats.dead_letters, 0);
}

/// `peek_dead_letters` shows dead letters with their reasons and takes none: they are still
/// counted and still received afterwards. A bus that cannot look (`None`) still counts them.
pub async fn peek_dead_letters_takes_nothing<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "peek").await;
    let empty = tx.peek_dead_letters(10, 1 << 20).await.unwrap();
    assert!(empty.as_ref().is_none_or(Vec::is_empty), "{empty:?}");
    let poison: HashMap<Vec<u8>, String> = HashMap::from([
        (b"{not json".to_vec(), "invalid JSON «one»".to_string()),
        (
            "ünïcödé".as_bytes().to_vec(),
            "invalid JSON two".to_string(),
        ),
    ]);
    tx.send_batch(poison.keys().cloned().collect())
        .await
        .unwrap();
    for d in receive_n(rx.as_ref(), 2).await {
        let reason = poison[d.body()].clone();
        d.dead_letter(&reason).await.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 0, 2)).await;

    // SQS shows a sample at each look: look until every one was seen.
    let mut seen: HashMap<Vec<u8>, Option<String>> = HashMap::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut looks = 0;
    while seen.len() < 2 {
        let Some(letters) = tx.peek_dead_letters(10, 1 << 20).await.unwrap() else {
            break;
        };
        looks += 1;
        assert!(letters.len() <= 2, "{letters:?}");
        for l in letters {
            seen.insert(l.body, l.reason);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "saw {} of 2 dead letters in {looks} looks",
            seen.len()
        );
    }
    if looks > 0 {
        for (body, reason) in &seen {
            assert_eq!(reason.as_deref(), Some(poison[body].as_str()));
        }
        let one = tx.peek_dead_letters(1, 1 << 20).await.unwrap().unwrap();
        assert!(one.len() <= 1, "{one:?}");
        // Bodies cut to what was asked, their whole size said.
        let cut = tx.peek_dead_letters(10, 3).await.unwrap().unwrap();
        for l in &cut {
            assert_eq!(l.body.len(), 3, "{l:?}");
            assert!(
                poison
                    .keys()
                    .any(|b| b.len() == l.body_bytes && b.starts_with(&l.body)),
                "{l:?}"
            );
        }
    }
    // Nothing was taken: the counts, and a receive of the dead-letter queue, find both.
    assert_counts(tx.as_ref(), (0, 0, 2)).await;
    let dlq = bus.receiver(&dead_letter_queue_name(&queue)).await.unwrap();
    let dead = receive_n(dlq.as_ref(), 2).await;
    for d in dead {
        assert_eq!(d.dead_letter_reason(), Some(poison[d.body()].as_str()));
        d.ack().await.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
}

/// A message received `max_receives` times and released each time goes to the dead-letter
/// queue instead of being delivered again.
pub async fn max_receives_redrives<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let settings = QueueSettings {
        max_receives: 2,
        ..QueueSettings::default()
    };
    let (bus, queue, tx, rx) = setup(fresh, settings, "redrive").await;
    tx.send(b"keeps failing".to_vec()).await.unwrap();
    for n in 1..=2 {
        let mut got = receive_n(rx.as_ref(), 1).await;
        let d = got.remove(0);
        assert_eq!(d.receive_count(), n);
        d.release().await.unwrap();
    }
    // The third receive finds the message over its limit and moves it aside.
    assert_empty(rx.as_ref()).await;
    let dlq = bus.receiver(&dead_letter_queue_name(&queue)).await.unwrap();
    let mut dead = receive_n(dlq.as_ref(), 1).await;
    let d = dead.remove(0);
    assert_eq!(d.body(), b"keeps failing");
    d.ack().await.unwrap();
}

/// `inspect` counts waiting, in-flight and dead-lettered messages; `waiting_at_least` agrees
/// with its waiting count.
pub async fn inspect_counts<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "inspect").await;
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
    assert_waiting(tx.as_ref(), 0).await;
    let bodies: Vec<Vec<u8>> = (0..5).map(|i| format!("i{i}").into_bytes()).collect();
    tx.send_batch(bodies).await.unwrap();
    assert_counts(tx.as_ref(), (5, 0, 0)).await;
    assert_waiting(tx.as_ref(), 5).await;

    let mut got = receive_n(rx.as_ref(), 2).await;
    assert_counts(tx.as_ref(), (3, 2, 0)).await;
    assert_waiting(tx.as_ref(), 3).await;

    got.pop().unwrap().ack().await.unwrap();
    assert_counts(tx.as_ref(), (3, 1, 0)).await;

    got.pop()
        .unwrap()
        .dead_letter("inspect case")
        .await
        .unwrap();
    assert_counts(tx.as_ref(), (3, 0, 1)).await;

    // Held (a delivery dropped unsettled may be released in the background).
    let mut rest = receive_n(rx.as_ref(), 3).await;
    rest.pop().unwrap().release().await.unwrap();
    assert_counts(tx.as_ref(), (1, 2, 1)).await;
    for d in rest {
        d.ack().await.unwrap();
    }
}

/// Consumers are either not counted (`None`) or counted exactly: one per live receiver.
pub async fn consumers_counted<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "consumers").await;
    let Some(one) = tx.inspect().await.unwrap().consumers else {
        return;
    };
    assert_eq!(one, 1);
    let rx2 = bus.receiver(&queue).await.unwrap();
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(2));
    // A receiver of the dead-letter queue is not a consumer of the queue.
    let dlq = bus.receiver(&dead_letter_queue_name(&queue)).await.unwrap();
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(2));
    drop(rx);
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(1));
    drop(rx2);
    assert_eq!(tx.inspect().await.unwrap().consumers, Some(0));
    drop(dlq);
}

/// A body over [`MAX_BODY_BYTES`] is refused with `BodyTooLarge`, and a batch holding one
/// sends nothing.
pub async fn oversized_body_rejected<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "oversized").await;
    let big = vec![b'x'; MAX_BODY_BYTES + 1];
    match tx.send(big.clone()).await {
        Err(BusError::BodyTooLarge { size, limit }) => {
            assert_eq!(size, MAX_BODY_BYTES + 1);
            assert_eq!(limit, MAX_BODY_BYTES);
        }
        other => panic!("expected BodyTooLarge, got {other:?}"),
    }
    match tx.send_batch(vec![b"small".to_vec(), big]).await {
        Err(BusError::BodyTooLarge { .. }) => {}
        other => panic!("expected BodyTooLarge, got {other:?}"),
    }
    assert_empty(rx.as_ref()).await;
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}

/// Senders and receivers of a queue that was never created fail with `QueueNotFound`.
pub async fn missing_queue<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let bus = fresh(QueueSettings::default()).await;
    let queue = unique_queue_name("missing");
    match bus.sender(&queue).await {
        Err(BusError::QueueNotFound(name)) => assert_eq!(name, queue),
        Err(other) => panic!("expected QueueNotFound, got {other:?}"),
        Ok(_) => panic!("expected QueueNotFound, got a sender"),
    }
    match bus.receiver(&queue).await {
        Err(BusError::QueueNotFound(name)) => assert_eq!(name, queue),
        Err(other) => panic!("expected QueueNotFound, got {other:?}"),
        Ok(_) => panic!("expected QueueNotFound, got a receiver"),
    }
    // create_queue twice is harmless, and creates the dead-letter queue too.
    bus.create_queue(&queue).await.unwrap();
    bus.create_queue(&queue).await.unwrap();
    bus.sender(&queue).await.unwrap();
    bus.receiver(&dead_letter_queue_name(&queue)).await.unwrap();
}

/// Many receivers at once never hold the same message while it is invisible, and between
/// them receive every message.
pub async fn concurrent_receivers_no_duplicates<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    const MESSAGES: usize = 40;
    const RECEIVERS: usize = 6;
    let (bus, queue, tx, _rx) = setup(fresh, QueueSettings::default(), "concurrent").await;
    let bodies: Vec<Vec<u8>> = (0..MESSAGES)
        .map(|i| format!("c{i}").into_bytes())
        .collect();
    tx.send_batch(bodies.clone()).await.unwrap();

    let seen: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..RECEIVERS {
        let rx = bus.receiver(&queue).await.unwrap();
        let seen = Arc::clone(&seen);
        let count = Arc::clone(&count);
        tasks.push(tokio::spawn(async move {
            // Held, not settled, so each stays invisible until the end of the case.
            let mut held = Vec::new();
            while count.load(Ordering::SeqCst) < MESSAGES {
                let got = rx.receive(3, SHORT_WAIT).await.unwrap();
                for d in got {
                    let previous = seen
                        .lock()
                        .unwrap()
                        .insert(d.message_id().to_owned(), d.body().to_vec());
                    assert!(previous.is_none(), "message {d:?} handed out twice");
                    count.fetch_add(1, Ordering::SeqCst);
                    held.push(d);
                }
            }
            held
        }));
    }
    let mut held = Vec::new();
    let all = async {
        for t in tasks {
            held.extend(t.await.unwrap());
        }
    };
    if tokio::time::timeout(PATIENCE * 2, all).await.is_err() {
        panic!("receivers did not get all {MESSAGES} messages in time");
    }
    assert_eq!(held.len(), MESSAGES);
    let got: HashSet<Vec<u8>> = seen.lock().unwrap().values().cloned().collect();
    assert_eq!(got, bodies.into_iter().collect());
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, MESSAGES as u64));
    ack_all(held).await;
}

/// Sends `bodies`, receives them and dead-letters each with `reason`; returns once the
/// dead-letter queue counts them.
pub async fn dead_letter_all(
    tx: &dyn Sender,
    rx: &dyn Receiver,
    bodies: Vec<Vec<u8>>,
    reason: &str,
) {
    let n = bodies.len();
    tx.send_batch(bodies).await.unwrap();
    for d in receive_n(rx, n).await {
        d.dead_letter(reason).await.unwrap();
    }
    assert_counts(tx, (0, 0, n as u64)).await;
}

/// Waits until [`Bus::redrivable`] says `n` (a broker may count a settlement a moment late),
/// failing after [`PATIENCE`].
pub async fn assert_redrivable(bus: &dyn Bus, queue: &str, n: u64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = bus.redrivable(queue).await.unwrap();
        if got == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "redrivable dead letters of {queue}: {got}, expected {n}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Redrives until `n` messages moved, each call asked for what is left and moving no more
/// (a bus may move one batch a call); fails after [`PATIENCE`].
pub async fn redrive_n(bus: &dyn Bus, queue: &str, n: u64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut moved = 0;
    while moved < n {
        let left = n - moved;
        let step = bus.redrive(queue, left).await.unwrap();
        assert!(step <= left, "asked to move {left}, moved {step}");
        moved += step;
        assert!(
            tokio::time::Instant::now() < deadline,
            "redrove only {moved} of {n} within {PATIENCE:?}"
        );
    }
}

/// Redrives until a call moves nothing; returns how many moved in all.
pub async fn redrive_all(bus: &dyn Bus, queue: &str) -> u64 {
    let mut moved = 0;
    loop {
        let step = bus.redrive(queue, 1_000).await.unwrap();
        if step == 0 {
            return moved;
        }
        moved += step;
    }
}

/// Dead letters go back to their queue: at most as many as asked, their bodies intact, each
/// received as new (receive count 1, no reason), and none left behind or moved twice.
pub async fn redrive_moves_dead_letters_back<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "redrive_back").await;
    let bodies: Vec<Vec<u8>> = (0..5)
        .map(|i| format!(r#"{{"n":{i},"title":"Čaj — 東京 🎧"}}"#).into_bytes())
        .collect();
    dead_letter_all(
        tx.as_ref(),
        rx.as_ref(),
        bodies.clone(),
        "poison before the fix",
    )
    .await;
    assert_redrivable(bus.as_ref(), &queue, 5).await;

    redrive_n(bus.as_ref(), &queue, 2).await;
    assert_counts(tx.as_ref(), (2, 0, 3)).await;
    let mut got = receive_n(rx.as_ref(), 2).await;
    redrive_n(bus.as_ref(), &queue, 3).await;
    assert_eq!(
        bus.redrive(&queue, 10).await.unwrap(),
        0,
        "nothing is left to move"
    );
    got.extend(receive_n(rx.as_ref(), 3).await);
    assert_eq!(body_set(&got), bodies.into_iter().collect());
    for d in &got {
        assert_eq!(d.receive_count(), 1, "{d:?}");
        assert_eq!(d.dead_letter_reason(), None, "{d:?}");
    }
    ack_all(got).await;
    assert_empty(rx.as_ref()).await;
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
    assert_eq!(bus.redrivable(&queue).await.unwrap(), 0);
}

/// `redrivable` counts the waiting dead letters and moves nothing (what `--dry-run` shows);
/// a dead letter a reader holds is neither counted nor moved; a queue that does not exist
/// is `QueueNotFound`.
pub async fn redrive_counts_without_moving<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "redrive_count").await;
    let bodies: Vec<Vec<u8>> = (0..3).map(|i| format!("dry{i}").into_bytes()).collect();
    dead_letter_all(tx.as_ref(), rx.as_ref(), bodies, "poison").await;
    assert_redrivable(bus.as_ref(), &queue, 3).await;
    assert_eq!(bus.redrivable(&queue).await.unwrap(), 3);
    assert_counts(tx.as_ref(), (0, 0, 3)).await;
    assert_empty(rx.as_ref()).await;

    let dlq = bus.receiver(&dead_letter_queue_name(&queue)).await.unwrap();
    let held = receive_n(dlq.as_ref(), 1).await;
    assert_redrivable(bus.as_ref(), &queue, 2).await;
    assert_eq!(redrive_all(bus.as_ref(), &queue).await, 2);
    let back = receive_n(rx.as_ref(), 2).await;
    assert!(
        !body_set(&back).contains(held[0].body()),
        "a held dead letter was moved"
    );
    ack_all(back).await;
    ack_all(held).await;
    assert_empty(rx.as_ref()).await;
    assert_counts(tx.as_ref(), (0, 0, 0)).await;

    let missing = unique_queue_name("missing");
    match bus.redrive(&missing, 1).await {
        Err(BusError::QueueNotFound(_)) => {}
        other => panic!("expected QueueNotFound, got {other:?}"),
    }
    match bus.redrivable(&missing).await {
        Err(BusError::QueueNotFound(_)) => {}
        other => panic!("expected QueueNotFound, got {other:?}"),
    }
}

/// A message dead-lettered for going over its receive limit comes back with its count
/// started again: one more failure releases it, it is not dead-lettered at once.
pub async fn redriven_message_starts_afresh<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let settings = QueueSettings {
        max_receives: 2,
        ..QueueSettings::default()
    };
    let (bus, queue, tx, rx) = setup(fresh, settings, "redrive_afresh").await;
    tx.send(b"failed twice".to_vec()).await.unwrap();
    for _ in 1..=2 {
        receive_n(rx.as_ref(), 1)
            .await
            .remove(0)
            .release()
            .await
            .unwrap();
    }
    assert_empty(rx.as_ref()).await;
    assert_redrivable(bus.as_ref(), &queue, 1).await;
    assert_eq!(redrive_all(bus.as_ref(), &queue).await, 1);
    let first = receive_n(rx.as_ref(), 1).await.remove(0);
    assert_eq!(first.body(), b"failed twice");
    assert_eq!(first.receive_count(), 1);
    assert_eq!(first.dead_letter_reason(), None);
    first.release().await.unwrap();
    let second = receive_n(rx.as_ref(), 1).await.remove(0);
    assert_eq!(second.receive_count(), 2);
    second.ack().await.unwrap();
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
}

/// A batch acknowledged in one call ([`crate::ack_all`]) is gone, every outcome `Ok`.
pub async fn batch_ack_removes<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "batch_ack").await;
    let bodies: Vec<Vec<u8>> = (0..25).map(|i| format!("b{i}").into_bytes()).collect();
    tx.send_batch(bodies.clone()).await.unwrap();
    let got = receive_n(rx.as_ref(), 25).await;
    assert_eq!(body_set(&got), bodies.into_iter().collect());
    let outcomes = ack_batch(got).await;
    assert_eq!(outcomes.len(), 25);
    for out in outcomes {
        out.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
    assert_empty(rx.as_ref()).await;
    // An empty batch settles nothing and is no error.
    assert!(ack_batch(Vec::new()).await.is_empty());
}

/// A batch holding a stale delivery (its visibility ran out and the message was received
/// again) settles the fresh ones and reports the stale one as [`BusError::Stale`], in its
/// place; the message stays with its new delivery, which settles it.
pub async fn batch_with_stale_settles_the_fresh<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(3),
        ..QueueSettings::default()
    };
    let (_bus, _queue, tx, rx) = setup(fresh, settings, "batch_stale").await;
    tx.send(b"held too long".to_vec()).await.unwrap();
    let mut old = receive_n(rx.as_ref(), 1).await.remove(0);
    // Its holder hangs: nothing extends it, and it comes back after the visibility timeout.
    old.stop_heartbeat();
    let new = receive_n(rx.as_ref(), 1).await.remove(0);
    assert_eq!(new.message_id(), old.message_id());
    assert_eq!(new.receive_count(), 2);

    let bodies: Vec<Vec<u8>> = (0..3).map(|i| format!("fresh{i}").into_bytes()).collect();
    tx.send_batch(bodies).await.unwrap();
    let mut batch = receive_n(rx.as_ref(), 3).await;
    let stale_id = old.message_id().to_owned();
    batch.insert(1, old);
    let outcomes = ack_batch(batch).await;
    assert_eq!(outcomes.len(), 4);
    match &outcomes[1] {
        Err(BusError::Stale { message_id }) => assert_eq!(message_id, &stale_id),
        other => panic!("expected the stale delivery reported as Stale, got {other:?}"),
    }
    for (i, out) in outcomes.iter().enumerate() {
        if i != 1 {
            assert!(out.is_ok(), "a fresh delivery failed to settle: {out:?}");
        }
    }
    // The fresh ones are gone; the message the stale one held is still in flight.
    assert_counts(tx.as_ref(), (0, 1, 0)).await;
    for out in ack_batch(vec![new]).await {
        out.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
}

/// A batch released in one call ([`crate::release_all`]) is visible again at once, each
/// message received again with its receive count 2.
pub async fn batch_release_redelivers<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "batch_release").await;
    let bodies: Vec<Vec<u8>> = (0..12).map(|i| format!("r{i}").into_bytes()).collect();
    tx.send_batch(bodies.clone()).await.unwrap();
    let got = receive_n(rx.as_ref(), 12).await;
    for out in release_all(got).await {
        out.unwrap();
    }
    let again = receive_n(rx.as_ref(), 12).await;
    assert_eq!(body_set(&again), bodies.into_iter().collect());
    for d in &again {
        assert_eq!(d.receive_count(), 2, "{d:?}");
    }
    for out in ack_batch(again).await {
        out.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
}

/// Batches that settle only part of what one receiver holds settle exactly their own
/// deliveries: the later half first (RabbitMQ must not acknowledge up to its highest tag,
/// which would take the earlier ones held beside it), then the oldest two (where it may),
/// then a release of the rest, which come back.
pub async fn batch_of_part_settles_only_its_own<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (_bus, _queue, tx, rx) = setup(fresh, QueueSettings::default(), "batch_part").await;
    let bodies: Vec<Vec<u8>> = (0..10).map(|i| format!("p{i}").into_bytes()).collect();
    tx.send_batch(bodies).await.unwrap();
    let mut got = receive_n(rx.as_ref(), 10).await;
    let later = got.split_off(5);
    let mut earlier = got;
    for out in ack_batch(later).await {
        out.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 5, 0)).await;

    let rest = earlier.split_off(2);
    for out in ack_batch(earlier).await {
        out.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 3, 0)).await;

    let released = body_set(&rest);
    for out in release_all(rest).await {
        out.unwrap();
    }
    let again = receive_n(rx.as_ref(), 3).await;
    assert_eq!(body_set(&again), released);
    for d in &again {
        assert_eq!(d.receive_count(), 2, "{d:?}");
    }
    assert_empty(rx.as_ref()).await;
    for out in ack_batch(again).await {
        out.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
}

/// Durable receipts ([`Delivery::durable_receipt`]): where a bus has them, a delivery handed
/// over by its receipt is extended, released and acknowledged through another receiver of the
/// queue (another process, after a restart); a settled or made-up receipt settles nothing, nor
/// does a receipt offered to a receiver of another queue. A bus without them says so on both
/// sides: no receipt, and [`Receiver::settle_receipt`] unsupported.
pub async fn durable_receipts_settle_from_another_receiver<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(2),
        ..QueueSettings::default()
    };
    let (bus, queue, tx, rx) = setup(fresh, settings, "receipts").await;
    tx.send(b"held by receipt".to_vec()).await.unwrap();
    let first = receive_n(rx.as_ref(), 1).await.remove(0);
    let Some(receipt) = first.durable_receipt() else {
        let e = rx
            .settle_receipt("1.1", ReceiptAction::Ack)
            .await
            .unwrap_err();
        assert!(matches!(e, BusError::Unsupported(_)), "{e:?}");
        first.ack().await.unwrap();
        return;
    };
    let id = first.message_id().to_owned();
    // Handed over: this process's heartbeat lets go of it.
    first.let_expire();
    let other = bus.receiver(&queue).await.unwrap();
    // Extended well past the queue's visibility: it does not come back by itself meanwhile.
    assert!(other
        .settle_receipt(&receipt, ReceiptAction::Extend(Duration::from_secs(60)))
        .await
        .unwrap());
    assert!(rx
        .receive(1, settings.visibility_timeout * 2)
        .await
        .unwrap()
        .is_empty());
    // Made-up receipts settle nothing, and are no error.
    let long = "7".repeat(100_000);
    for made_up in [
        "",
        "nonsense",
        "1.2.3",
        &format!("{receipt}0"),
        &long,
        "a\u{0}b",
        "é.1",
        "../../x",
    ] {
        for action in [ReceiptAction::Ack, ReceiptAction::Release] {
            assert!(
                !other.settle_receipt(made_up, action).await.unwrap(),
                "{action:?} by {:?}",
                made_up.chars().take(40).collect::<String>()
            );
        }
    }
    // A receiver of another queue cannot be made to settle it.
    let elsewhere = unique_queue_name("receipts_elsewhere");
    bus.create_queue(&elsewhere).await.unwrap();
    let foreign = bus.receiver(&elsewhere).await.unwrap();
    for action in [
        ReceiptAction::Release,
        ReceiptAction::Ack,
        ReceiptAction::Extend(Duration::from_secs(60)),
    ] {
        assert!(
            !foreign.settle_receipt(&receipt, action).await.unwrap(),
            "{action:?} through another queue's receiver"
        );
    }
    assert!(rx.receive(1, SHORT_WAIT).await.unwrap().is_empty());
    // Released by receipt: back at once, under a new receipt.
    assert!(other
        .settle_receipt(&receipt, ReceiptAction::Release)
        .await
        .unwrap());
    let second = receive_n(rx.as_ref(), 1).await.remove(0);
    assert_eq!(second.message_id(), id);
    // Acknowledged by the new receipt: gone; acknowledging again finds nothing.
    let fresh_receipt = second.durable_receipt().unwrap();
    assert_ne!(fresh_receipt, receipt);
    second.let_expire();
    assert!(other
        .settle_receipt(&fresh_receipt, ReceiptAction::Ack)
        .await
        .unwrap());
    for action in [
        ReceiptAction::Ack,
        ReceiptAction::Extend(Duration::from_secs(60)),
        ReceiptAction::Release,
    ] {
        assert!(
            !other.settle_receipt(&fresh_receipt, action).await.unwrap(),
            "{action:?} after the acknowledgement"
        );
    }
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
    let stats = bus
        .sender(&elsewhere)
        .await
        .unwrap()
        .inspect()
        .await
        .unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}

/// A durable receipt whose message was handed out again since (released by it, then received
/// anew) settles nothing: it cannot extend, release or acknowledge the new holder's delivery.
///
/// Not run on SQS: moto, the test server, accepts every receipt handle a message ever had;
/// SQS itself refuses a visibility change by a receipt handle whose visibility ran out, which
/// the SQS adapter's `settle_receipt` asks before every action.
pub async fn stale_durable_receipts_settle_nothing<F, Fut>(fresh: F)
where
    F: FnOnce(QueueSettings) -> Fut,
    Fut: Future<Output = Arc<dyn Bus>>,
{
    let (bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "stale_receipts").await;
    tx.send(b"held by receipt".to_vec()).await.unwrap();
    let first = receive_n(rx.as_ref(), 1).await.remove(0);
    let Some(receipt) = first.durable_receipt() else {
        first.ack().await.unwrap();
        return;
    };
    first.let_expire();
    let other = bus.receiver(&queue).await.unwrap();
    assert!(other
        .settle_receipt(&receipt, ReceiptAction::Release)
        .await
        .unwrap());
    let second = receive_n(rx.as_ref(), 1).await.remove(0);
    for action in [
        ReceiptAction::Extend(Duration::from_secs(60)),
        ReceiptAction::Ack,
        ReceiptAction::Release,
    ] {
        assert!(
            !other.settle_receipt(&receipt, action).await.unwrap(),
            "{action:?} by a stale receipt"
        );
    }
    // Still the second delivery's: not back, and it settles.
    assert!(rx.receive(1, SHORT_WAIT).await.unwrap().is_empty());
    second.ack().await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}
