//! The senders: results to `…/work/{receipt}/results`, curated messages to `/episodes` and
//! `/clips`; a batch as JSON lines, in as few requests as the limits allow.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::client::Body;
use super::receiver::unexpected;
use super::{no_inspect, Held, Scope, Shared, MAX_REQUEST_BYTES, MAX_REQUEST_LINES};
use crate::{BusError, DeadLetter, QueueStats, Sender, MAX_BODY_BYTES};

/// The most bad lines a 422's error names.
const MAX_NAMED: usize = 10;

/// A 422's body.
#[derive(Debug, Deserialize)]
struct Refusal {
    #[serde(default)]
    errors: Vec<LineError>,
}

#[derive(Debug, Deserialize)]
struct LineError {
    line: usize,
    reason: String,
}

/// One message of a batch, checked and ready to be a line of a request.
struct Line {
    bytes: Vec<u8>,
    json: serde_json::Value,
}

/// Checks every body of a batch before anything is sent: within the bus's size limit, and
/// JSON (the API takes JSON lines only). A body that spans lines is sent as one line.
fn lines(bodies: Vec<Vec<u8>>) -> Result<Vec<Line>, BusError> {
    let mut out = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.into_iter().enumerate() {
        if body.len() > MAX_BODY_BYTES {
            return Err(BusError::BodyTooLarge {
                size: body.len(),
                limit: MAX_BODY_BYTES,
            });
        }
        let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            BusError::InvalidBody(format!(
                "message {} of the batch is not JSON ({e}); the API takes JSON messages only, \
                 nothing was sent",
                i + 1
            ))
        })?;
        let bytes = if body.iter().any(|b| matches!(b, b'\n' | b'\r')) {
            serde_json::to_vec(&json)
                .map_err(|e| BusError::InvalidBody(format!("message {}: {e}", i + 1)))?
        } else {
            body
        };
        out.push(Line { bytes, json });
    }
    Ok(out)
}

/// What [`post_lines`] found.
enum Posted {
    /// Every line is on the server's queue.
    All,
    /// 409: the receipt no longer holds its item (results only); the lines before the
    /// request that found it were sent.
    Conflict,
}

/// POSTs `lines` (positions `at` of the batch, for errors) to `url`, in requests of at most
/// [`MAX_REQUEST_LINES`] lines and [`MAX_REQUEST_BYTES`] bytes; a request the server finds too
/// large (413) is halved and sent again. 422 is [`BusError::InvalidBody`] with the server's
/// reasons, naming positions in the batch (1 is the first message).
async fn post_lines(
    shared: &Shared,
    url: &Url,
    lines: &[&Line],
    at: &[usize],
    scope: Scope,
    slot: Option<&str>,
    what: &str,
) -> Result<Posted, BusError> {
    let client = &shared.client;
    let mut todo: VecDeque<Range<usize>> = chunks(lines).into();
    let mut sent = 0usize;
    while let Some(range) = todo.pop_front() {
        let mut body = Vec::new();
        for line in &lines[range.clone()] {
            body.extend_from_slice(&line.bytes);
            body.push(b'\n');
        }
        let answer = client
            .post(
                url.clone(),
                Body::Lines(body),
                scope,
                slot,
                what,
                shared.request_timeout(),
            )
            .await?;
        match answer.status {
            s if s.is_success() => sent += range.len(),
            StatusCode::PAYLOAD_TOO_LARGE if range.len() > 1 => {
                let mid = range.start + range.len() / 2;
                todo.push_front(mid..range.end);
                todo.push_front(range.start..mid);
            }
            StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(BusError::InvalidBody(format!(
                    "{what}: message {} of the batch ({} bytes) is more than the server takes \
                     in one request (HTTP 413); {sent} messages before it were sent",
                    at[range.start],
                    lines[range.start].bytes.len()
                )))
            }
            StatusCode::UNPROCESSABLE_ENTITY => {
                let refusal: Refusal =
                    serde_json::from_slice(&answer.body).unwrap_or(Refusal { errors: Vec::new() });
                let named: Vec<String> = refusal
                    .errors
                    .iter()
                    .take(MAX_NAMED)
                    .map(|e| {
                        let position = e
                            .line
                            .checked_sub(1)
                            .and_then(|i| at.get(range.start + i))
                            .map_or_else(|| format!("line {}", e.line), |p| format!("message {p}"));
                        format!("{position}: {}", e.reason)
                    })
                    .collect();
                let more = refusal.errors.len().saturating_sub(named.len());
                let mut reasons = if named.is_empty() {
                    answer.reason()
                } else {
                    named.join("; ")
                };
                if more > 0 {
                    reasons.push_str(&format!("; and {more} more"));
                }
                return Err(BusError::InvalidBody(format!(
                    "{what}: the server refused the request (HTTP 422), nothing of it was sent \
                     ({sent} messages of the batch before it were): {reasons}"
                )));
            }
            StatusCode::CONFLICT => return Ok(Posted::Conflict),
            _ => return Err(unexpected(&answer, what)),
        }
    }
    Ok(Posted::All)
}

