//! The API bus against the fake gateway (feature `api-fake`), which answers as the contract's
//! API table says: work items taken, extended, finished and released; results sent to the
//! receipt of the item they answer, with several items in hand at once; curated messages as
//! JSON lines; 204, 401, 403, 409 and 422 as the table gives them; connections dropped and
//! tried again.
//!
//! The bus conformance suite (`messagebus::testing`) does not run here: it sends and receives
//! on one queue, and through the API a participant sends only to queues it cannot receive
//! from (and the reverse).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use messagebus::api::fake::FakeGateway;
use messagebus::api::{ApiBus, ApiConfig, ApiToken};
use messagebus::{Bus, BusError, Delivery, Receiver};
use serde_json::{json, Value};

const RESEARCHER: &str = "researcher-token-0123456789";
const CURATOR: &str = "curator-token-0123456789";

async fn gateway(visibility: Duration) -> FakeGateway {
    let g = FakeGateway::start(visibility).await.unwrap();
    g.add_token(RESEARCHER, "researcher");
    g.add_token(CURATOR, "curator");
    g
}

fn bus(g: &FakeGateway, token: &str) -> ApiBus {
    let mut config = ApiConfig::new(g.url(), ApiToken::new(token));
    config.attempts = 4;
    config.first_backoff = Duration::from_millis(20);
    config.max_backoff = Duration::from_millis(100);
    ApiBus::new(config).unwrap()
}

fn item(lease: &str) -> Value {
    json!({
        "lease_id": lease,
        "lease_expires_at": "2030-01-01T00:00:00Z",
        "episode": {"title": "Episode 1", "media_uri": "https://media.example/1.mp3"},
        "clips": [{"title": "Clip A", "media_uri": "https://media.example/a.mp3"}],
    })
}

fn result(lease: &str, clip: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "lease_id": lease, "revoke_lease": false, "research_date": "2030-01-01T00:00:00Z",
        "episode": {"title": "Episode 1"}, "clip": {"title": clip},
        "clip_offsets_ns": [1_000_000_000u64],
    }))
    .unwrap()
}

fn episode(title: &str, media_uri: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
        "curator_information": "test", "date_aired": "2025-12-31T00:00:00Z",
        "title": title, "description": "", "media_uri": media_uri,
        "media_type": "mp3", "priority": 0,
    }))
    .unwrap()
}

