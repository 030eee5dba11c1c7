//! The SQS adapter against a real SQS-compatible server (moto_server, started by
//! `scripts/test.sh`, which sets `ARCHIVIST_TEST_SQS_ENDPOINT` and the AWS variables): the bus
//! conformance suite, then what is particular to SQS (batching, acknowledgement coalescing,
//! the visibility heartbeat, body checks before any request, dead-letter reasons, redrive,
//! cancellation of a long poll, timeouts above the long poll).
//!
//! Queues hold tens of messages at most: moto scans a whole queue on every call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use messagebus::sqs::{SqsBus, SqsConfig, DEAD_LETTER_REASON_ATTRIBUTE};
use messagebus::testing::{receive_n, unique_queue_name, QueueSettings};
use messagebus::{dead_letter_queue_name, Bus, BusError, Receiver, Sender, MAX_BODY_BYTES};
use tokio_util::sync::CancellationToken;

fn endpoint() -> String {
    std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run the tests with scripts/test.sh, which \
             starts moto_server and sets it (with AWS_REGION and test credentials)"
        )
    })
}

async fn sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .load()
        .await
}

async fn bus_with(config: SqsConfig) -> SqsBus {
    SqsBus::from_sdk_config(&sdk_config().await, config).unwrap()
}

async fn fresh(settings: QueueSettings) -> Arc<dyn Bus> {
    Arc::new(
        bus_with(SqsConfig {
            visibility_timeout: settings.visibility_timeout,
            max_receives: settings.max_receives,
            ..SqsConfig::default()
        })
        .await,
    )
}

// moto accepts every receipt handle a message ever had (SQS refuses stale ones): the stale
// receipts case is left out.
messagebus::bus_conformance_tests!(bus_conformance, fresh, lenient_receipts);

/// A bus with `config` and one created queue.
async fn setup(config: SqsConfig, what: &str) -> (SqsBus, String) {
    let bus = bus_with(config).await;
    let queue = unique_queue_name(&format!("sqs_{what}"));
    bus.create_queue(&queue).await.unwrap();
    (bus, queue)
}

fn bodies(n: usize, tag: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{{\"{tag}\":{i}}}").into_bytes())
        .collect()
}

async fn ack_concurrently(deliveries: Vec<messagebus::Delivery>) {
    for r in futures::future::join_all(deliveries.into_iter().map(|d| d.ack())).await {
        r.unwrap();
    }
}

#[tokio::test]
async fn twenty_five_messages_take_three_send_batches() {
    let (bus, queue) = setup(SqsConfig::default(), "batching").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let before = bus.request_counts();
    tx.send_batch(bodies(25, "n")).await.unwrap();
    let sent = bus.request_counts().since(&before);
    assert_eq!(sent.requests("SendMessageBatch"), 3, "{sent}");
    assert_eq!(sent.total_requests(), 3, "{sent}");
    assert_eq!(tx.inspect().await.unwrap().waiting, 25);
}

#[tokio::test]
async fn acks_settled_together_share_one_delete_batch() {
    let (bus, queue) = setup(SqsConfig::default(), "coalesce").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    tx.send_batch(bodies(10, "a")).await.unwrap();
    let got = receive_n(&rx, 10).await;
    assert_eq!(rx.held(), 10);
    let before = bus.request_counts();
    ack_concurrently(got).await;
    let acked = bus.request_counts().since(&before);
    assert_eq!(acked.requests("DeleteMessageBatch"), 1, "{acked}");
    assert_eq!(acked.total_requests(), 1, "{acked}");
    assert_eq!(rx.held(), 0);
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}

#[tokio::test]
async fn releases_settled_together_share_one_visibility_batch() {
    let (bus, queue) = setup(SqsConfig::default(), "release_batch").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    tx.send_batch(bodies(4, "r")).await.unwrap();
    let got = receive_n(&rx, 4).await;
    let before = bus.request_counts();
    for r in futures::future::join_all(got.into_iter().map(|d| d.release())).await {
        r.unwrap();
    }
    let released = bus.request_counts().since(&before);
    assert_eq!(
        released.requests("ChangeMessageVisibilityBatch"),
        1,
        "{released}"
    );
    let again = receive_n(&rx, 4).await;
    assert!(again.iter().all(|d| d.receive_count() == 2));
    ack_concurrently(again).await;
}

