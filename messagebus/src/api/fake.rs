//! A fake gateway (feature `api-fake`, for tests): an in-process axum server that answers as
//! the contract's API table says, over a queue of its own in memory. The adapter's tests and
//! the binary's `--server` tests run against it; what it received, and what it was asked, is
//! there to look at.
//!
//! What it does not do that the real gateway does: check curated messages with the
//! archivists' rules (it checks that each line is a JSON object whose `media_uri`, if any, is
//! http(s)), keep anything across a restart, count researchers, limit rates. Each answer
//! closes its connection (so that [`FakeGateway::drop_connections`] can cut the next
//! requests' connections).
// A refusal is an answer here (`Err(Response)` short-cuts a handler), in a test server.
#![allow(clippy::result_large_err)]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The longest wait of one work request, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(20);

/// One request the gateway answered: what it was (`work`, `extend`, `results`, `finish`,
/// `release`, `episodes`, `clips`, `openapi`) and the status it answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The endpoint.
    pub endpoint: String,
    /// The receipt in the path, for the work item's endpoints.
    pub receipt: Option<String>,
    /// The answer's status.
    pub status: u16,
    /// The researcher's name for itself (`X-Archivist-Researcher`), when it gave one.
    pub researcher: Option<String>,
}

/// A work item waiting, with how often it was handed out.
#[derive(Debug, Clone)]
struct Item {
    body: Value,
    receives: u32,
}

#[derive(Debug)]
struct Held {
    item: Item,
    visible_until: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    tokens: HashMap<String, String>,
    waiting: VecDeque<Item>,
    held: HashMap<String, Held>,
    next_receipt: u64,
    /// Results, with the receipt they were sent to.
    results: Vec<(String, Value)>,
    finished: Vec<Value>,
    released: u64,
    episodes: Vec<Value>,
    clips: Vec<Value>,
    calls: Vec<Call>,
}

impl Inner {
    /// Items whose visibility ran out go back to the front of the queue.
    fn expire(&mut self) {
        let now = Instant::now();
        let gone: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.visible_until <= now)
            .map(|(r, _)| r.clone())
            .collect();
        for receipt in gone {
            if let Some(h) = self.held.remove(&receipt) {
                self.waiting.push_front(h.item);
            }
        }
    }
}

/// What the handlers share.
#[derive(Debug)]
struct Fake {
    inner: Mutex<Inner>,
    arrived: tokio::sync::Notify,
    visibility: Duration,
    /// Connections to close at once, unanswered, as they are accepted.
    to_drop: AtomicUsize,
}

impl Fake {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(
        &self,
        endpoint: &str,
        receipt: Option<&str>,
        headers: Option<&HeaderMap>,
        status: StatusCode,
    ) {
        self.lock().calls.push(Call {
            endpoint: endpoint.to_string(),
            receipt: receipt.map(str::to_string),
            status: status.as_u16(),
            researcher: headers.and_then(researcher),
        });
    }

    /// `Ok` when the request carries a token of `scope`; else the 401 or 403.
    fn check(&self, headers: &HeaderMap, scope: &str) -> Result<(), Response> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let known = token.and_then(|t| self.lock().tokens.get(t).cloned());
        match known {
            None => Err((
                StatusCode::UNAUTHORIZED,
                Json(json!({"error": "no valid token"})),
            )
                .into_response()),
            Some(s) if s != scope => Err((
                StatusCode::FORBIDDEN,
                Json(json!({"error": format!("this needs the {scope} scope")})),
            )
                .into_response()),
            Some(_) => Ok(()),
        }
    }
}

/// A running fake gateway; stops when dropped.
#[derive(Debug)]
pub struct FakeGateway {
    addr: SocketAddr,
    fake: Arc<Fake>,
    task: JoinHandle<()>,
}

