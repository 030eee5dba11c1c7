//! What the SQS bus costs, in requests per message, counted at the client by the adapter's
//! request counter (each attempt is a request; each 64 KiB of payload bills as one more).
//!
//! Prints a table and checks the ingestion target (≤ 0.35 requests per message against the
//! naive 3: one send, one receive, one delete per message). Run against moto_server:
//!
//! ```text
//! scripts/test.sh -p messagebus --test buses sqs_cost:: --no-capture
//! # or, with ARCHIVIST_TEST_SQS_ENDPOINT and the AWS variables set:
//! cargo nextest run -p messagebus --all-features --test buses sqs_cost:: --no-capture
//! ```
//!
//! The counts are of requests, never of time, so the emulator gives the same figures as SQS
//! would for the same sequence of calls. What it does not reproduce: real SQS may return fewer
//! than ten messages per long poll even with a backlog (it samples servers), which raises the
//! receive share; see the table's note.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aws_config::BehaviorVersion;
use messagebus::sqs::{RequestCounts, SqsBus, SqsConfig};
use messagebus::testing::unique_queue_name;
use messagebus::{Bus, Delivery, Receiver};

fn endpoint() -> String {
    std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run the tests with scripts/test.sh, which \
             starts moto_server and sets it (with AWS_REGION and test credentials)"
        )
    })
}

async fn bus() -> SqsBus {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .load()
        .await;
    SqsBus::from_sdk_config(&sdk, SqsConfig::default()).unwrap()
}

/// A JSON body of about `size` bytes, shaped like an archivist message.
fn body(i: usize, size: usize) -> Vec<u8> {
    let head = format!(
        "{{\"title\":\"Episode {i}\",\"media_uri\":\"https://example.invalid/{i}.mp3\",\"description\":\""
    );
    let pad = size.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad)).into_bytes()
}

/// Receives `n` messages as an archivist does (up to `per_call` per receive, the batch acked
/// together), then makes the one empty long poll that ends a `--once` drain.
async fn consume(rx: &dyn Receiver, n: usize, per_call: usize) -> Vec<Vec<u8>> {
    let mut bodies = Vec::new();
    while bodies.len() < n {
        let got = rx.receive(per_call, Duration::from_secs(1)).await.unwrap();
        bodies.extend(got.iter().map(|d| d.body().to_vec()));
        ack_together(got).await;
    }
    bodies
}

async fn ack_together(got: Vec<Delivery>) {
    for r in futures::future::join_all(got.into_iter().map(Delivery::ack)).await {
        r.unwrap();
    }
}

