//! `serve --api` with TLS: a certificate made in the test (rcgen), served over HTTPS and read
//! again on SIGHUP; plain HTTP refused off loopback unless `--insecure-http`; off loopback,
//! the pages and `/metrics` need a reader token (`/healthz` does not).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::pipeline::Scenario;
use crate::common::serving::start_serving;

const DEADLINE: Duration = Duration::from_secs(60);

/// A self-signed certificate for localhost and 127.0.0.1, written as PEM to `dir`: its
/// certificate, for the client to trust.
fn make_certificate(dir: &Path) -> String {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert = made.cert.pem();
    std::fs::write(dir.join("cert.pem"), &cert).unwrap();
    std::fs::write(dir.join("key.pem"), made.key_pair.serialize_pem()).unwrap();
    cert
}

fn client_trusting(cert: &str) -> reqwest::Client {
    net::install_crypto();
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert.as_bytes()).unwrap())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_certificate_reloaded_on_sighup() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    let reader = s
        .run(&["token", "create", "--scope", "reader"], &[])
        .expect_code(0)
        .stdout
        .trim()
        .to_string();
    let certs = tempfile::tempdir().unwrap();
    let first = make_certificate(certs.path());
    let cert = certs.path().join("cert.pem");
    let key = certs.path().join("key.pem");
    let (gateway, addr) = start_serving(
        &s,
        &[
            "serve",
            "--api",
            "--addr",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[],
        DEADLINE,
    );
    let status = format!("https://{addr}/api/v1/status");
    let answer = client_trusting(&first)
        .get(&status)
        .bearer_auth(&reader)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // Plain HTTP on the TLS port gets no answer.
    assert!(reqwest::get(format!("http://{addr}/healthz"))
        .await
        .is_err());

    // A new certificate, SIGHUP: new connections get it.
    let second = make_certificate(certs.path());
    assert_ne!(first, second);
    let pid = gateway.0.id().to_string();
    std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    let started = Instant::now();
    loop {
        let tried = client_trusting(&second)
            .get(&status)
            .bearer_auth(&reader)
            .send()
            .await;
        if let Ok(answer) = tried {
            assert_eq!(answer.status(), 200);
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The old one is no longer served.
    assert!(client_trusting(&first).get(&status).send().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_is_refused_off_loopback_and_pages_need_a_reader_there() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    let refused = s
        .run(&["serve", "--api", "--addr", "0.0.0.0:0"], &[])
        .expect_code(2);
    assert!(
        refused.stderr.contains("--insecure-http"),
        "{}",
        refused.stderr
    );
    let reader = s
        .run(&["token", "create", "--scope", "reader"], &[])
        .expect_code(0)
        .stdout
        .trim()
        .to_string();
    let curator = s
        .run(&["token", "create", "--scope", "curator"], &[])
        .expect_code(0)
        .stdout
        .trim()
        .to_string();
    let (_gateway, addr) = start_serving(
        &s,
        &["serve", "--api", "--addr", "0.0.0.0:0", "--insecure-http"],
        &[],
        DEADLINE,
    );
    let port = addr.rsplit(':').next().unwrap().to_string();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for path in ["/", "/metrics", "/api/status", "/clips"] {
        let none = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(none.status(), 401, "{path} without a token");
        let wrong = client
            .get(format!("{base}{path}"))
            .bearer_auth(&curator)
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 403, "{path} with a curator's token");
        let read = client
            .get(format!("{base}{path}"))
            .bearer_auth(&reader)
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 200, "{path} with a reader's token");
    }
    for path in ["/healthz", "/readyz"] {
        let open = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(open.status(), 200, "{path}");
    }
}
