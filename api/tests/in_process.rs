//! The gateway in process, on an SQLite datastore in memory and the in-memory bus (whose
//! receipts live in the gateway's memory): tokens and scopes, curators' lines, the
//! researchers' round trip, 409s, and the OpenAPI document.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use datastore::{DataStore, TokenScope};
use messagebus::{Bus, MemoryBus, MemoryBusConfig};
use serde_json::Value;
use tower::ServiceExt;

struct World {
    gateway: Arc<api::Gateway>,
    router: axum::Router,
    bus: Arc<MemoryBus>,
    store: Arc<dyn DataStore>,
}

async fn world() -> World {
    let store: Arc<dyn DataStore> =
        Arc::new(datastore::SqliteDataStore::in_memory().await.unwrap());
    store.migrate().await.unwrap();
    let bus = Arc::new(MemoryBus::new(MemoryBusConfig::default()));
    let queues = api::Queues {
        curated_episodes: "curated_episodes".into(),
        curated_clips: "curated_clips".into(),
        pending_research: "pending_research".into(),
        completed_research: "completed_research".into(),
    };
    for q in [
        &queues.curated_episodes,
        &queues.curated_clips,
        &queues.pending_research,
        &queues.completed_research,
    ] {
        bus.create_queue(q).await.unwrap();
    }
    let gateway = api::Gateway::new(
        store.clone(),
        bus.clone() as Arc<dyn Bus>,
        queues,
        api::Limits::default(),
    )
    .unwrap();
    let router = gateway.router();
    World {
        gateway,
        router,
        bus,
        store,
    }
}

async fn token(w: &World, scope: TokenScope) -> String {
    api::tokens::issue(
        w.store.api_access().unwrap(),
        None,
        scope,
        datastore::DEFAULT_MAX_RESEARCHERS,
        chrono::Utc::now(),
    )
    .await
    .unwrap()
    .1
}

async fn call(
    w: &World,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, String) {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        request = request.header("authorization", format!("Bearer {t}"));
    }
    let response = w
        .router
        .clone()
        .oneshot(request.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test]
async fn scopes_are_checked() {
    let w = world().await;
    let curator = token(&w, TokenScope::Curator).await;
    let reader = token(&w, TokenScope::Reader).await;
    let (code, _) = call(&w, "GET", "/api/v1/status", None, "").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, body) = call(&w, "GET", "/api/v1/status", Some(&curator), "").await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    let (code, body) = call(&w, "GET", "/api/v1/status", Some(&reader), "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(json(&body)["episodes"], 0);
    let (code, body) = call(&w, "GET", "/api/v1/matches", Some(&reader), "").await;
    assert_eq!((code, body.as_str()), (StatusCode::OK, ""));
}

#[tokio::test]
async fn curated_lines_are_sent_only_when_all_are_good() {
    let w = world().await;
    let curator = token(&w, TokenScope::Curator).await;
    let good = serde_json::to_string(&datastore::testing::episode(1)).unwrap();
    let mut file = datastore::testing::episode(2);
    file.media_uri = "file:///etc/passwd".into();
    let file = serde_json::to_string(&file).unwrap();
    let (code, body) = call(
        &w,
        "POST",
        "/api/v1/episodes",
        Some(&curator),
        &format!("{good}\n{file}\n"),
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(json(&body)["errors"][0]["line"], 2);
    let sender = w.bus.sender("curated_episodes").await.unwrap();
    assert_eq!(sender.inspect().await.unwrap().waiting, 0);
    let (code, body) = call(&w, "POST", "/api/v1/episodes", Some(&curator), &good).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    assert_eq!(sender.inspect().await.unwrap().waiting, 1);
}

#[tokio::test]
async fn researchers_hold_items_by_receipt() {
    let w = world().await;
    let researcher = token(&w, TokenScope::Researcher).await;
    let other = token(&w, TokenScope::Researcher).await;
    let (code, _) = call(&w, "POST", "/api/v1/work", Some(&researcher), "").await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let item = serde_json::json!({
        "lease_id": uuid::Uuid::new_v4(),
        "lease_expires_at": "2030-01-01T00:00:00Z",
        "episode": datastore::testing::episode(1),
        "clips": [datastore::testing::clip(1)],
    });
    let work = w.bus.sender("pending_research").await.unwrap();
    work.send(item.to_string().into_bytes()).await.unwrap();
    let (code, body) = call(&w, "POST", "/api/v1/work?wait=5", Some(&researcher), "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let taken = json(&body);
    assert_eq!(taken["item"]["lease_id"], item["lease_id"]);
    let receipt = taken["receipt"].as_str().unwrap().to_string();
    let at = |what: &str| format!("/api/v1/work/{receipt}/{what}");
    // Another token cannot touch it; a made-up receipt neither.
    let (code, _) = call(&w, "POST", &at("extend"), Some(&other), "").await;
    assert_eq!(code, StatusCode::CONFLICT);
    let (code, _) = call(
        &w,
        "POST",
        "/api/v1/work/g.00/finish",
        Some(&researcher),
        "",
    )
    .await;
    assert_eq!(code, StatusCode::CONFLICT);
    let (code, body) = call(&w, "POST", &at("extend"), Some(&researcher), "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
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
        &w,
        "POST",
        &at("results"),
        Some(&researcher),
        &result.to_string(),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(json(&body)["sent"], 1);
    let completed = w.bus.sender("completed_research").await.unwrap();
    assert_eq!(completed.inspect().await.unwrap().waiting, 1);
    let (code, _) = call(&w, "POST", &at("finish"), Some(&researcher), "").await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (code, _) = call(&w, "POST", &at("finish"), Some(&researcher), "").await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert_eq!(work.inspect().await.unwrap().in_flight, 0);
    drop(w.gateway);
}

#[tokio::test]
async fn the_openapi_document_names_every_endpoint() {
    let w = world().await;
    let (code, body) = call(&w, "GET", "/api/v1/openapi.json", None, "").await;
    assert_eq!(code, StatusCode::OK);
    let doc = json(&body);
    for path in [
        "/api/v1/episodes",
        "/api/v1/clips",
        "/api/v1/work",
        "/api/v1/work/{receipt}/extend",
        "/api/v1/work/{receipt}/results",
        "/api/v1/work/{receipt}/finish",
        "/api/v1/work/{receipt}/release",
        "/api/v1/status",
        "/api/v1/matches",
        "/api/v1/archive",
        "/api/v1/archive/episodes/{key}",
        "/api/v1/archive/episodes/{key}/versions",
        "/api/v1/archive/media/{sha256}",
        "/api/v1/prints/{key}",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    for (path, method) in [
        ("/api/v1/archive/media/{sha256}", "get"),
        ("/api/v1/archive/media/{sha256}", "put"),
        ("/api/v1/prints/{key}", "get"),
        ("/api/v1/prints/{key}", "put"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing"
        );
    }
}
