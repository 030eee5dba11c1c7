//! The gateway's log, as an operator reads it: a revoked or unknown token that keeps trying is
//! named (by its name, or as unknown), and no token or receipt is ever written.

use std::io::Write;
use std::sync::{Arc, Mutex};

use datastore::TokenScope;

use crate::world::{at, result, world, Backend};

/// Every line the process logs, kept.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<u8>>>);

impl Write for Kept {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut kept) = self.0.lock() {
            kept.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn the_log_names_who_keeps_trying_and_never_a_secret(backend: Backend) {
    // Each test runs in a process of its own (nextest): the whole process's log is this test's.
    let kept = Kept::default();
    let writer = kept.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let w = world(backend).await;
    let (name, researcher) = w.token_with(TokenScope::Researcher, 2).await;
    w.publish(1, 1).await;
    let (receipt, item) = w.take_one(&researcher).await;
    let line = result(&item, 0, true).to_string();
    for what in ["extend", "results"] {
        let answer = w
            .call("POST", &at(&receipt, what), Some(&researcher), &line)
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    w.revoke(&name).await;
    let unknown = api::tokens::generate();
    for token in [&researcher, &unknown] {
        let answer = w
            .call("POST", &at(&receipt, "finish"), Some(token), "")
            .await;
        assert_eq!(answer.status, 401, "{answer:?}");
    }
    let log = String::from_utf8(kept.0.lock().unwrap().clone()).unwrap();
    assert!(!log.contains(&receipt), "a receipt reached the log:\n{log}");
    assert!(
        !log.contains(&researcher) && !log.contains(&unknown),
        "a token reached the log"
    );
    assert!(log.contains("/api/v1/work/…/finish"), "{log}");
    let revoked = log
        .lines()
        .find(|l| l.contains("refused: a revoked token"))
        .unwrap_or_else(|| panic!("the revoked token is not named:\n{log}"));
    assert!(revoked.contains(&format!("token={name}")), "{revoked}");
    assert!(log.contains("refused: an unknown token"), "{log}");
}

crate::both_buses!(the_log_names_who_keeps_trying_and_never_a_secret);