impl Drop for FakeGateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeGateway {
    /// Starts a gateway on a free loopback port, holding each item handed out for
    /// `visibility` unless extended.
    pub async fn start(visibility: Duration) -> std::io::Result<FakeGateway> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let fake = Arc::new(Fake {
            inner: Mutex::new(Inner::default()),
            arrived: tokio::sync::Notify::new(),
            visibility,
            to_drop: AtomicUsize::new(0),
        });
        let router = Router::new()
            .route("/api/v1/openapi.json", get(openapi))
            .route("/api/v1/episodes", post(episodes))
            .route("/api/v1/clips", post(clips))
            .route("/api/v1/work", post(work))
            .route("/api/v1/work/{receipt}/{action}", post(item))
            .layer(axum::middleware::map_response(close_connection))
            .with_state(fake.clone());
        let listener = Dropping {
            inner: listener,
            fake: fake.clone(),
        };
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(FakeGateway { addr, fake, task })
    }

    /// The server's address, as `--server` takes it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Accepts `token` for requests of `scope` (`curator`, `researcher`, `reader`).
    pub fn add_token(&self, token: &str, scope: &str) {
        self.fake
            .lock()
            .tokens
            .insert(token.to_string(), scope.to_string());
    }

    /// Refuses `token` from now on (401), as `archivist token revoke` does: long polls in
    /// flight get nothing more.
    pub fn revoke_token(&self, token: &str) {
        self.fake.lock().tokens.remove(token);
        self.fake.arrived.notify_waiters();
    }

    /// Puts a work item on the queue.
    pub fn push_work(&self, item: Value) {
        self.fake.lock().waiting.push_back(Item {
            body: item,
            receives: 0,
        });
        self.fake.arrived.notify_waiters();
    }

    /// Closes the next `n` connections as they are accepted, before reading anything.
    pub fn drop_connections(&self, n: usize) {
        self.fake.to_drop.store(n, Ordering::SeqCst);
    }

    /// Every item held now goes back to the queue, as if its visibility ran out: their
    /// receipts answer 409 from now on.
    pub fn expire_all(&self) {
        let mut inner = self.fake.lock();
        let held: Vec<String> = inner.held.keys().cloned().collect();
        for receipt in held {
            if let Some(h) = inner.held.remove(&receipt) {
                inner.waiting.push_front(h.item);
            }
        }
        drop(inner);
        self.fake.arrived.notify_waiters();
    }

    /// The results received, each with the receipt it was sent to, in order.
    pub fn results(&self) -> Vec<(String, Value)> {
        self.fake.lock().results.clone()
    }

    /// The items finished, in order.
    pub fn finished(&self) -> Vec<Value> {
        self.fake.lock().finished.clone()
    }

    /// How many items were released.
    pub fn released(&self) -> u64 {
        self.fake.lock().released
    }

    /// The episodes received, in order.
    pub fn episodes(&self) -> Vec<Value> {
        self.fake.lock().episodes.clone()
    }

    /// The clips received, in order.
    pub fn clips(&self) -> Vec<Value> {
        self.fake.lock().clips.clone()
    }

    /// Items waiting, and items held.
    pub fn depths(&self) -> (usize, usize) {
        let mut inner = self.fake.lock();
        inner.expire();
        (inner.waiting.len(), inner.held.len())
    }

    /// The requests answered, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.fake.lock().calls.clone()
    }

    /// The receipts held now.
    pub fn held(&self) -> Vec<String> {
        self.fake.lock().held.keys().cloned().collect()
    }
}

/// The `X-Archivist-Researcher` header's value.
fn researcher(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-archivist-researcher")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The listener: closes the connections [`FakeGateway::drop_connections`] asked for.
struct Dropping {
    inner: TcpListener,
    fake: Arc<Fake>,
}

impl axum::serve::Listener for Dropping {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Ok((stream, addr)) = self.inner.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let drop_it = self
                .fake
                .to_drop
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if drop_it {
                drop(stream);
                continue;
            }
            return (stream, addr);
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

async fn close_connection(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

async fn openapi(State(fake): State<Arc<Fake>>) -> Response {
    fake.record("openapi", None, None, StatusCode::OK);
    Json(json!({"openapi": "3.1.0", "info": {"title": "archivist (fake)", "version": "1"}}))
        .into_response()
}

async fn episodes(State(fake): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Response {
    curated(&fake, &headers, &body, "episodes")
}

async fn clips(State(fake): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Response {
    curated(&fake, &headers, &body, "clips")
}

/// The lines of a body, each parsed: the JSON values, or the 400 naming the first bad one.
fn json_lines(body: &[u8]) -> Result<Vec<(usize, Value)>, Response> {
    let mut out = Vec::new();
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        if line.trim_ascii().is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) => out.push((i + 1, v)),
            Err(e) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    Json(json!({"error": format!("line {}: not JSON: {e}", i + 1)})),
                )
                    .into_response())
            }
        }
    }
    Ok(out)
}

fn curated(fake: &Fake, headers: &HeaderMap, body: &[u8], endpoint: &str) -> Response {
    let response = (|| {
        fake.check(headers, "curator")?;
        let lines = json_lines(body)?;
        let mut errors = Vec::new();
        for (line, v) in &lines {
            if !v.is_object() {
                errors.push(json!({"line": line, "reason": "not a JSON object"}));
                continue;
            }
            if let Some(uri) = v.get("media_uri").and_then(Value::as_str) {
                if !(uri.starts_with("http://") || uri.starts_with("https://")) {
                    errors.push(json!({"line": line, "reason": format!("media_uri {uri:?}: the API takes http(s) media addresses only")}));
                }
            } else {
                errors.push(json!({"line": line, "reason": "missing field `media_uri`"}));
            }
        }
        if !errors.is_empty() {
            return Err((
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({ "errors": errors })),
            )
                .into_response());
        }
        let n = lines.len();
        let mut inner = fake.lock();
        let to = if endpoint == "episodes" {
            &mut inner.episodes
        } else {
            &mut inner.clips
        };
        to.extend(lines.into_iter().map(|(_, v)| v));
        Ok((StatusCode::ACCEPTED, Json(json!({ "accepted": n }))).into_response())
    })()
    .unwrap_or_else(|r| r);
    fake.record(endpoint, None, Some(headers), response.status());
    response
}

