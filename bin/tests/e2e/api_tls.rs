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

/// A private certificate authority, and a server certificate it signed for localhost and
/// 127.0.0.1, written as PEM to `dir` (`ca.pem`, `server.pem`, `server-key.pem`), and the CA
/// itself as a server's certificate (`ca-key.pem`: a CA certificate used as an end entity).
fn make_private_ca(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let mut ca_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "archivist test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let server_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = server_params.signed_by(&server_key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("ca-key.pem"), ca_key.serialize_pem()).unwrap();
    std::fs::write(dir.join("server.pem"), server.pem()).unwrap();
    std::fs::write(dir.join("server-key.pem"), server_key.serialize_pem()).unwrap();
}

/// `serve --api` over HTTPS with `cert` and `key` from `dir`: the process and its address.
fn serve_tls(
    s: &Scenario,
    dir: &Path,
    cert: &str,
    key: &str,
) -> (crate::common::serving::Running, String) {
    let cert = dir.join(cert);
    let key = dir.join(key);
    start_serving(
        s,
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
    )
}

#[test]
fn a_certificate_not_trusted_is_a_final_named_error_and_ca_cert_trusts_it() {
    let s = Scenario::database(None);
    s.run(&["migrate"], &[]).expect_code(0);
    s.run(&["queues"], &[]).expect_code(0);
    let token = |scope: &str| {
        s.run(&["token", "create", "--scope", scope], &[])
            .expect_code(0)
            .stdout
            .trim()
            .to_string()
    };
    let (reader, researcher) = (token("reader"), token("researcher"));
    let certs = tempfile::tempdir().unwrap();
    make_private_ca(certs.path());
    let ca = certs.path().join("ca.pem").display().to_string();
    let (_gateway, addr) = serve_tls(&s, certs.path(), "server.pem", "server-key.pem");
    let server = format!("https://{addr}");
    // Patient for an outage: a certificate problem must not use that patience.
    let env = |token: &str| {
        vec![
            ("ARCHIVIST_SERVER", server.clone()),
            ("ARCHIVIST_TOKEN", token.to_string()),
            ("ARCHIVIST_CONNECT_TIMEOUT", "60s".to_string()),
            ("DATABASE_URL", crate::common::api::NO_DATABASE.to_string()),
        ]
    };
    let run = |args: &[&str], env: &[(&str, String)]| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let started = Instant::now();
        let run = s.run(args, &env);
        (run, started.elapsed())
    };

    for (args, token) in [
        (vec!["status"], &reader),
        (vec!["matches"], &reader),
        (vec!["research", "--once"], &researcher),
    ] {
        let (untrusted, took) = run(&args, &env(token));
        let untrusted = untrusted.expect_code(2);
        assert!(
            untrusted.stderr.contains("UnknownIssuer") && untrusted.stderr.contains("--ca-cert"),
            "{args:?}: {}",
            untrusted.stderr
        );
        assert!(
            !untrusted.stderr.contains("unreachable"),
            "{args:?}: {}",
            untrusted.stderr
        );
        // Not retried as an outage would be (ARCHIVIST_CONNECT_TIMEOUT is a minute).
        assert!(took < Duration::from_secs(20), "{args:?} took {took:?}");

        let mut trusted = env(token);
        trusted.push(("ARCHIVIST_CA_CERT", ca.clone()));
        let (ok, _) = run(&args, &trusted);
        ok.expect_code(0);
    }
    // The flag does what the variable does.
    let flagged = ["status", "--json", "--ca-cert", ca.as_str()];
    let (ok, _) = run(&flagged, &env(&reader));
    let ok = ok.expect_code(0);
    assert!(ok.stdout.contains("\"research_pairs\""), "{}", ok.stdout);

    // The CA's own certificate served as the server's: named as such, even when trusted.
    let (_ca_gateway, ca_addr) = serve_tls(&s, certs.path(), "ca.pem", "ca-key.pem");
    let ca_server = format!("https://{ca_addr}");
    let mut as_server = env(&reader);
    as_server[0].1 = ca_server;
    as_server.push(("ARCHIVIST_CA_CERT", ca.clone()));
    let (refused, took) = run(&["status"], &as_server);
    let refused = refused.expect_code(2);
    assert!(
        refused.stderr.contains("CaUsedAsEndEntity"),
        "{}",
        refused.stderr
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");

    // A file that holds no certificate: exit 2, naming it.
    let bogus = certs.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate\n").unwrap();
    let mut bad = env(&reader);
    bad.push(("ARCHIVIST_CA_CERT", bogus.display().to_string()));
    let (refused, _) = run(&["status"], &bad);
    let refused = refused.expect_code(2);
    assert!(refused.stderr.contains("bogus.pem"), "{}", refused.stderr);
}
