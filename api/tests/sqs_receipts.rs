//! The gateway over SQS (moto_server at `ARCHIVIST_TEST_SQS_ENDPOINT`, as `scripts/test.sh`
//! starts it), on an SQLite datastore in memory: the gateway keeps each item's SQS receipt
//! handle in the datastore behind a receipt of its own, so a researcher carries on with its
//! item through a second gateway (a restart: the first one's memory is gone), and a made-up
//! receipt, or another queue's message's handle, is a 409 and settles nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use datastore::{DataStore, TokenScope};
use messagebus::sqs::{SqsBus, SqsConfig};
use messagebus::Bus;
use serde_json::Value;
use tower::ServiceExt;

fn endpoint() -> String {
    std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run the tests with scripts/test.sh, which \
             starts moto_server and sets it (with AWS_REGION and test credentials)"
        )
    })
}

async fn sqs() -> Arc<dyn Bus> {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .load()
        .await;
    Arc::new(SqsBus::from_sdk_config(&sdk, SqsConfig::default()).unwrap())
}

fn gateway(store: &Arc<dyn DataStore>, bus: Arc<dyn Bus>, queues: &api::Queues) -> axum::Router {
    api::Gateway::new(store.clone(), bus, queues.clone(), api::Limits::default())
        .unwrap()
        .router()
}

async fn call(router: &axum::Router, uri: &str, token: &str, body: &str) -> (StatusCode, String) {
    let request = Request::builder()
        .method("POST")
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// `…/work/{receipt}/{what}`, the receipt percent-encoded as a path segment (SQS's handles
/// hold `/`, `+` and `=`).
fn at(receipt: &str, what: &str) -> String {
    let mut url = url::Url::parse("http://x/api/v1/work").unwrap();
    url.path_segments_mut().unwrap().push(receipt).push(what);
    url.path().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_are_sqs_handles_and_outlive_the_gateway() {
    let store: Arc<dyn DataStore> =
        Arc::new(datastore::SqliteDataStore::in_memory().await.unwrap());
    store.migrate().await.unwrap();
    let run = format!("gw{:08x}", rand::random::<u32>());
    let queues = api::Queues {
        curated_episodes: format!("{run}_curated_episodes"),
        curated_clips: format!("{run}_curated_clips"),
        pending_research: format!("{run}_pending_research"),
        completed_research: format!("{run}_completed_research"),
    };
    let bus = sqs().await;
    for q in [
        &queues.curated_episodes,
        &queues.curated_clips,
        &queues.pending_research,
        &queues.completed_research,
    ] {
        bus.create_queue(q).await.unwrap();
    }
    let researcher = api::tokens::issue(
        store.api_access().unwrap(),
        None,
        TokenScope::Researcher,
        datastore::DEFAULT_MAX_RESEARCHERS,
        chrono::Utc::now(),
    )
    .await
    .unwrap()
    .1;
    let item = serde_json::json!({
        "lease_id": uuid::Uuid::new_v4(),
        "lease_expires_at": "2030-01-01T00:00:00Z",
        "episode": datastore::testing::episode(1),
        "clips": [datastore::testing::clip(1)],
    });
    bus.sender(&queues.pending_research)
        .await
        .unwrap()
        .send(item.to_string().into_bytes())
        .await
        .unwrap();

    // Taken through one gateway…
    let first = gateway(&store, sqs().await, &queues);
    let (code, body) = call(&first, "/api/v1/work?wait=5", &researcher, "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let taken: Value = serde_json::from_str(&body).unwrap();
    let receipt = taken["receipt"].as_str().unwrap().to_string();
    // The gateway's own receipt (the SQS handle stays inside the gateway).
    assert!(
        receipt.len() == 32 && receipt.chars().all(|c| c.is_ascii_hexdigit()),
        "{receipt}"
    );
    drop(first);

    // …and carried on through another, which never saw it.
    let second = gateway(&store, sqs().await, &queues);
    let (code, body) = call(&second, &at(&receipt, "extend"), &researcher, "").await;
    assert_eq!(code, StatusCode::OK, "{body}");

    // Made-up receipts and another queue's message: 409, nothing settled.
    let episodes = bus.sender(&queues.curated_episodes).await.unwrap();
    episodes
        .send(serde_json::to_vec(&datastore::testing::episode(2)).unwrap())
        .await
        .unwrap();
    let other = bus.receiver(&queues.curated_episodes).await.unwrap();
    let foreign = other
        .receive(1, Duration::from_secs(5))
        .await
        .unwrap()
        .remove(0);
    let foreign_handle = foreign.durable_receipt().unwrap();
    foreign.let_expire();
    let long = format!("b.{}", "x".repeat(10_000));
    for made_up in [
        "b.",
        "b.nonsense",
        "b.é",
        "g.00",
        "nonsense",
        long.as_str(),
        &format!("b.{foreign_handle}"),
        foreign_handle.as_str(),
    ] {
        for what in ["extend", "release", "finish"] {
            let (code, body) = call(&second, &at(made_up, what), &researcher, "").await;
            assert_eq!(
                code,
                StatusCode::CONFLICT,
                "{what} by {:?}: {body}",
                made_up.chars().take(40).collect::<String>()
            );
        }
    }
    let stats = episodes.inspect().await.unwrap();
    assert_eq!((stats.waiting + stats.in_flight), 1, "{stats:?}");
    assert!(other
        .settle_receipt(&foreign_handle, messagebus::ReceiptAction::Ack)
        .await
        .unwrap());

    // Results and the finish through the second gateway; a second finish finds nothing.
    let result = serde_json::json!({
        "lease_id": item["lease_id"],
        "revoke_lease": true,
        "research_date": "2030-01-01T00:00:00Z",
        "episode": item["episode"],
        "clip": item["clips"][0],
        "episode_duration_ns": 3_600_000_000_000_i64,
        "episode_hash": "aa",
        "clip_duration_ns": 4_000_000_000_i64,
        "clip_hash": "bb",
        "clip_offsets_ns": [],
    });
    let (code, body) = call(
        &second,
        &at(&receipt, "results"),
        &researcher,
        &result.to_string(),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let (code, body) = call(&second, &at(&receipt, "finish"), &researcher, "").await;
    assert_eq!(code, StatusCode::NO_CONTENT, "{body}");
    let (code, _) = call(&second, &at(&receipt, "finish"), &researcher, "").await;
    assert_eq!(code, StatusCode::CONFLICT);
    let work = bus
        .sender(&queues.pending_research)
        .await
        .unwrap()
        .inspect()
        .await
        .unwrap();
    assert_eq!((work.waiting, work.in_flight), (0, 0), "{work:?}");
    let results = bus
        .sender(&queues.completed_research)
        .await
        .unwrap()
        .inspect()
        .await
        .unwrap();
    assert_eq!(results.waiting, 1, "{results:?}");
    let _ = bus.close().await;
}
