//! TLS to Postgres: a cluster of the test's own that takes TLS connections only, with a
//! self-signed certificate authority made here. `sslmode=require` connects (encrypted, the
//! certificate not checked, as managed Postgres services are used); `verify-full` with the
//! authority's certificate (`sslrootcert=`) checks it; without it the certificate is refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::archivist;
use crate::common::cluster::Cluster;

#[test]
fn postgres_over_tls_with_require_and_verify_full() {
    let cluster = Cluster::start_tls_only();
    let dir = tempfile::tempdir().unwrap();
    let base = cluster.url();
    let quick = ("ARCHIVIST_CONNECT_TIMEOUT", "3s");

    // The server refuses connections without TLS: what follows is encrypted.
    let plain = format!("{base}?sslmode=disable");
    let run = archivist(dir.path(), &["migrate"], &[("DATABASE_URL", &plain), quick]);
    assert_ne!(run.code, 0, "{run:?}");

    let require = format!("{base}?sslmode=require");
    let run = archivist(dir.path(), &["migrate"], &[("DATABASE_URL", &require)]).expect_code(0);
    assert!(run.stderr.contains("applied"), "{}", run.stderr);
    let run = archivist(
        dir.path(),
        &["status", "--json"],
        &[("DATABASE_URL", &require)],
    )
    .expect_code(0);
    let status: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(status["episodes"], 0, "{status}");
    // The database bus in the same database, over the same TLS.
    archivist(dir.path(), &["queues"], &[("DATABASE_URL", &require)]).expect_code(0);

    let ca = cluster.ca_file();
    let verified = format!("{base}?sslmode=verify-full&sslrootcert={}", ca.display());
    archivist(dir.path(), &["status"], &[("DATABASE_URL", &verified)]).expect_code(0);

    // verify-full with only the public roots: the self-signed authority is not trusted.
    let unknown_ca = format!("{base}?sslmode=verify-full");
    let run = archivist(
        dir.path(),
        &["status"],
        &[("DATABASE_URL", &unknown_ca), quick],
    );
    assert_ne!(run.code, 0, "{run:?}");
    assert!(
        run.stderr.to_lowercase().contains("certificate"),
        "{}",
        run.stderr
    );
}
