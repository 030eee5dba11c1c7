//! One gateway on a loopback port over a database bus, a datastore beside it, and the
//! participants' helpers: tokens, work items, results, HTTP calls.

use std::sync::Arc;
use std::time::Duration;

use datastore::{DataStore, TokenScope};
use messagebus::sql::{PgBus, SqlBusConfig, SqliteBus};
use messagebus::{Bus, QueueStats};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// Which database the bus and the datastore live in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// The queues, as the archivists name them.
pub(crate) const PENDING: &str = "pending_research";
pub(crate) const COMPLETED: &str = "completed_research";
pub(crate) const EPISODES: &str = "curated_episodes";
pub(crate) const CLIPS: &str = "curated_clips";

pub(crate) struct World {
    pub(crate) base: String,
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) store: Arc<dyn DataStore>,
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) http: reqwest::Client,
    pub(crate) stop: CancellationToken,
    keeper: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
    _pg: Option<datastore::testing_pg::PgTestDb>,
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(k) = self.keeper.take() {
            k.abort();
        }
    }
}

/// Limits for tests: the defaults, with revocation checked often.
pub(crate) fn limits() -> api::Limits {
    api::Limits {
        revocation_check: Duration::from_millis(100),
        ..api::Limits::default()
    }
}

pub(crate) async fn world(backend: Backend) -> World {
    world_with(backend, limits(), api::server::ServerLimits::default()).await
}

pub(crate) async fn world_with(
    backend: Backend,
    limits: api::Limits,
    server: api::server::ServerLimits,
) -> World {
    let dir = tempfile::tempdir().unwrap();
    let bus_config = SqlBusConfig::default();
    let (store, bus, pg): (Arc<dyn DataStore>, Arc<dyn Bus>, _) = match backend {
        Backend::Sqlite => {
            let url = format!("sqlite://{}", dir.path().join("a.sqlite").display());
            let store = datastore::SqliteDataStore::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            let bus = SqliteBus::connect(&url, bus_config).await.unwrap();
            (Arc::new(store), Arc::new(bus), None)
        }
        Backend::Postgres => {
            let db = datastore::testing_pg::PgTestDb::create().await;
            let store = db.store(8).await;
            store.migrate().await.unwrap();
            let bus = PgBus::connect(db.url(), bus_config).await.unwrap();
            (Arc::new(store), Arc::new(bus), Some(db))
        }
    };
    for q in [PENDING, COMPLETED, EPISODES, CLIPS] {
        bus.create_queue(q).await.unwrap();
    }
    let queues = api::Queues {
        curated_episodes: EPISODES.into(),
        curated_clips: CLIPS.into(),
        pending_research: PENDING.into(),
        completed_research: COMPLETED.into(),
    };
    let gateway = api::Gateway::new(store.clone(), bus.clone(), queues, limits).unwrap();
    let stop = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = api::server::spawn(listener, gateway.router(), server, None, &stop).unwrap();
    let keeper = gateway.start(&stop);
    World {
        base: format!("http://{addr}"),
        addr,
        store,
        bus,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        stop,
        keeper: Some(keeper),
        _dir: dir,
        _pg: pg,
    }
}

/// An answer: status and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: String,
    pub(crate) retry_after: Option<String>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

impl World {
    pub(crate) async fn token(&self, scope: TokenScope) -> String {
        self.token_with(scope, datastore::DEFAULT_MAX_RESEARCHERS)
            .await
            .1
    }

    pub(crate) async fn token_with(&self, scope: TokenScope, max: u32) -> (String, String) {
        api::tokens::issue(
            self.store.api_access().unwrap(),
            None,
            scope,
            max,
            chrono::Utc::now(),
        )
        .await
        .unwrap()
    }

    pub(crate) async fn revoke(&self, name: &str) {
        assert!(self
            .store
            .api_access()
            .unwrap()
            .revoke_token(name)
            .await
            .unwrap());
    }

    /// A request with these headers (`authorization` from `token`).
    pub(crate) async fn call_with(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .body(body);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        Self::answer(response).await
    }

    /// As a real client does (`messagebus::api`): a request whose connection was closed before
    /// any answer is sent again on another (the gateway closes only idle connections, so such
    /// a request was never read). An answer, whatever its status, is returned as it is.
    pub(crate) async fn call_retrying(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: &str,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut tries = 0;
        loop {
            tries += 1;
            let sent = self
                .http
                .request(method.clone(), format!("{}{path}", self.base))
                .bearer_auth(token)
                .body(body.to_string())
                .send()
                .await;
            match sent {
                Ok(response) => return Self::answer(response).await,
                Err(e) if tries < 5 && e.status().is_none() => continue,
                Err(e) => panic!("{path}: {e}"),
            }
        }
    }

    async fn answer(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        Answer {
            status,
            body: response.text().await.unwrap(),
            retry_after,
        }
    }

    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> Answer {
        self.call_with(method, path, token, &[], body.to_string())
            .await
    }

    /// Publishes a work item of episode `episode` with `clips` clips; returns it.
    pub(crate) async fn publish(&self, episode: u32, clips: u32) -> Value {
        let item = json!({
            "lease_id": uuid::Uuid::new_v4(),
            "lease_expires_at": "2030-01-01T00:00:00Z",
            "episode": datastore::testing::episode(episode),
            "clips": (0..clips).map(datastore::testing::clip).collect::<Vec<_>>(),
        });
        self.bus
            .sender(PENDING)
            .await
            .unwrap()
            .send(item.to_string().into_bytes())
            .await
            .unwrap();
        item
    }

    /// Takes an item as `token`: the answer (200 with the item, or 204).
    pub(crate) async fn take(&self, token: &str, wait: u32) -> Answer {
        self.call(
            "POST",
            &format!("/api/v1/work?wait={wait}"),
            Some(token),
            "",
        )
        .await
    }

    /// Takes an item that must be there: its receipt and the item.
    pub(crate) async fn take_one(&self, token: &str) -> (String, Value) {
        let answer = self.take(token, 10).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let taken = answer.json();
        (
            taken["receipt"].as_str().unwrap().to_string(),
            taken["item"].clone(),
        )
    }

    pub(crate) async fn stats(&self, queue: &str) -> QueueStats {
        self.bus
            .sender(queue)
            .await
            .unwrap()
            .inspect()
            .await
            .unwrap()
    }
}

/// The result of `item`'s clip `clip` (an index into its clips), as a researcher sends it.
pub(crate) fn result(item: &Value, clip: usize, last: bool) -> Value {
    json!({
        "lease_id": item["lease_id"],
        "revoke_lease": last,
        "research_date": "2030-01-01T00:00:00Z",
        "episode": item["episode"],
        "clip": item["clips"][clip],
        "episode_duration_ns": 3_600_000_000_000_i64,
        "episode_hash": "aa",
        "clip_duration_ns": 4_000_000_000_i64,
        "clip_hash": "bb",
        "clip_offsets_ns": [],
    })
}

/// `…/work/{receipt}/{what}`.
pub(crate) fn at(receipt: &str, what: &str) -> String {
    format!("/api/v1/work/{receipt}/{what}")
}

/// Waits until `check` holds, at most `within`.
pub(crate) async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
