//! Idle and slow connections up to the limit (and past it) while a real researcher works: it
//! keeps its pace, never refused.

use std::time::Duration;

use datastore::TokenScope;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::world::{self, at, result, Backend};

/// Opens a connection, sends one unauthenticated request on it, reads the whole answer and
/// keeps the connection open (keep-alive), idle. `None` when the server closed it to make room
/// for another (what it is for).
async fn idle_after_one_request(addr: std::net::SocketAddr) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let head = format!("GET /api/v1/openapi.json HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("the server answers or closes")
            .ok()?;
        if n == 0 {
            return None;
        }
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .expect("a length");
            if body.len() >= length {
                return Some(stream);
            }
        }
    }
}

/// Opens a connection and sends half a request head, then nothing.
async fn slow(addr: std::net::SocketAddr) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"POST /api/v1/work HTTP/1.1\r\nHost: 12")
        .await
        .ok()?;
    Some(stream)
}

async fn idle_and_slow_connections_cannot_keep_out_a_researcher(backend: Backend) {
    let server = api::server::ServerLimits {
        max_connections: 24,
        max_api_requests: 16,
        ..api::server::ServerLimits::default()
    };
    let w = world::world_with(backend, world::limits(), server).await;
    let researcher = w.token(TokenScope::Researcher).await;
    let items = 6;
    for i in 0..items {
        w.publish(i, 2).await;
    }
    // Every place taken by idle keep-alive connections, then more, and slow ones beside them.
    let mut hogs = Vec::new();
    for _ in 0..40 {
        hogs.push(idle_after_one_request(w.addr).await);
    }
    for _ in 0..10 {
        hogs.push(slow(w.addr).await);
    }
    // Most of them were closed to make room for the later ones; some are still open.
    assert!(hogs.iter().any(Option::is_some));
    // The researcher, on connections of its own, keeps working through them: every request
    // answered, none refused.
    for _ in 0..items {
        let answer = w
            .call_retrying("POST", "/api/v1/work?wait=10", &researcher, "")
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let taken = answer.json();
        let (receipt, item) = (
            taken["receipt"].as_str().unwrap().to_string(),
            &taken["item"],
        );
        let lines = format!("{}\n{}\n", result(item, 0, false), result(item, 1, true));
        let answer = w
            .call_retrying("POST", &at(&receipt, "results"), &researcher, &lines)
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let answer = w
            .call_retrying("POST", &at(&receipt, "extend"), &researcher, "")
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let answer = w
            .call_retrying("POST", &at(&receipt, "finish"), &researcher, "")
            .await;
        assert_eq!(answer.status, 204, "{answer:?}");
        // More idle connections arrive between its requests.
        for _ in 0..5 {
            hogs.push(idle_after_one_request(w.addr).await);
        }
    }
    // Nothing lost or recorded twice.
    assert_eq!(
        w.stats(world::COMPLETED).await.waiting,
        2 * u64::from(items)
    );
    let pending = w.stats(world::PENDING).await;
    assert_eq!((pending.waiting, pending.in_flight), (0, 0), "{pending:?}");
    drop(hogs);
}

crate::both_buses!(idle_and_slow_connections_cannot_keep_out_a_researcher);
