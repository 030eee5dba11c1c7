//! The bus conformance suite on a real RabbitMQ broker, and what is particular to it.
//!
//! The broker comes from `ARCHIVIST_TEST_AMQP_URL`, which `scripts/test.sh` sets (starting a
//! broker if none answers). Every case uses queues with a random name, so cases run in
//! parallel on one broker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use messagebus::rabbitmq::{RabbitBus, RabbitBusConfig};
use messagebus::testing::QueueSettings;
use messagebus::Bus;
use tokio::time::Instant;

fn amqp_url() -> String {
    std::env::var("ARCHIVIST_TEST_AMQP_URL").unwrap_or_else(|_| {
        panic!("ARCHIVIST_TEST_AMQP_URL is not set: run the tests with scripts/test.sh, which starts RabbitMQ")
    })
}

async fn fresh(settings: QueueSettings) -> Arc<dyn Bus> {
    let config = RabbitBusConfig {
        visibility_timeout: settings.visibility_timeout,
        max_receives: settings.max_receives,
        ..RabbitBusConfig::default()
    };
    Arc::new(RabbitBus::connect(&amqp_url(), config).await.unwrap())
}

messagebus::bus_conformance_tests!(fresh);

/// A TCP proxy in front of the broker that can cut every connection through it at once, or
/// silence them: bytes still go in, nothing comes out either way, no connection closes (a
/// network that drops packets, a broker that hangs).
struct CuttingProxy {
    addr: std::net::SocketAddr,
    links: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
    /// While true, every link (new ones too) swallows what it reads.
    silent: Arc<std::sync::atomic::AtomicBool>,
}