/// Holding a message past its visibility timeout does not let a second consumer have it:
/// the heartbeat extends it. Letting it go stops the heartbeat, and it comes back.
#[tokio::test]
async fn heartbeat_keeps_a_held_message_invisible() {
    let config = SqsConfig {
        visibility_timeout: Duration::from_secs(2),
        heartbeat: Some(Duration::from_millis(400)),
        ..SqsConfig::default()
    };
    let (bus, queue) = setup(config, "heartbeat").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    let other = bus.sqs_receiver(&queue).await.unwrap();
    tx.send(b"long work".to_vec()).await.unwrap();
    let mut got = receive_n(&rx, 1).await;
    let held = got.remove(0);

    // A long poll of 5 s returns the moment the message is visible again; without the
    // heartbeat that is after 2 s.
    let stolen = other.receive(10, Duration::from_secs(5)).await.unwrap();
    assert!(
        stolen.is_empty(),
        "held message delivered again: {stolen:?}"
    );
    assert!(
        bus.request_counts()
            .requests("ChangeMessageVisibilityBatch")
            >= 1
    );
    held.ack().await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));

    tx.send(b"abandoned".to_vec()).await.unwrap();
    let mut got = receive_n(&rx, 1).await;
    got.remove(0).let_expire();
    assert_eq!(rx.held(), 0);
    let back = receive_n(&other, 1).await;
    assert_eq!(back[0].body(), b"abandoned");
    assert_eq!(back[0].receive_count(), 2);
    ack_concurrently(back).await;
}

/// A delivery dropped unsettled (its holder was given up on) is released: once `close`
/// returns it is visible again, not in flight until its visibility timeout runs out.
#[tokio::test]
async fn a_dropped_delivery_is_released_by_close() {
    let (bus, queue) = setup(SqsConfig::default(), "dropped").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    tx.send(b"dropped".to_vec()).await.unwrap();
    drop(receive_n(&rx, 1).await);
    bus.close().await.unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (1, 0));
    assert_eq!(
        bus.request_counts()
            .requests("ChangeMessageVisibilityBatch"),
        1
    );
}

#[tokio::test]
async fn bad_bodies_are_refused_before_any_request() {
    let (bus, queue) = setup(SqsConfig::default(), "refuse").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let before = bus.request_counts();
    let err = tx
        .send_batch(vec![b"fine".to_vec(), vec![b'x'; MAX_BODY_BYTES + 1]])
        .await
        .unwrap_err();
    assert!(
        matches!(err, BusError::BodyTooLarge { size, limit } if size == MAX_BODY_BYTES + 1 && limit == MAX_BODY_BYTES)
    );
    assert!(!err.is_retryable());
    for bad in [vec![0xc3, 0x28], b"nul\0byte".to_vec(), Vec::new()] {
        let err = tx.send(bad).await.unwrap_err();
        assert!(matches!(err, BusError::InvalidBody(_)), "{err:?}");
        assert!(!err.is_retryable());
    }
    assert_eq!(bus.request_counts().since(&before).total_requests(), 0);
    assert_eq!(
        tx.inspect().await.unwrap().waiting,
        0,
        "nothing of the batch was sent"
    );
}

#[tokio::test]
async fn largest_body_goes_through() {
    let (bus, queue) = setup(SqsConfig::default(), "largest").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    let big = "é".repeat(MAX_BODY_BYTES / 2).into_bytes();
    let before = bus.request_counts();
    tx.send_batch(vec![big.clone(), b"small".to_vec()])
        .await
        .unwrap();
    let sent = bus.request_counts().since(&before);
    // 1 MiB and a little more do not fit one batch; the 1 MiB one bills as 16 requests.
    assert_eq!(sent.requests("SendMessageBatch"), 2, "{sent}");
    assert_eq!(sent.total_billed(), 17, "{sent}");
    let got = receive_n(&rx, 2).await;
    assert!(got.iter().any(|d| d.body() == big.as_slice()));
    ack_concurrently(got).await;
}

