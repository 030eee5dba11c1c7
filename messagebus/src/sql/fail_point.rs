//! Test-only crash points inside the database bus's transactions.
//!
//! With the feature `fail-points` on and `ARCHIVIST_FAIL_POINT` naming a point, a process that
//! reaches it prints `fail point <name> reached` on standard error and stops there for good,
//! inside its open transaction, so that a test can SIGKILL it at exactly that moment and check
//! what the database kept. Without the feature it compiles to nothing.

/// Stops the process here if `ARCHIVIST_FAIL_POINT` names `name` (feature `fail-points`).
pub async fn fail_point(name: &str) {
    #[cfg(feature = "fail-points")]
    if std::env::var("ARCHIVIST_FAIL_POINT").is_ok_and(|p| p == name) {
        eprintln!("fail point {name} reached");
        std::future::pending::<()>().await;
    }
    #[cfg(not(feature = "fail-points"))]
    let _ = name;
}
