//! Message bus traits for archivist, and their adapters.
//!
//! A bus is a set of named queues. Each queue has a dead-letter queue named after it with
//! `_dead_letter` appended. Producers hold a [`Sender`]; consumers hold a [`Receiver`] and get
//! [`Delivery`] values, each of which carries its own acknowledgement: [`Delivery::ack`],
//! [`Delivery::release`] (retry later) or [`Delivery::dead_letter`] (set aside with a reason).
//!
//! A message sent, received and acknowledged on the in-process [`MemoryBus`]; every adapter
//! behaves the same (the conformance suite holds them to it):
//!
//! ```
//! use std::time::Duration;
//! use messagebus::{Bus, MemoryBus, MemoryBusConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), messagebus::BusError> {
//! let bus = MemoryBus::new(MemoryBusConfig::default());
//! bus.create_queue("greetings").await?;
//! let sender = bus.sender("greetings").await?;
//! sender.send(b"hello".to_vec()).await?;
//!
//! let receiver = bus.receiver("greetings").await?;
//! let mut deliveries = receiver.receive(10, Duration::from_secs(1)).await?;
//! assert_eq!(deliveries.len(), 1);
//! let delivery = deliveries.remove(0);
//! assert_eq!(delivery.body(), b"hello");
//! assert_eq!(delivery.receive_count(), 1);
//! delivery.ack().await?; // gone for good; `release` would put it back
//!
//! let stats = sender.inspect().await?;
//! assert_eq!((stats.waiting, stats.in_flight, stats.dead_letters), (0, 0, 0));
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - `bus.rs`: the [`Bus`], [`Sender`] and [`Receiver`] traits, [`QueueStats`] and
//!   [`DeadLetter`] (what [`Sender::peek_dead_letters`] shows).
//! - `deadline.rs`: the deadline on every bus call ([`DEFAULT_CALL_DEADLINE`]): the
//!   wrappers every adapter puts around the senders, receivers and deliveries it hands out.
//! - `delivery.rs`: [`Delivery`] and the [`Acknowledger`] trait adapters implement for it;
//!   [`ack_all`] and [`release_all`], a batch settled in one call per bus ([`BatchSettler`]).
//! - `error.rs`: [`BusError`] and its [`BusError::is_retryable`] classification.
//! - `fail_point.rs`: test-only points where a process stops or pauses (feature `fail-points`).
//! - `memory.rs`: [`MemoryBus`], an in-process bus that behaves like a real queue
//!   (visibility timeout, receive counts, redrive to the dead-letter queue, consumer count).
//! - `sql/` (features `postgres`, `sqlite`): the database bus, queues as rows in the
//!   datastore's own database (`sql::PgBus`, `sql::SqliteBus`).
//! - `rabbitmq/` (feature `rabbitmq`): the RabbitMQ adapter on `lapin`: quorum queues with
//!   the receive limit in the broker, a standing consumer per receiver, publisher confirms.
//! - `sqs/` (feature `sqs`): the Amazon SQS adapter on `aws-sdk-sqs`.
//! - `api/` (feature `api`): the API bus, a remote participant's way to the queues through
//!   `archivist serve --api` with a token (`api::ApiBus`); `api::fake` (feature `api-fake`)
//!   a fake gateway for tests.
//! - `testing.rs` (feature `test-utils`): the conformance suite every adapter runs.
//! - `url.rs`: [`redact_url`], URLs with their credentials masked (the datastore's too).

#[cfg(feature = "api")]
pub mod api;
mod bus;
mod deadline;
mod delivery;
mod error;
pub mod fail_point;
pub mod memory;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod sql;
#[cfg(feature = "sqs")]
pub mod sqs;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;
mod url;

pub use bus::{
    dead_letter_queue_name, send_then_ack, Bus, DeadLetter, QueueStats, ReceiptAction, Receiver,
    Sender, Unsent, MAX_BODY_BYTES, REDRIVE_BATCH,
};
pub use deadline::DEFAULT_CALL_DEADLINE;
pub use delivery::{
    ack_all, release_all, Acknowledger, BatchSettler, Delivery, Settlement, SqlReceipt,
};
pub use error::BusError;
pub use fail_point::fail_point;
pub use memory::{MemoryBus, MemoryBusConfig};
pub use url::{redact_url, without_unsupported_params};