#[tokio::test]
async fn dead_letter_reason_is_a_message_attribute() {
    let (bus, queue) = setup(SqsConfig::default(), "dlq_reason").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    tx.send(b"{not json".to_vec()).await.unwrap();
    let mut got = receive_n(&rx, 1).await;
    got.remove(0)
        .dead_letter("invalid JSON: expected `:` at line 1")
        .await
        .unwrap();
    let stats = tx.inspect().await.unwrap();
    assert_eq!(
        (stats.waiting, stats.in_flight, stats.dead_letters),
        (0, 0, 1)
    );

    // On the wire: the attribute other SQS tools see.
    let sdk = sdk_config().await;
    let raw = aws_sdk_sqs::Client::new(&sdk);
    let dlq_url = raw
        .get_queue_url()
        .queue_name(dead_letter_queue_name(&queue))
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let out = raw
        .receive_message()
        .queue_url(&dlq_url)
        .message_attribute_names("All")
        .visibility_timeout(0)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let m = &out.messages()[0];
    assert_eq!(m.body(), Some("{not json"));
    let attr = &m.message_attributes().unwrap()[DEAD_LETTER_REASON_ATTRIBUTE];
    assert_eq!(
        attr.string_value(),
        Some("invalid JSON: expected `:` at line 1")
    );

    // Through the bus.
    let dlq = bus
        .sqs_receiver(&dead_letter_queue_name(&queue))
        .await
        .unwrap();
    let got = receive_n(&dlq, 1).await;
    assert_eq!(
        got[0].dead_letter_reason(),
        Some("invalid JSON: expected `:` at line 1")
    );
    ack_concurrently(got).await;
}

#[tokio::test]
async fn redrive_after_max_receives_gives_a_reason() {
    let config = SqsConfig {
        max_receives: 2,
        ..SqsConfig::default()
    };
    let (bus, queue) = setup(config, "redrive").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    tx.send(b"keeps failing".to_vec()).await.unwrap();
    for n in 1..=2 {
        let mut got = receive_n(&rx, 1).await;
        let d = got.remove(0);
        assert_eq!(d.receive_count(), n);
        d.release().await.unwrap();
    }
    // The third receive finds it over the limit: SQS moves it to the dead-letter queue.
    let got = rx.receive(10, Duration::from_secs(1)).await.unwrap();
    assert!(got.is_empty(), "{got:?}");
    let dlq = bus
        .sqs_receiver(&dead_letter_queue_name(&queue))
        .await
        .unwrap();
    let got = receive_n(&dlq, 1).await;
    assert_eq!(got[0].body(), b"keeps failing");
    let reason = got[0].dead_letter_reason().unwrap();
    assert!(reason.contains("redrive policy"), "{reason}");
    assert!(reason.contains("(2)"), "{reason}");
    ack_concurrently(got).await;
}