/// Waits until `cond` holds, polling, for at most 30 s.
async fn until<F: Fn() -> bool>(what: &str, cond: F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Receives one delivery, waiting up to 5 s.
async fn take(rx: &dyn Receiver) -> Delivery {
    let mut d = rx.receive(1, Duration::from_secs(5)).await.unwrap();
    assert_eq!(d.len(), 1, "one work item");
    d.remove(0)
}

async fn expect_err<T>(f: impl Future<Output = Result<T, BusError>>) -> BusError {
    match f.await {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn an_item_is_taken_extended_answered_and_finished() {
    let g = gateway(Duration::from_secs(2)).await;
    g.push_work(item("lease-1"));
    let bus = bus(&g, RESEARCHER);
    bus.probe().await.unwrap();
    let rx = bus.receiver("pending_research").await.unwrap();
    let results = bus.sender("completed_research").await.unwrap();

    let d = take(rx.as_ref()).await;
    assert_eq!(
        serde_json::from_slice::<Value>(d.body()).unwrap(),
        item("lease-1")
    );
    assert_eq!(d.message_id(), "lease-1");
    assert_eq!(d.receive_count(), 1);
    let receipt = g.held().pop().unwrap();

    // Held past its first visibility: the heartbeat extends it, so nobody else gets it.
    until("two extensions", || {
        g.calls()
            .iter()
            .filter(|c| c.endpoint == "extend" && c.status == 200)
            .count()
            >= 2
    })
    .await;
    assert_eq!(g.held(), vec![receipt.clone()], "still held by its receipt");
    assert!(
        rx.receive(1, Duration::ZERO).await.unwrap().is_empty(),
        "204: nothing else"
    );

    results
        .send_batch(vec![
            result("lease-1", "Clip A"),
            result("lease-1", "Clip B"),
        ])
        .await
        .unwrap();
    let sent = g.results();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|(r, _)| *r == receipt));
    assert_eq!(
        g.calls().iter().filter(|c| c.endpoint == "results").count(),
        1,
        "one request for the batch"
    );

    d.ack().await.unwrap();
    assert_eq!(g.finished(), vec![item("lease-1")]);
    assert_eq!(g.depths(), (0, 0));
    // Its receipt is forgotten: a late result has nowhere to go.
    let late = expect_err(results.send(result("lease-1", "Clip C"))).await;
    assert!(matches!(late, BusError::Rejected { .. }), "{late:?}");
}

#[tokio::test]
async fn nothing_waiting_is_an_empty_receive() {
    let g = gateway(Duration::from_secs(30)).await;
    let bus = bus(&g, RESEARCHER);
    let rx = bus.receiver("pending_research").await.unwrap();
    assert!(rx.receive(1, Duration::ZERO).await.unwrap().is_empty());
    assert!(rx
        .receive(1, Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        g.calls().iter().map(|c| c.status).collect::<Vec<_>>(),
        [204, 204]
    );
    // A long poll answers when an item arrives (before or while it waits).
    let waiting = tokio::spawn(async move { rx.receive(1, Duration::from_secs(20)).await });
    g.push_work(item("lease-late"));
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    got.into_iter().next().unwrap().ack().await.unwrap();
}

#[tokio::test]
async fn released_and_dead_lettered_items_come_back() {
    let g = gateway(Duration::from_secs(30)).await;
    g.push_work(item("lease-r"));
    let bus = bus(&g, RESEARCHER);
    let rx = bus.receiver("pending_research").await.unwrap();

    take(rx.as_ref()).await.release().await.unwrap();
    assert_eq!(g.released(), 1);
    let again = take(rx.as_ref()).await;
    assert_eq!(again.receive_count(), 2, "the server's receive count");
    // No dead-letter queue through the API: a release, which the server's bus counts.
    again.dead_letter("analyser gave up").await.unwrap();
    assert_eq!(g.released(), 2);
    let third = take(rx.as_ref()).await;
    assert_eq!(third.receive_count(), 3);

    // Dropped unsettled: released in the background; close waits for it.
    drop(third);
    bus.close().await.unwrap();
    assert_eq!(g.released(), 3);
    assert_eq!(g.depths(), (1, 0));
}

#[tokio::test]
async fn results_go_to_the_receipt_of_their_item_with_several_in_hand() {
    let g = gateway(Duration::from_secs(30)).await;
    for lease in ["A", "B", "C"] {
        g.push_work(item(lease));
    }
    let bus = bus(&g, RESEARCHER);
    // Three slots, three receivers, one sender: as the researcher runtime has them.
    let mut slots = Vec::new();
    for _ in 0..3 {
        let rx = bus.receiver("pending_research").await.unwrap();
        slots.push(take(rx.as_ref()).await);
    }
    // Which receipt holds which lease, as the gateway handed them out, and to which slot:
    // each names itself, so that the server counts three researchers.
    let taken: Vec<_> = g
        .calls()
        .into_iter()
        .filter(|c| c.endpoint == "work" && c.status == 200)
        .collect();
    let slots_named: std::collections::BTreeSet<_> = taken
        .iter()
        .map(|c| c.researcher.clone().unwrap())
        .collect();
    assert_eq!(slots_named.len(), 3, "{taken:?}");
    let handed: Vec<(String, String)> = taken
        .iter()
        .map(|c| c.receipt.clone().unwrap())
        .zip(["A", "B", "C"].map(String::from))
        .collect();
    let results = bus.sender("completed_research").await.unwrap();
    results
        .send_batch(vec![
            result("B", "1"),
            result("A", "1"),
            result("C", "1"),
            result("A", "2"),
        ])
        .await
        .unwrap();
    let sent = g.results();
    assert_eq!(sent.len(), 4);
    // Each request of results names the slot that holds its item.
    for call in g.calls().iter().filter(|c| c.endpoint == "results") {
        let holder = taken.iter().find(|t| t.receipt == call.receipt).unwrap();
        assert_eq!(call.researcher, holder.researcher);
    }
    for (receipt, value) in &sent {
        let lease = value["lease_id"].as_str().unwrap();
        let (held_by, _) = handed.iter().find(|(_, l)| l == lease).unwrap();
        assert_eq!(receipt, held_by, "result for {lease}");
    }
    // In the order sent within each item.
    let a: Vec<&str> = sent
        .iter()
        .filter(|(_, v)| v["lease_id"] == "A")
        .map(|(_, v)| v["clip"]["title"].as_str().unwrap())
        .collect();
    assert_eq!(a, ["1", "2"]);

    // A result for a lease not in hand: nothing of the batch is sent.
    let err = expect_err(results.send_batch(vec![result("A", "3"), result("Z", "1")])).await;
    assert!(err.to_string().contains("lease Z"), "{err}");
    assert_eq!(g.results().len(), 4);

    for d in slots {
        d.ack().await.unwrap();
    }
    assert_eq!(g.finished().len(), 3);
}

#[tokio::test]
async fn a_refused_token_names_the_scope_needed() {
    let g = gateway(Duration::from_secs(30)).await;
    g.push_work(item("lease-t"));
    let secret = "not-a-known-token-5f3a9c";
    let unknown = bus(&g, secret);
    let rx = unknown.receiver("pending_research").await.unwrap();
    let err = expect_err(rx.receive(1, Duration::ZERO)).await;
    match &err {
        BusError::Unauthorized { scope, message } => {
            assert_eq!(scope, "researcher");
            assert!(message.contains("401"), "{message}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(!format!("{err} {err:?} {unknown:?}").contains(secret));

    // A curator's token for a researcher's request, and the reverse: 403.
    let curator = bus(&g, CURATOR);
    let rx = curator.receiver("pending_research").await.unwrap();
    match expect_err(rx.receive(1, Duration::ZERO)).await {
        BusError::Unauthorized { scope, message } => {
            assert_eq!(scope, "researcher");
            assert!(message.contains("403"), "{message}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    let researcher = bus(&g, RESEARCHER);
    let episodes = researcher.sender("curated_episodes").await.unwrap();
    match expect_err(episodes.send(episode("E", "https://m.example/e.mp3"))).await {
        BusError::Unauthorized { scope, .. } => assert_eq!(scope, "curator"),
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert!(g.episodes().is_empty());
    assert_eq!(g.depths(), (1, 0), "nothing taken");
}

#[tokio::test]
async fn an_item_gone_is_409_and_not_tried_again() {
    let g = gateway(Duration::from_secs(30)).await;
    g.push_work(item("lease-g"));
    let bus = bus(&g, RESEARCHER);
    let rx = bus.receiver("pending_research").await.unwrap();
    let results = bus.sender("completed_research").await.unwrap();
    let d = take(rx.as_ref()).await;
    // Its visibility runs out on the server: the receipt holds nothing any more.
    g.expire_all();
    let err = expect_err(results.send(result("lease-g", "Clip A"))).await;
    assert!(matches!(err, BusError::Stale { .. }), "{err:?}");
    assert!(!err.is_retryable());
    let conflicts = || {
        g.calls()
            .iter()
            .filter(|c| c.endpoint == "results")
            .map(|c| c.status)
            .collect::<Vec<_>>()
    };
    assert_eq!(conflicts(), [409], "one try");
    // Finishing a stale delivery does nothing, quietly (as on the database bus).
    d.ack().await.unwrap();
    assert!(g.finished().is_empty());
    assert_eq!(g.depths(), (1, 0));
}

#[tokio::test]
async fn curated_messages_go_as_json_lines_and_422_names_each_bad_one() {
    let g = gateway(Duration::from_secs(30)).await;
    let bus = bus(&g, CURATOR);
    let episodes = bus.sender("curated_episodes").await.unwrap();
    episodes
        .send_batch(vec![
            episode("E1", "https://m.example/1.mp3"),
            episode("E2", "https://m.example/2.mp3"),
            episode("E3", "http://m.example/3.mp3"),
        ])
        .await
        .unwrap();
    assert_eq!(g.episodes().len(), 3);
    assert_eq!(g.calls().len(), 1, "one request");

    let err = expect_err(episodes.send_batch(vec![
        episode("E4", "https://m.example/4.mp3"),
        episode("E5", "file:///etc/passwd"),
        episode("E6", "/srv/6.mp3"),
    ]))
    .await;
    let BusError::InvalidBody(reasons) = &err else {
        panic!("expected InvalidBody, got {err:?}");
    };
    assert!(reasons.contains("422"), "{reasons}");
    assert!(reasons.contains("message 2: media_uri"), "{reasons}");
    assert!(reasons.contains("message 3: media_uri"), "{reasons}");
    assert_eq!(g.episodes().len(), 3, "nothing of the refused request");

    // Not JSON: refused before anything is sent.
    let err = expect_err(episodes.send_batch(vec![
        episode("E7", "https://m.example/7.mp3"),
        b"not json".to_vec(),
    ]))
    .await;
    assert!(matches!(err, BusError::InvalidBody(_)), "{err:?}");
    assert_eq!(g.calls().len(), 2, "no request");

    let clips = bus.sender("curated_clips").await.unwrap();
    let mut clip: Value =
        serde_json::from_slice(&episode("C1", "https://m.example/c.mp3")).unwrap();
    clip.as_object_mut().unwrap().remove("date_aired");
    clips
        .send(serde_json::to_vec(&clip).unwrap())
        .await
        .unwrap();
    assert_eq!(g.clips(), vec![clip]);
}

#[tokio::test]
async fn dropped_connections_are_tried_again_within_bounds() {
    let g = gateway(Duration::from_secs(30)).await;
    g.push_work(item("lease-d"));
    let bus = bus(&g, RESEARCHER);
    let rx = bus.receiver("pending_research").await.unwrap();
    g.drop_connections(2);
    let d = take(rx.as_ref()).await;
    assert_eq!(d.message_id(), "lease-d");

    g.drop_connections(1);
    let results = bus.sender("completed_research").await.unwrap();
    results.send(result("lease-d", "Clip A")).await.unwrap();
    assert_eq!(g.results().len(), 1);

    // More drops than tries: unavailable, which callers retry as any outage.
    g.drop_connections(10);
    let err = expect_err(results.send(result("lease-d", "Clip B"))).await;
    assert!(matches!(err, BusError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("4 tries"), "{err}");
    g.drop_connections(0);
    d.ack().await.unwrap();
    assert_eq!(g.finished().len(), 1);
}

#[tokio::test]
async fn what_the_api_cannot_do_says_so() {
    let g = gateway(Duration::from_secs(30)).await;
    let bus = bus(&g, RESEARCHER);
    let results = bus.sender("completed_research").await.unwrap();
    let err = expect_err(results.inspect()).await;
    assert!(matches!(err, BusError::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("/api/v1/status"), "{err}");
    assert!(results.peek_dead_letters(10, 100).await.is_err());
    assert!(matches!(
        expect_err(bus.sender("pending_research")).await,
        BusError::Unsupported(_)
    ));
    assert!(matches!(
        expect_err(bus.receiver("completed_research")).await,
        BusError::Unsupported(_)
    ));
    assert!(matches!(
        expect_err(bus.redrive("pending_research", 10)).await,
        BusError::Unsupported(_)
    ));
    bus.create_queue("pending_research").await.unwrap();

    // A server address with no API behind it.
    let mut config = ApiConfig::new(format!("{}/elsewhere/", g.url()), ApiToken::new("t"));
    config.attempts = 1;
    let nowhere = ApiBus::new(config).unwrap();
    let err = expect_err(nowhere.probe()).await;
    assert!(err.to_string().contains("no archivist API"), "{err}");
    assert!(ApiBus::new(ApiConfig::new("file:///tmp", ApiToken::new("t"))).is_err());
}

#[tokio::test]
async fn the_token_never_shows() {
    let secret = "s3cr3t-token-value-abcdef";
    let g = gateway(Duration::from_secs(30)).await;
    let config = ApiConfig::new(g.url(), ApiToken::new(secret));
    let shown = format!("{config:?} {}", config.token);
    assert!(!shown.contains(secret), "{shown}");
    let bus = Arc::new(ApiBus::new(config).unwrap());
    assert!(!format!("{bus:?}").contains(secret));
}
