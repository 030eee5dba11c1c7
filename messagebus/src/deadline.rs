//! Deadlines on bus calls: no call on a bus waits forever.
//!
//! A connection that dies without saying so (a network cut that drops packets, a broker or
//! database that stops answering) leaves a call waiting for an answer that never comes: a
//! publisher confirm, a channel opening, a pooled connection, a statement. A worker waiting
//! on it is stuck for good. So every adapter hands out senders and receivers wrapped here
//! ([`DeadlineSender`], [`DeadlineReceiver`]), and every delivery they hand out carries a
//! wrapped acknowledger: each call (send, inspect, receive, acknowledge, release,
//! dead-letter, a batch settlement, a settlement by receipt) returns within the bus's call
//! deadline, a receive within its own wait plus the deadline. Adapters put the same deadline
//! on their [`Bus`](crate::Bus) calls with [`within`].
//!
//! A call that ran out returns [`BusError::Timeout`], which is retryable: what it was doing
//! may or may not have happened (a send may have reached the queue, an acknowledgement may
//! have landed), exactly as after a connection lost mid-call. Every bus is at least once, so
//! trying again is safe: a message sent twice is a duplicate, an acknowledgement lost brings
//! the message back after its visibility timeout.
//!
//! The deadline bounds the whole call, not one round trip: adapters keep their own shorter
//! timeouts per request (RabbitMQ's `request_timeout`, the SQS SDK's, the database pool's
//! acquire timeout), whose errors say more, and this one catches whatever has none.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::delivery::settle_all;
use crate::{
    Acknowledger, BatchSettler, BusError, DeadLetter, Delivery, QueueStats, ReceiptAction,
    Receiver, Sender, Settlement, SqlReceipt, Unsent,
};

/// How long one bus call may take, by default, before it returns [`BusError::Timeout`]: above
/// every adapter's own per-request timeouts (RabbitMQ 10 s a round trip, SQS 35 s a request
/// with its retries, a database pool 10 s to hand out a connection), so that their more
/// telling errors come first. A receive gets its wait on top.
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(60);

/// `call`'s own outcome, or [`BusError::Timeout`] once `deadline` has passed (`call` is
/// dropped then, as a caller that gave up would drop it).
pub(crate) async fn within<T>(
    deadline: Duration,
    call: impl Future<Output = Result<T, BusError>>,
) -> Result<T, BusError> {
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or(Err(BusError::Timeout(deadline)))
}

/// A [`Sender`] whose every call returns within the deadline.
pub(crate) struct DeadlineSender {
    inner: Arc<dyn Sender>,
    deadline: Duration,
}

impl DeadlineSender {
    /// `inner` with `deadline` on each call.
    pub(crate) fn wrap(inner: Arc<dyn Sender>, deadline: Duration) -> Arc<dyn Sender> {
        Arc::new(DeadlineSender { inner, deadline })
    }
}

#[async_trait]
impl Sender for DeadlineSender {
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
        within(self.deadline, self.inner.send_batch(bodies)).await
    }

    async fn send(&self, body: Vec<u8>) -> Result<(), BusError> {
        within(self.deadline, self.inner.send(body)).await
    }

    async fn inspect(&self) -> Result<QueueStats, BusError> {
        within(self.deadline, self.inner.inspect()).await
    }

    async fn waiting_at_least(&self, n: u64) -> Result<bool, BusError> {
        within(self.deadline, self.inner.waiting_at_least(n)).await
    }

    async fn peek_dead_letters(
        &self,
        limit: usize,
        max_body_bytes: usize,
    ) -> Result<Option<Vec<DeadLetter>>, BusError> {
        within(
            self.deadline,
            self.inner.peek_dead_letters(limit, max_body_bytes),
        )
        .await
    }

    /// A call that ran out is reported as a failed acknowledgement (`Ok(Err(Timeout))`): the
    /// delivery went with the call, whose bus releases it when it is dropped unsettled (or
    /// its visibility runs out), so the message comes back and is answered again, whether or
    /// not the send happened, as after any lost acknowledgement.
    async fn send_and_ack(
        &self,
        bodies: Vec<Vec<u8>>,
        answered: Delivery,
    ) -> Result<Result<(), BusError>, Unsent> {
        match tokio::time::timeout(self.deadline, self.inner.send_and_ack(bodies, answered)).await {
            Ok(outcome) => outcome,
            Err(_) => Ok(Err(BusError::Timeout(self.deadline))),
        }
    }

    fn queue(&self) -> &str {
        self.inner.queue()
    }

    fn sql_bus_id(&self) -> Option<&str> {
        self.inner.sql_bus_id()
    }
}