#[tokio::test]
async fn create_queue_sets_redrive_and_visibility_and_is_harmless_twice() {
    let config = SqsConfig {
        visibility_timeout: Duration::from_secs(45),
        max_receives: 7,
        ..SqsConfig::default()
    };
    let (bus, queue) = setup(config, "create").await;
    bus.create_queue(&queue).await.unwrap();
    let raw = aws_sdk_sqs::Client::new(&sdk_config().await);
    let url = bus.sqs_sender(&queue).await.unwrap().url().to_owned();
    let attrs = raw
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attrs = attrs.attributes().unwrap();
    assert_eq!(attrs[&QueueAttributeName::VisibilityTimeout], "45");
    assert_eq!(
        attrs[&QueueAttributeName::ReceiveMessageWaitTimeSeconds],
        "20"
    );
    let redrive = &attrs[&QueueAttributeName::RedrivePolicy];
    assert!(redrive.contains("7"), "{redrive}");
    assert!(
        redrive.contains(&dead_letter_queue_name(&queue)),
        "{redrive}"
    );

    // A queue made elsewhere without a redrive policy gets one; its other settings stay.
    let bare = unique_queue_name("sqs_bare");
    let bare_url = raw
        .create_queue()
        .queue_name(&bare)
        .attributes(QueueAttributeName::VisibilityTimeout, "12")
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    bus.create_queue(&bare).await.unwrap();
    let attrs = raw
        .get_queue_attributes()
        .queue_url(&bare_url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attrs = attrs.attributes().unwrap();
    assert_eq!(attrs[&QueueAttributeName::VisibilityTimeout], "12");
    assert!(attrs.contains_key(&QueueAttributeName::RedrivePolicy));
}

#[tokio::test]
async fn invalid_queue_names_are_refused() {
    let bus = bus_with(SqsConfig::default()).await;
    let err = bus.create_queue("has spaces").await.unwrap_err();
    assert!(matches!(err, BusError::Rejected { .. }), "{err:?}");
    let err = bus.create_queue(&"x".repeat(70)).await.unwrap_err();
    assert!(matches!(err, BusError::Rejected { .. }), "{err:?}");
    assert!(matches!(
        bus.sender("has spaces").await.err(),
        Some(BusError::QueueNotFound(_))
    ));
}

/// A caller that gives up on a long poll gets control back at once, and the receiver works on.
#[tokio::test]
async fn cancelled_long_poll_leaves_nothing_broken() {
    let (bus, queue) = setup(SqsConfig::default(), "cancel").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        canceller.cancel();
    });
    let outcome = tokio::select! {
        r = rx.receive(10, Duration::from_secs(20)) => Some(r),
        () = token.cancelled() => None,
    };
    assert!(
        outcome.is_none(),
        "the empty queue answered first: {outcome:?}"
    );
    assert_eq!(rx.held(), 0);

    tx.send(b"after cancel".to_vec()).await.unwrap();
    let got = receive_n(&rx, 1).await;
    assert_eq!(got[0].body(), b"after cancel");
    ack_concurrently(got).await;
    let stats = tx.inspect().await.unwrap();
    assert_eq!((stats.waiting, stats.in_flight), (0, 0));
}

/// The long poll outlasts the client's request timeout: the SDK timeouts of a receive are set
/// above its wait, so an empty poll ends empty, not in a timeout.
#[tokio::test]
async fn long_poll_outlasts_the_request_timeout() {
    let config = SqsConfig {
        request_timeout: Duration::from_secs(1),
        ..SqsConfig::default()
    };
    let (bus, queue) = setup(config, "longpoll").await;
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    let got = rx.receive(10, Duration::from_secs(3)).await.unwrap();
    assert!(got.is_empty());
    assert_eq!(bus.request_counts().requests("ReceiveMessage"), 1);
}

