//! Test-only stopping points, for the end-to-end tests that kill or signal the binary at an
//! exact moment instead of guessing it with a sleep. Without the feature `fail-points` they
//! compile to nothing.
//!
//! - `ARCHIVIST_FAIL_POINT=<name>`: a process that reaches the point prints
//!   `fail point <name> reached` on standard error and stops there for good (inside an open
//!   transaction, holding its messages), so that a test can SIGKILL it, or signal it and watch
//!   it stop without that part.
//! - `ARCHIVIST_PAUSE_POINT=<name>`: prints `pause point <name> reached` and waits there until
//!   shutdown is requested (the token given to [`resume_pauses_on`], which SIGINT and SIGTERM
//!   cancel), then prints `pause point <name> resumed` and goes on: a test sends the signal
//!   at the busiest moment and checks that the work in hand is finished or released.

use tokio_util::sync::CancellationToken;

#[cfg(feature = "fail-points")]
static RESUME: std::sync::OnceLock<CancellationToken> = std::sync::OnceLock::new();

/// Pause points resume once `token` is cancelled (the process's shutdown token). Without it
/// they never resume. Does nothing without the feature `fail-points`.
pub fn resume_pauses_on(token: &CancellationToken) {
    #[cfg(feature = "fail-points")]
    let _ = RESUME.set(token.clone());
    #[cfg(not(feature = "fail-points"))]
    let _ = token;
}

/// Stops (`ARCHIVIST_FAIL_POINT`) or pauses (`ARCHIVIST_PAUSE_POINT`) here when the variable
/// names `name` (feature `fail-points`).
pub async fn fail_point(name: &str) {
    #[cfg(feature = "fail-points")]
    {
        if std::env::var("ARCHIVIST_FAIL_POINT").is_ok_and(|p| p == name) {
            eprintln!("fail point {name} reached");
            std::future::pending::<()>().await;
        }
        if std::env::var("ARCHIVIST_PAUSE_POINT").is_ok_and(|p| p == name) {
            eprintln!("pause point {name} reached");
            match RESUME.get() {
                Some(token) => token.cancelled().await,
                None => std::future::pending::<()>().await,
            }
            eprintln!("pause point {name} resumed");
        }
    }
    #[cfg(not(feature = "fail-points"))]
    let _ = name;
}