/// A [`Receiver`] whose every call returns within the deadline (a receive: its wait plus the
/// deadline), and whose deliveries settle within it.
pub(crate) struct DeadlineReceiver {
    inner: Arc<dyn Receiver>,
    deadline: Duration,
    /// The batch settler of every delivery this receiver hands out (see [`DeadlineSettler`]).
    settler: Arc<DeadlineSettler>,
}

impl DeadlineReceiver {
    /// `inner` with `deadline` on each call and on each of its deliveries' settlements.
    pub(crate) fn wrap(inner: Arc<dyn Receiver>, deadline: Duration) -> Arc<dyn Receiver> {
        Arc::new(DeadlineReceiver {
            inner,
            deadline,
            settler: Arc::new(DeadlineSettler { deadline }),
        })
    }
}

#[async_trait]
impl Receiver for DeadlineReceiver {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, BusError> {
        let limit = wait.saturating_add(self.deadline);
        let mut deliveries = within(limit, self.inner.receive(max, wait)).await?;
        for d in &mut deliveries {
            d.wrap_acker(|inner| {
                Box::new(DeadlineAcker {
                    inner,
                    deadline: self.deadline,
                    settler: Arc::clone(&self.settler),
                })
            });
        }
        Ok(deliveries)
    }

    fn queue(&self) -> &str {
        self.inner.queue()
    }

    async fn settle_receipt(&self, receipt: &str, action: ReceiptAction) -> Result<bool, BusError> {
        within(self.deadline, self.inner.settle_receipt(receipt, action)).await
    }
}

/// A delivery's acknowledger whose settlements return within the deadline; everything else
/// is its adapter's.
struct DeadlineAcker {
    inner: Box<dyn Acknowledger>,
    deadline: Duration,
    settler: Arc<DeadlineSettler>,
}

#[async_trait]
impl Acknowledger for DeadlineAcker {
    async fn ack(self: Box<Self>) -> Result<(), BusError> {
        within(self.deadline, self.inner.ack()).await
    }

    async fn release(self: Box<Self>) -> Result<(), BusError> {
        within(self.deadline, self.inner.release()).await
    }

    async fn dead_letter(self: Box<Self>, reason: &str) -> Result<(), BusError> {
        within(self.deadline, self.inner.dead_letter(reason)).await
    }

    fn sql_receipt(&self) -> Option<SqlReceipt> {
        self.inner.sql_receipt()
    }

    fn settled_elsewhere(self: Box<Self>) {
        self.inner.settled_elsewhere();
    }

    fn durable_receipt(&self) -> Option<String> {
        self.inner.durable_receipt()
    }

    fn abandoned(self: Box<Self>) {
        self.inner.abandoned();
    }

    /// The receiver's one settler, where the adapter settles in batches: so that the
    /// receiver's deliveries still go together (the adapter's own batches are formed again
    /// inside it).
    fn batch(&self) -> Option<Arc<dyn BatchSettler>> {
        self.inner
            .batch()
            .map(|_| Arc::clone(&self.settler) as Arc<dyn BatchSettler>)
    }

    fn into_any(self: Box<Self>) -> Option<Box<dyn Any + Send>> {
        Some(self)
    }