/// `lines` cut into requests of at most [`MAX_REQUEST_LINES`] lines and [`MAX_REQUEST_BYTES`]
/// bytes (a longer line alone).
fn chunks(lines: &[&Line]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0usize, 0usize);
    for (i, line) in lines.iter().enumerate() {
        let size = line.bytes.len() + 1;
        if i > start && (i - start >= MAX_REQUEST_LINES || bytes + size > MAX_REQUEST_BYTES) {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < lines.len() {
        out.push(start..lines.len());
    }
    out
}

/// Sends results through the API, each to the receipt of the work item it answers (found
/// by its `lease_id` among the items the bus's receivers hold).
pub struct ResultsSender {
    shared: Arc<Shared>,
    queue: String,
}

impl ResultsSender {
    pub(crate) fn new(shared: Arc<Shared>, queue: &str) -> Self {
        ResultsSender {
            shared,
            queue: queue.to_string(),
        }
    }
}

#[async_trait]
impl Sender for ResultsSender {
    /// Sends each result to its item's receipt: results of one item in one request (or as few
    /// as the limits allow), items one after another. Fails before sending anything when a
    /// body is not JSON, names no lease, or names a lease with no item in hand.
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
        let lines = lines(bodies)?;
        // Per receipt, in the order of first appearance: the lines and their positions.
        let mut groups: Vec<(Held, String, Vec<&Line>, Vec<usize>)> = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some(lease) = line.json.get("lease_id").and_then(|l| l.as_str()) else {
                return Err(BusError::InvalidBody(format!(
                    "result {} of the batch names no lease_id: the API sends a result to the \
                     work item it answers, found by its lease; nothing was sent",
                    i + 1
                )));
            };
            let Some(held) = self.shared.receipt_of(lease) else {
                return Err(BusError::Rejected {
                    message: format!(
                        "result {} of the batch is for lease {lease}, whose work item this \
                         researcher does not hold (finished, released, or never taken): the \
                         API takes results only with the receipt of the item they answer; \
                         nothing was sent",
                        i + 1
                    ),
                    source: None,
                });
            };
            match groups.iter_mut().find(|g| g.0.receipt == held.receipt) {
                Some(g) => {
                    g.2.push(line);
                    g.3.push(i + 1);
                }
                None => groups.push((held, lease.to_string(), vec![line], vec![i + 1])),
            }
        }
        let client = &self.shared.client;
        for (held, lease, lines, at) in groups {
            let url = client.url(&["work", &held.receipt, "results"]);
            let posted = post_lines(
                &self.shared,
                &url,
                &lines,
                &at,
                Scope::Researcher,
                Some(&held.slot),
                "sending results",
            )
            .await?;
            if let Posted::Conflict = posted {
                // Its visibility ran out: the item went back to the queue, and is someone
                // else's to answer.
                return Err(BusError::Stale { message_id: lease });
            }
        }
        Ok(())
    }

    async fn inspect(&self) -> Result<QueueStats, BusError> {
        Err(no_inspect(&self.queue))
    }

    async fn peek_dead_letters(
        &self,
        _limit: usize,
        _max_body_bytes: usize,
    ) -> Result<Option<Vec<DeadLetter>>, BusError> {
        Err(no_inspect(&self.queue))
    }

    fn queue(&self) -> &str {
        &self.queue
    }
}

/// Sends curated episodes or clips through the API (`POST /api/v1/episodes` or `/clips`).
pub struct CuratedSender {
    shared: Arc<Shared>,
    queue: String,
    endpoint: &'static str,
}

impl CuratedSender {
    pub(crate) fn new(shared: Arc<Shared>, queue: &str, endpoint: &'static str) -> Self {
        CuratedSender {
            shared,
            queue: queue.to_string(),
            endpoint,
        }
    }
}

#[async_trait]
impl Sender for CuratedSender {
    /// Sends the batch as JSON lines, in one request (or as few as the limits allow). The
    /// server checks each line with the archivists' rules and refuses a request with any bad
    /// line whole (422: [`BusError::InvalidBody`] naming each, as its position in the batch);
    /// requests of the batch before it were sent.
    async fn send_batch(&self, bodies: Vec<Vec<u8>>) -> Result<(), BusError> {
        let lines = lines(bodies)?;
        let refs: Vec<&Line> = lines.iter().collect();
        let at: Vec<usize> = (1..=lines.len()).collect();
        let url = self.shared.client.url(&[self.endpoint]);
        let what = format!("sending to {}", self.queue);
        match post_lines(&self.shared, &url, &refs, &at, Scope::Curator, None, &what).await? {
            Posted::All => Ok(()),
            Posted::Conflict => Err(BusError::Rejected {
                message: format!("{what}: the API server answered HTTP 409"),
                source: None,
            }),
        }
    }

    async fn inspect(&self) -> Result<QueueStats, BusError> {
        Err(no_inspect(&self.queue))
    }

    async fn peek_dead_letters(
        &self,
        _limit: usize,
        _max_body_bytes: usize,
    ) -> Result<Option<Vec<DeadLetter>>, BusError> {
        Err(no_inspect(&self.queue))
    }

    fn queue(&self) -> &str {
        &self.queue
    }
}