struct Row {
    scenario: &'static str,
    messages: usize,
    counts: RequestCounts,
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<50} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>9}",
        "scenario",
        "msgs",
        "send",
        "recv",
        "delete",
        "visib",
        "other",
        "requests",
        "billed",
        "req/msg"
    );
    for r in rows {
        let c = &r.counts;
        let send = c.requests("SendMessageBatch") + c.requests("SendMessage");
        let recv = c.requests("ReceiveMessage");
        let delete = c.requests("DeleteMessageBatch");
        let visib = c.requests("ChangeMessageVisibilityBatch");
        let other = c.total_requests() - send - recv - delete - visib;
        println!(
            "{:<50} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>9.3}",
            r.scenario,
            r.messages,
            send,
            recv,
            delete,
            visib,
            other,
            c.total_requests(),
            c.total_billed(),
            c.total_billed() as f64 / r.messages as f64
        );
    }
    println!("baseline (one send, one receive, one delete per message): 3.000 req/msg");
    println!(
        "idle consumer, 20 s long polls: 3 ReceiveMessage a minute = 129,600 a 30-day month \
         per queue and consumer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_per_message() {
    let mut rows = Vec::new();

    // Ingestion: a curator publishes 60 episodes with `send_batch`; the archivist drains
    // them ten per receive, acknowledging each received batch together.
    {
        let curator = bus().await;
        let archivist = bus().await;
        let queue = unique_queue_name("cost_ingest");
        curator.create_queue(&queue).await.unwrap();
        let tx = curator.sender(&queue).await.unwrap();
        let rx = archivist.receiver(&queue).await.unwrap();
        let (c0, a0) = (curator.request_counts(), archivist.request_counts());
        let n = 60;
        tx.send_batch((0..n).map(|i| body(i, 700)).collect())
            .await
            .unwrap();
        let sent = curator.request_counts().since(&c0);
        let got = consume(rx.as_ref(), n, 10).await;
        assert_eq!(got.len(), n);
        let steady = merge(&sent, &archivist.request_counts().since(&a0));
        let ingest = steady.total_billed() as f64 / n as f64;
        rows.push(Row {
            scenario: "ingestion, steady (send 10/req, recv 10, del 10)",
            messages: n,
            counts: steady,
        });
        // A `--once` drain ends on one empty poll.
        assert!(rx
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty());
        rows.push(Row {
            scenario: "ingestion, drained with --once (+1 empty poll)",
            messages: n,
            counts: merge(&sent, &archivist.request_counts().since(&a0)),
        });
        assert!(
            ingest <= 0.35,
            "ingestion costs {ingest} requests per message"
        );
    }

    // The billing rule: 80 KiB bodies. Batches still hold ten (800 KiB < 1 MiB) but bill as
    // 13 requests each on the way in and on the way out.
    {
        let curator = bus().await;
        let archivist = bus().await;
        let queue = unique_queue_name("cost_large");
        curator.create_queue(&queue).await.unwrap();
        let tx = curator.sender(&queue).await.unwrap();
        let rx = archivist.receiver(&queue).await.unwrap();
        let (c0, a0) = (curator.request_counts(), archivist.request_counts());
        let n = 20;
        tx.send_batch((0..n).map(|i| body(i, 80 * 1024)).collect())
            .await
            .unwrap();
        let sent = curator.request_counts().since(&c0);
        consume(rx.as_ref(), n, 10).await;
        rows.push(Row {
            scenario: "ingestion, 80 KiB bodies (64 KiB billing)",
            messages: n,
            counts: merge(&sent, &archivist.request_counts().since(&a0)),
        });
    }

    // The research round trip: the pending-research archivist publishes one item per lease (a
    // `send` each); a researcher takes one item per receive and acknowledges it, then sends
    // its results (one per clip) with `send_batch`; the completed-research archivist drains
    // them ten per receive. 50 clips is ARCHIVIST_MAX_CLIPS's default.
    rows.push(round_trip(1, 50, "research round trip (1 item x 50 clips)").await);
    rows.push(round_trip(2, 25, "research round trip (2 items x 25 clips)").await);

    print_table(&rows);
}

async fn round_trip(items: usize, clips: usize, scenario: &'static str) -> Row {
    let pending_bus = bus().await;
    let researcher_bus = bus().await;
    let completed_bus = bus().await;
    let pending_q = unique_queue_name("cost_pending");
    let completed_q = unique_queue_name("cost_completed");
    pending_bus.create_queue(&pending_q).await.unwrap();
    pending_bus.create_queue(&completed_q).await.unwrap();
    let pending_tx = pending_bus.sender(&pending_q).await.unwrap();
    let researcher_rx = researcher_bus.receiver(&pending_q).await.unwrap();
    let researcher_tx = researcher_bus.sender(&completed_q).await.unwrap();
    let completed_rx = completed_bus.receiver(&completed_q).await.unwrap();
    let starts = [
        pending_bus.request_counts(),
        researcher_bus.request_counts(),
        completed_bus.request_counts(),
    ];
    for i in 0..items {
        // A work item carries its episode and its clips: about 500 bytes a clip.
        pending_tx.send(body(i, 500 * (clips + 1))).await.unwrap();
    }
    for _ in 0..items {
        let item = consume(researcher_rx.as_ref(), 1, 1).await;
        assert_eq!(item.len(), 1);
        researcher_tx
            .send_batch((0..clips).map(|c| body(c, 1500)).collect())
            .await
            .unwrap();
    }
    consume(completed_rx.as_ref(), items * clips, 10).await;
    let total = merge(
        &merge(
            &pending_bus.request_counts().since(&starts[0]),
            &researcher_bus.request_counts().since(&starts[1]),
        ),
        &completed_bus.request_counts().since(&starts[2]),
    );
    Row {
        scenario,
        messages: items + items * clips,
        counts: total,
    }
}

fn merge(a: &RequestCounts, b: &RequestCounts) -> RequestCounts {
    let mut out = a.clone();
    for (op, c) in &b.operations {
        let e = out.operations.entry(op.clone()).or_default();
        e.requests += c.requests;
        e.billed += c.billed;
    }
    out
}