    fn stop_heartbeat(&mut self) {
        self.inner.stop_heartbeat();
    }
}

/// Settles a batch of one [`DeadlineReceiver`]'s deliveries as their adapter does (its own
/// batches, one call each), the whole within the deadline.
struct DeadlineSettler {
    deadline: Duration,
}

#[async_trait]
impl BatchSettler for DeadlineSettler {
    async fn settle(
        &self,
        how: Settlement,
        ackers: Vec<Box<dyn Any + Send>>,
    ) -> Vec<Result<(), BusError>> {
        let n = ackers.len();
        // Each acknowledger back in a delivery of its own adapter, for that adapter's
        // batches; nothing but the acknowledger counts in a settlement.
        let mut inner = Vec::with_capacity(n);
        for (i, a) in ackers.into_iter().enumerate() {
            // Anything else is answered below as not of this receiver.
            if let Ok(a) = a.downcast::<DeadlineAcker>() {
                let delivery = Delivery::new(Vec::new(), String::new(), 0, None, a.inner);
                inner.push((i, delivery));
            }
        }
        let (at, deliveries): (Vec<usize>, Vec<Delivery>) = inner.into_iter().unzip();
        let settled = match tokio::time::timeout(self.deadline, settle_all(deliveries, how)).await {
            Ok(out) => out,
            Err(_) => at
                .iter()
                .map(|_| Err(BusError::Timeout(self.deadline)))
                .collect(),
        };
        let mut out: Vec<Result<(), BusError>> = (0..n)
            .map(|_| {
                Err(BusError::Unsupported(
                    "not a delivery of this receiver".into(),
                ))
            })
            .collect();
        for (i, r) in at.into_iter().zip(settled) {
            out[i] = r;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use std::future::pending;

    use tokio::time::Instant;

    use super::*;
    use crate::ack_all;

    const DEADLINE: Duration = Duration::from_secs(5);

    /// A bus end whose broker never answers: every call waits forever.
    struct Hung;

    #[async_trait]
    impl Sender for Hung {
        async fn send_batch(&self, _: Vec<Vec<u8>>) -> Result<(), BusError> {
            pending().await
        }
        async fn inspect(&self) -> Result<QueueStats, BusError> {
            pending().await
        }
        async fn peek_dead_letters(
            &self,
            _: usize,
            _: usize,
        ) -> Result<Option<Vec<DeadLetter>>, BusError> {
            pending().await
        }
        fn queue(&self) -> &str {
            "hung"
        }
    }

    /// Hands out one delivery whose settlements (one by one or in a batch) never return.
    struct HungDeliveries {
        settler: Arc<HungSettler>,
    }

    struct HungSettler;

    #[async_trait]
    impl BatchSettler for HungSettler {
        async fn settle(
            &self,
            _: Settlement,
            _: Vec<Box<dyn Any + Send>>,
        ) -> Vec<Result<(), BusError>> {
            pending().await
        }
    }

    struct HungAcker {
        settler: Arc<HungSettler>,
    }

    #[async_trait]
    impl Acknowledger for HungAcker {
        async fn ack(self: Box<Self>) -> Result<(), BusError> {
            pending().await
        }
        async fn release(self: Box<Self>) -> Result<(), BusError> {
            pending().await
        }
        async fn dead_letter(self: Box<Self>, _: &str) -> Result<(), BusError> {
            pending().await
        }
        fn batch(&self) -> Option<Arc<dyn BatchSettler>> {
            Some(Arc::clone(&self.settler) as Arc<dyn BatchSettler>)
        }
        fn into_any(self: Box<Self>) -> Option<Box<dyn Any + Send>> {
            Some(self)
        }
    }

    #[async_trait]
    impl Receiver for HungDeliveries {
        async fn receive(&self, max: usize, _: Duration) -> Result<Vec<Delivery>, BusError> {
            if max == 0 {
                // A receive that never returns, not even after its wait.
                return pending().await;
            }
            let acker = Box::new(HungAcker {
                settler: Arc::clone(&self.settler),
            });
            Ok(vec![Delivery::new(
                b"x".to_vec(),
                "m".into(),
                1,
                None,
                acker,
            )])
        }
        fn queue(&self) -> &str {
            "hung"
        }
        async fn settle_receipt(&self, _: &str, _: ReceiptAction) -> Result<bool, BusError> {
            pending().await
        }
    }

    fn hung_receiver() -> Arc<dyn Receiver> {
        DeadlineReceiver::wrap(
            Arc::new(HungDeliveries {
                settler: Arc::new(HungSettler),
            }),
            DEADLINE,
        )
    }

    /// `outcome` is a timeout after exactly `after` of (paused) time since `start`.
    fn timed_out<T: std::fmt::Debug>(
        outcome: Result<T, BusError>,
        start: Instant,
        after: Duration,
    ) {
        match outcome {
            Err(e @ BusError::Timeout(d)) => {
                assert_eq!(d, after);
                assert!(e.is_retryable());
                assert_eq!(
                    e.to_string(),
                    format!("bus operation timed out after {after:?}")
                );
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        let took = start.elapsed();
        assert!(
            took >= after && took <= after + Duration::from_millis(1),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_sender_call_returns_at_its_deadline() {
        let tx = DeadlineSender::wrap(Arc::new(Hung), DEADLINE);
        let start = Instant::now();
        timed_out(tx.send(b"x".to_vec()).await, start, DEADLINE);
        let start = Instant::now();
        timed_out(tx.send_batch(vec![b"x".to_vec()]).await, start, DEADLINE);
        let start = Instant::now();
        timed_out(tx.inspect().await, start, DEADLINE);
        let start = Instant::now();
        timed_out(tx.waiting_at_least(1).await, start, DEADLINE);
        let start = Instant::now();
        timed_out(tx.peek_dead_letters(1, 1).await, start, DEADLINE);
        assert_eq!(tx.queue(), "hung");
    }

    #[tokio::test(start_paused = true)]
    async fn a_receive_returns_after_its_wait_and_the_deadline() {
        let rx = hung_receiver();
        let wait = Duration::from_secs(20);
        let start = Instant::now();
        timed_out(rx.receive(0, wait).await, start, wait + DEADLINE);
        let start = Instant::now();
        timed_out(
            rx.settle_receipt("r", ReceiptAction::Ack).await,
            start,
            DEADLINE,
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_settlement_returns_at_its_deadline() {
        let rx = hung_receiver();
        let wait = Duration::from_secs(1);
        for how in ["ack", "release", "dead_letter"] {
            let d = rx.receive(1, wait).await.unwrap().remove(0);
            let start = Instant::now();
            let outcome = match how {
                "ack" => d.ack().await,
                "release" => d.release().await,
                _ => d.dead_letter("poison").await,
            };
            timed_out(outcome, start, DEADLINE);
        }
        // A batch: the adapter's settler hangs; each delivery's outcome is the timeout.
        let mut batch = rx.receive(1, wait).await.unwrap();
        batch.extend(rx.receive(1, wait).await.unwrap());
        let start = Instant::now();
        let outcomes = ack_all(batch).await;
        assert_eq!(outcomes.len(), 2);
        for o in outcomes {
            timed_out(o, start, DEADLINE);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_send_and_ack_that_ran_out_reports_the_acknowledgement_failed() {
        let tx = DeadlineSender::wrap(Arc::new(Hung), DEADLINE);
        let answered = hung_receiver()
            .receive(1, Duration::from_secs(1))
            .await
            .unwrap()
            .remove(0);
        let start = Instant::now();
        match tx.send_and_ack(vec![b"y".to_vec()], answered).await {
            Ok(ack) => timed_out(ack, start, DEADLINE),
            Err(unsent) => panic!("expected a failed acknowledgement, got {:?}", unsent.error),
        }
    }
}