impl CuttingProxy {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let links: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let silent: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let held = Arc::clone(&links);
        let quiet = Arc::clone(&silent);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let quiet = Arc::clone(&quiet);
                let link = tokio::spawn(async move {
                    if let Ok(server) = tokio::net::TcpStream::connect(&upstream).await {
                        let (from_client, to_client) = client.into_split();
                        let (from_server, to_server) = server.into_split();
                        tokio::join!(
                            forward(from_client, to_server, Arc::clone(&quiet)),
                            forward(from_server, to_client, quiet),
                        );
                    }
                });
                held.lock().unwrap().push(link.abort_handle());
            }
        });
        CuttingProxy {
            addr,
            links,
            accept,
            silent,
        }
    }

    /// Drops every connection through the proxy, as a network cut or broker restart would;
    /// new connections go through (and are heard again).
    fn cut(&self) {
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
        self.silent
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// From now on, what either side sends is swallowed; connections stay open.
    fn silence(&self) {
        self.silent.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes, swallowing what it reads while `silent`.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silent: Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if silent.load(std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// A bus on the test broker through `proxy`.
async fn through(proxy: &CuttingProxy, config: RabbitBusConfig) -> RabbitBus {
    let url = url::Url::parse(&amqp_url()).unwrap();
    let mut through = url.clone();
    through.set_port(Some(proxy.addr.port())).unwrap();
    through.set_host(Some("127.0.0.1")).unwrap();
    RabbitBus::connect(through.as_str(), config).await.unwrap()
}

async fn proxy() -> CuttingProxy {
    let url = url::Url::parse(&amqp_url()).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5672));
    CuttingProxy::start(upstream).await
}

/// `call`, which must return by the test's `deadline`: a call that never returns fails the
/// test there rather than waiting for the test runner's limit.
async fn by<T>(deadline: Instant, what: &str, call: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout_at(deadline, call).await {
        Ok(out) => out,
        Err(_) => panic!("{what} did not return by the test's deadline"),
    }
}

/// The broker connection is cut three times while a sender and a receiver work: every
/// message whose send returned Ok is received (duplicates allowed), and the queue ends empty.
/// Every call returns by the test's own deadline (each bus call has a deadline of 5 s; the
/// test waits for none of them past its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cut_mid_run_loses_nothing() {
    use std::collections::HashSet;

    const MESSAGES: usize = 150;
    let deadline = Instant::now() + Duration::from_secs(120);
    let proxy = proxy().await;
    let config = RabbitBusConfig {
        call_deadline: Duration::from_secs(5),
        ..RabbitBusConfig::default()
    };
    let bus = by(deadline, "connecting", through(&proxy, config)).await;
    let queue = messagebus::testing::unique_queue_name("cut");
    by(deadline, "creating the queue", bus.create_queue(&queue))
        .await
        .unwrap();
    let tx = by(deadline, "a sender", bus.sender(&queue)).await.unwrap();
    let rx = by(deadline, "a receiver", bus.receiver(&queue))
        .await
        .unwrap();

    let sent = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let sending = {
        let sent = Arc::clone(&sent);
        tokio::spawn(async move {
            let mut failures = 0;
            for i in 0..MESSAGES {
                let body = format!("m{i}").into_bytes();
                // A send that failed may or may not have reached the broker: send it again.
                loop {
                    match by(deadline, "a send", tx.send(body.clone())).await {
                        Ok(()) => break,
                        Err(e) => {
                            assert!(e.is_retryable(), "{e}");
                            failures += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                sent.lock().unwrap().insert(body);
            }
            failures
        })
    };

    let mut received = HashSet::new();
    let mut cuts = 0;
    let mut receive_failures = 0;
    while received.len() < MESSAGES {
        assert!(
            Instant::now() < deadline,
            "received {} of {MESSAGES} distinct messages in time",
            received.len()
        );
        // Cut when a quarter, a half and three quarters of the messages arrived.
        if cuts < 3 && received.len() >= (cuts + 1) * MESSAGES / 4 {
            proxy.cut();
            cuts += 1;
        }
        match by(
            deadline,
            "a receive",
            rx.receive(10, Duration::from_millis(500)),
        )
        .await
        {
            Ok(batch) => {
                for d in batch {
                    let body = d.body().to_vec();
                    // An acknowledgement lost with the connection brings the message back.
                    if by(deadline, "an acknowledgement", d.ack()).await.is_ok() {
                        received.insert(body);
                    }
                }
            }
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                receive_failures += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let send_failures = by(deadline, "the sender", sending).await.unwrap();
    assert_eq!(cuts, 3);
    assert_eq!(received, *sent.lock().unwrap());
    println!(
        "{MESSAGES} messages, {cuts} cuts, {send_failures} sends and {receive_failures} \
         receives retried"
    );
    drain(&bus, &queue, rx.as_ref(), &received, deadline).await;
}

/// Receives what is left on `queue` (duplicates of messages in `received` only) until it is
/// empty, and checks that the counts end at zero.
async fn drain(
    bus: &RabbitBus,
    queue: &str,
    rx: &dyn messagebus::Receiver,
    received: &std::collections::HashSet<Vec<u8>>,
    deadline: Instant,
) {
    loop {
        let rest = by(
            deadline,
            "a receive",
            rx.receive(10, Duration::from_millis(500)),
        )
        .await
        .unwrap();
        if rest.is_empty() {
            break;
        }
        for d in rest {
            assert!(received.contains(d.body()), "{d:?} was never sent");
            by(deadline, "an acknowledgement", d.ack()).await.unwrap();
        }
    }
    let tx = by(deadline, "a sender", tx_for(bus, queue)).await;
    by(
        deadline,
        "counting",
        messagebus::testing::assert_counts(tx.as_ref(), (0, 0, 0)),
    )
    .await;
}

/// Calls in flight on a connection gone silent (nothing answers, nothing closes: a network
/// that drops packets) return `BusError::Timeout` by their call deadline, though the per
/// round trip timeout is ten minutes: a send waiting for its publisher confirm, a look at the
/// counts and a new receiver waiting for a channel, a receive waiting for a `basic.get` (its
/// wait plus the deadline). Before every call had a deadline, each waited the ten minutes
/// (with the default 10 s per round trip, a call of several round trips added them up, and
/// a few waits, such as closing a channel, had none at all). Once the connection
/// is cut and the bus reconnects, nothing is lost: the send tried again arrives, the message
/// held when the connection went silent comes back, and the queue ends empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_silent_connection_returns_by_its_deadline() {
    use messagebus::testing::assert_times_out;
    use std::collections::HashSet;

    const CALL_DEADLINE: Duration = Duration::from_secs(2);
    let deadline = Instant::now() + Duration::from_secs(100);
    let proxy = proxy().await;
    let config = RabbitBusConfig {
        call_deadline: CALL_DEADLINE,
        request_timeout: Duration::from_secs(600),
        ..RabbitBusConfig::default()
    };
    let bus = through(&proxy, config).await;
    let queue = messagebus::testing::unique_queue_name("silent");
    bus.create_queue(&queue).await.unwrap();
    let tx = bus.sender(&queue).await.unwrap();
    let rx = bus.receiver(&queue).await.unwrap();
    tx.send(b"held".to_vec()).await.unwrap();
    let held = messagebus::testing::receive_n(rx.as_ref(), 1).await;

    proxy.silence();
    // The receiver holds a whole prefetch (one), so its receive asks the broker for more
    // (`basic.get`) and waits for the answer.
    let wait = Duration::from_millis(500);
    tokio::join!(
        assert_times_out("a send", CALL_DEADLINE, tx.send(b"unconfirmed".to_vec())),
        assert_times_out("a look at the counts", CALL_DEADLINE, tx.inspect()),
        assert_times_out("a new receiver", CALL_DEADLINE, bus.receiver(&queue)),
        assert_times_out("a receive", wait + CALL_DEADLINE, rx.receive(1, wait)),
    );
    // The acknowledgement goes into the silence and returns, whether or not it is heard.
    let start = Instant::now();
    let mut held = held;
    let _ = by(deadline, "an acknowledgement", held.remove(0).ack()).await;
    assert!(start.elapsed() < CALL_DEADLINE + Duration::from_secs(5));

    // The connection is cut (the silence ends): the bus reconnects.
    proxy.cut();
    loop {
        match by(deadline, "a send", tx.send(b"unconfirmed".to_vec())).await {
            Ok(()) => break,
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent: HashSet<Vec<u8>> = [b"held".to_vec(), b"unconfirmed".to_vec()].into();
    let mut received = HashSet::new();
    while received != sent {
        assert!(Instant::now() < deadline, "received only {received:?}");
        let batch = match by(deadline, "a receive", rx.receive(10, wait)).await {
            Ok(batch) => batch,
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                continue;
            }
        };
        for d in batch {
            let body = d.body().to_vec();
            assert!(sent.contains(&body), "{d:?} was never sent");
            if by(deadline, "an acknowledgement", d.ack()).await.is_ok() {
                received.insert(body);
            }
        }
    }
    drain(&bus, &queue, rx.as_ref(), &received, deadline).await;
}

async fn tx_for(bus: &RabbitBus, queue: &str) -> Arc<dyn messagebus::Sender> {
    bus.sender(queue).await.unwrap()
}

/// A redrive of several batches moves every dead letter exactly once. Closing a channel
/// after each batch did not: RabbitMQ ignored some acknowledgements sent just before the
/// close (rabbitmq/rabbitmq-server#10327), those dead letters came back and were moved
/// again, about one in ten of 1,000 here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_of_many_batches_moves_each_once() {
    use messagebus::testing::{assert_counts, dead_letter_all, receive_n, redrive_all, setup};
    const N: usize = 600;
    let (bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "redrive_many").await;
    let bodies: Vec<Vec<u8>> = (0..N).map(|i| format!("many{i}").into_bytes()).collect();
    dead_letter_all(tx.as_ref(), rx.as_ref(), bodies.clone(), "poison").await;
    assert_eq!(redrive_all(bus.as_ref(), &queue).await, N as u64);
    let got = receive_n(rx.as_ref(), N).await;
    let unique: std::collections::HashSet<Vec<u8>> =
        got.iter().map(|d| d.body().to_vec()).collect();
    assert_eq!(unique, bodies.into_iter().collect());
    for d in got {
        d.ack().await.unwrap();
    }
    assert_counts(tx.as_ref(), (0, 0, 0)).await;
}

/// A receiver asked for one message takes one from the broker, never two. The consumer's
/// credit used to be counted before its delivery was buffered: a receive that looked at the
/// buffer in between saw the credit spent and nothing to hand out, took a second message by
/// `basic.get`, and left the pushed one stranded in the buffer, unready at the broker (the
/// redrive conformance case once counted one dead letter short for its whole patience).
/// Rounds of fresh receivers on the dead-letter queue make the window likely; the broker's
/// count of redrivable (ready) dead letters must fall by exactly one each round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_of_one_takes_exactly_one() {
    use messagebus::dead_letter_queue_name;
    use messagebus::testing::{assert_redrivable, dead_letter_all, receive_n, setup};
    const N: u64 = 30;
    let (bus, queue, tx, rx) = setup(fresh, QueueSettings::default(), "take_one").await;
    let bodies: Vec<Vec<u8>> = (0..N).map(|i| format!("one{i}").into_bytes()).collect();
    dead_letter_all(tx.as_ref(), rx.as_ref(), bodies, "poison").await;
    assert_redrivable(bus.as_ref(), &queue, N).await;
    let mut held = Vec::new();
    for round in 1..N {
        let dlq = bus.receiver(&dead_letter_queue_name(&queue)).await.unwrap();
        held.extend(receive_n(dlq.as_ref(), 1).await);
        assert_redrivable(bus.as_ref(), &queue, N - round).await;
    }
    for d in held {
        d.ack().await.unwrap();
    }
}
