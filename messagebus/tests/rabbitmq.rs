//! The bus conformance suite on a real RabbitMQ broker, and what is particular to it.
//!
//! The broker comes from `ARCHIVIST_TEST_AMQP_URL`, which `scripts/test.sh` sets (starting a
//! broker if none answers). Every case uses queues with a random name, so cases run in
//! parallel on one broker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use messagebus::rabbitmq::{RabbitBus, RabbitBusConfig};
use messagebus::testing::QueueSettings;
use messagebus::Bus;

fn amqp_url() -> String {
    std::env::var("ARCHIVIST_TEST_AMQP_URL").unwrap_or_else(|_| {
        panic!("ARCHIVIST_TEST_AMQP_URL is not set: run the tests with scripts/test.sh, which starts RabbitMQ")
    })
}

async fn fresh(settings: QueueSettings) -> Arc<dyn Bus> {
    let config = RabbitBusConfig {
        visibility_timeout: settings.visibility_timeout,
        max_receives: settings.max_receives,
        ..RabbitBusConfig::default()
    };
    Arc::new(RabbitBus::connect(&amqp_url(), config).await.unwrap())
}

messagebus::bus_conformance_tests!(fresh);