#[tokio::test]
async fn receive_takes_at_most_ten_and_counts_receives() {
    let (bus, queue) = setup(SqsConfig::default(), "ten").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    tx.send_batch(bodies(12, "t")).await.unwrap();
    let got = rx.receive(50, Duration::from_secs(1)).await.unwrap();
    assert!(!got.is_empty() && got.len() <= 10, "{}", got.len());
    assert!(got
        .iter()
        .all(|d| d.receive_count() == 1 && d.dead_letter_reason().is_none()));
    ack_concurrently(got).await;
    assert!(rx
        .receive(0, Duration::from_secs(1))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_bus_without_region_is_refused() {
    let sdk = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .build();
    let err = SqsBus::from_sdk_config(&sdk, SqsConfig::default()).unwrap_err();
    assert!(
        matches!(err, BusError::Rejected { ref message, .. } if message.contains("AWS_REGION"))
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn unreachable_endpoint_is_retryable() {
    // Port 9 (discard) on loopback: nothing listens, the connection is refused.
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url("http://127.0.0.1:9")
        .load()
        .await;
    let bus = SqsBus::from_sdk_config(&sdk, SqsConfig::default()).unwrap();
    let err = bus.sender("anything").await.err().unwrap();
    assert!(err.is_retryable(), "{err:?}");
    let text = format!("{err} {err:?}");
    assert!(!text.contains("testing"), "credentials leaked: {text}");
}

/// The system attribute the adapter reads for `receive_count` is there on the wire too.
#[tokio::test]
async fn receive_count_comes_from_sqs() {
    let (bus, queue) = setup(SqsConfig::default(), "count").await;
    let tx = bus.sqs_sender(&queue).await.unwrap();
    tx.send(b"count me".to_vec()).await.unwrap();
    let raw = aws_sdk_sqs::Client::new(&sdk_config().await);
    let out = raw
        .receive_message()
        .queue_url(tx.url())
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .visibility_timeout(0)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.messages()[0].attributes().unwrap()
            [&MessageSystemAttributeName::ApproximateReceiveCount],
        "1"
    );
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    let got = receive_n(&rx, 1).await;
    assert_eq!(got[0].receive_count(), 2);
    ack_concurrently(got).await;
}

/// `from_env` reads the endpoint as every AWS SDK does, from `AWS_ENDPOINT_URL`.
#[tokio::test]
async fn from_env_reads_aws_endpoint_url() {
    // Same value for every test in this process, and nextest runs each test in its own.
    std::env::set_var("AWS_ENDPOINT_URL", endpoint());
    let bus = SqsBus::from_env(SqsConfig::default()).await.unwrap();
    let queue = unique_queue_name("sqs_env");
    bus.create_queue(&queue).await.unwrap();
    let tx = bus.sender(&queue).await.unwrap();
    tx.send(b"from env".to_vec()).await.unwrap();
    assert_eq!(tx.inspect().await.unwrap().waiting, 1);
}

/// The default long poll (20 s) on an empty queue, with the default timeouts, ends empty:
/// neither the SDK's attempt/read timeouts nor its stalled-stream protection cut it short.
#[tokio::test]
async fn default_long_poll_ends_empty() {
    let (bus, queue) = setup(SqsConfig::default(), "default_poll").await;
    let rx = bus.sqs_receiver(&queue).await.unwrap();
    let got = rx.receive(10, Duration::from_secs(60)).await.unwrap();
    assert!(got.is_empty());
    assert_eq!(bus.request_counts().requests("ReceiveMessage"), 1);
}

/// A credentials chain that finds nothing.
#[derive(Debug)]
struct NoCredentials;

impl aws_credential_types::provider::ProvideCredentials for NoCredentials {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::ready(Err(
            aws_credential_types::provider::error::CredentialsError::not_loaded(
                "no credentials in this test",
            ),
        ))
    }
}

/// Without credentials the error says so and is not retried.
#[tokio::test]
async fn missing_credentials_are_a_lasting_error() {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .credentials_provider(NoCredentials)
        .load()
        .await;
    let bus = SqsBus::from_sdk_config(&sdk, SqsConfig::default()).unwrap();
    let err = bus.sender("anything").await.err().unwrap();
    assert!(matches!(err, BusError::Rejected { .. }), "{err:?}");
    assert!(
        err.to_string().contains("no usable AWS credentials"),
        "{err}"
    );
    assert_eq!(bus.request_counts().total_requests(), 0);
}

/// New queues keep messages 14 days; an existing queue whose receive limit differs from the
/// bus's is reported by `queue_drift` and brought in line by `update_queue`.
#[tokio::test]
async fn existing_queues_are_reported_and_updated_not_silently_kept() {
    let (five, queue) = setup(
        SqsConfig {
            max_receives: 5,
            ..SqsConfig::default()
        },
        "drift",
    )
    .await;
    assert!(five.queue_drift(&queue).await.unwrap().is_empty());
    let client = aws_sdk_sqs::Client::new(&sdk_config().await);
    let url = client
        .get_queue_url()
        .queue_name(&queue)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();
    let retention = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::MessageRetentionPeriod)
        .send()
        .await
        .unwrap();
    assert_eq!(
        retention
            .attributes()
            .unwrap()
            .get(&QueueAttributeName::MessageRetentionPeriod)
            .map(String::as_str),
        Some("1209600")
    );

    let three = bus_with(SqsConfig {
        max_receives: 3,
        ..SqsConfig::default()
    })
    .await;
    three.create_queue(&queue).await.unwrap();
    let drift = three.queue_drift(&queue).await.unwrap();
    assert_eq!(drift.len(), 1, "{drift:?}");
    assert!(drift[0].contains("maxReceiveCount is 5"), "{drift:?}");
    three.update_queue(&queue).await.unwrap();
    assert!(three.queue_drift(&queue).await.unwrap().is_empty());
    assert_eq!(five.queue_drift(&queue).await.unwrap().len(), 1);
}