async fn work(State(fake): State<Arc<Fake>>, headers: HeaderMap, uri: Uri) -> Response {
    if let Err(r) = fake.check(&headers, "researcher") {
        fake.record("work", None, Some(&headers), r.status());
        return r;
    }
    let wait = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .find_map(|kv| kv.strip_prefix("wait="))
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs)
        .min(MAX_WAIT);
    let deadline = Instant::now() + wait;
    loop {
        // Registered before the look, so that an item pushed after it wakes this request.
        let arrived = fake.arrived.notified();
        // A token revoked while the request waited gets nothing more.
        if let Err(r) = fake.check(&headers, "researcher") {
            fake.record("work", None, Some(&headers), r.status());
            return r;
        }
        {
            let mut inner = fake.lock();
            inner.expire();
            if let Some(mut item) = inner.waiting.pop_front() {
                item.receives += 1;
                inner.next_receipt += 1;
                let receipt = format!("r{}/{}", inner.next_receipt, item.receives);
                let visible_until = chrono::Utc::now()
                    + chrono::Duration::from_std(fake.visibility).unwrap_or_default();
                let body = json!({
                    "receipt": receipt,
                    "item": item.body,
                    "visible_until": visible_until.to_rfc3339(),
                    "receive_count": item.receives,
                });
                inner.held.insert(
                    receipt.clone(),
                    Held {
                        item,
                        visible_until: Instant::now() + fake.visibility,
                    },
                );
                inner.calls.push(Call {
                    endpoint: "work".into(),
                    receipt: Some(receipt),
                    status: 200,
                    researcher: researcher(&headers),
                });
                return Json(body).into_response();
            }
        }
        // Held items come back when their visibility runs out: look again then.
        let next_expiry = fake.lock().held.values().map(|h| h.visible_until).min();
        let until = next_expiry.map_or(deadline, |e| e.min(deadline));
        if Instant::now() >= deadline {
            fake.record("work", None, Some(&headers), StatusCode::NO_CONTENT);
            return StatusCode::NO_CONTENT.into_response();
        }
        tokio::select! {
            _ = arrived => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}

async fn item(
    State(fake): State<Arc<Fake>>,
    Path((receipt, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let response = (|| {
        fake.check(&headers, "researcher")?;
        let gone = || {
            (
                StatusCode::CONFLICT,
                Json(json!({"error": "the item is no longer held by this receipt"})),
            )
                .into_response()
        };
        let mut inner = fake.lock();
        inner.expire();
        if !inner.held.contains_key(&receipt) {
            return Err(gone());
        }
        match action.as_str() {
            "extend" => {
                let visible_until = chrono::Utc::now()
                    + chrono::Duration::from_std(fake.visibility).unwrap_or_default();
                if let Some(h) = inner.held.get_mut(&receipt) {
                    h.visible_until = Instant::now() + fake.visibility;
                }
                Ok(Json(json!({"visible_until": visible_until.to_rfc3339()})).into_response())
            }
            "results" => {
                drop(inner);
                let lines = json_lines(&body)?;
                let n = lines.len();
                let mut inner = fake.lock();
                if !inner.held.contains_key(&receipt) {
                    return Err(gone());
                }
                for (_, v) in lines {
                    inner.results.push((receipt.clone(), v));
                }
                Ok(Json(json!({"sent": n})).into_response())
            }
            "finish" => {
                if let Some(h) = inner.held.remove(&receipt) {
                    inner.finished.push(h.item.body);
                }
                Ok(StatusCode::NO_CONTENT.into_response())
            }
            "release" => {
                if let Some(h) = inner.held.remove(&receipt) {
                    inner.waiting.push_front(h.item);
                    inner.released += 1;
                }
                drop(inner);
                fake.arrived.notify_waiters();
                Ok(StatusCode::NO_CONTENT.into_response())
            }
            _ => Err(StatusCode::NOT_FOUND.into_response()),
        }
    })()
    .unwrap_or_else(|r| r);
    fake.record(&action, Some(&receipt), Some(&headers), response.status());
    response
}
