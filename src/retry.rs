use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Backoff for passing failures (a datastore restarting, a pool timeout): exponential with
/// full jitter, bounded by a number of attempts. Errors that are not retryable fail at once.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all, the first included. At least 1.
    pub max_attempts: u32,
    /// The wait before the second attempt; doubled each time.
    pub initial_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// How long to keep retrying one operation, from its first failure (None: only
    /// `max_attempts` limits it). A cron run's budget; long-running archivists have none.
    pub budget: Option<Duration>,
}

impl Default for RetryPolicy {
    /// Eight attempts over roughly half a minute.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            budget: None,
        }
    }
}

/// Why [`RetryPolicy::run`] gave up.
#[derive(Debug)]
pub enum RetryError<E> {
    /// The last error: not retryable, or the attempts ran out.
    Failed(E),
    /// The token was cancelled while waiting to retry.
    Cancelled(E),
}

impl RetryPolicy {
    /// No retries: one attempt. For tests that want failures to surface at once.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Retries for at most `budget` after an operation's first failure, however many
    /// attempts that takes: a cron-style run gives up (and exits) past it.
    pub fn within(budget: Duration) -> Self {
        RetryPolicy {
            max_attempts: u32::MAX,
            budget: Some(budget),
            ..RetryPolicy::default()
        }
    }

    /// Retries passing failures for as long as they last: long-running archivists ride out
    /// outages (the backoff stays capped at `max_backoff`).
    pub fn forever() -> Self {
        RetryPolicy {
            max_attempts: u32::MAX,
            budget: None,
            ..RetryPolicy::default()
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX));
        let cap = exp.min(self.max_backoff);
        // Full jitter: concurrent archivists retrying the same database spread out.
        cap.mul_f64(rand::random::<f64>())
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` rejects, or the attempts
    /// run out. Waits between attempts end early when `token` is cancelled.
    pub async fn run<T, E, F, Fut>(
        &self,
        token: &CancellationToken,
        retryable: impl Fn(&E) -> bool,
        mut op: F,
    ) -> Result<T, RetryError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut attempt: u32 = 0;
        let mut first_failure: Option<tokio::time::Instant> = None;
        loop {
            attempt = attempt.saturating_add(1);
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if !retryable(&e) || attempt >= self.max_attempts.max(1) => {
                    return Err(RetryError::Failed(e))
                }
                Err(e) => {
                    let mut wait = self.backoff(attempt - 1);
                    if let Some(budget) = self.budget {
                        let since = *first_failure.get_or_insert_with(tokio::time::Instant::now);
                        let left = budget.saturating_sub(since.elapsed());
                        if left.is_zero() {
                            return Err(RetryError::Failed(e));
                        }
                        // The last attempt falls at the end of the budget, not after it.
                        wait = wait.min(left);
                    }
                    tracing::debug!(attempt, ?wait, "retrying after a passing failure");
                    tokio::select! {
                        _ = token.cancelled() => return Err(RetryError::Cancelled(e)),
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn retries_retryable_errors_until_success() {
        let calls = AtomicU32::new(0);
        let policy = RetryPolicy::default();
        let out: Result<u32, RetryError<&str>> = policy
            .run(
                &CancellationToken::new(),
                |_| true,
                || async {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    if n < 3 {
                        Err("down")
                    } else {
                        Ok(n)
                    }
                },
            )
            .await;
        assert!(matches!(out, Ok(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_at_once_on_permanent_errors_and_after_max_attempts() {
        let calls = AtomicU32::new(0);
        let policy = RetryPolicy {
            max_attempts: 4,
            ..RetryPolicy::default()
        };
        let out: Result<(), _> = policy
            .run(
                &CancellationToken::new(),
                |_| false,
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err("poison")
                },
            )
            .await;
        assert!(matches!(out, Err(RetryError::Failed("poison"))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let out: Result<(), _> = policy
            .run(
                &CancellationToken::new(),
                |_| true,
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err("down")
                },
            )
            .await;
        assert!(matches!(out, Err(RetryError::Failed("down"))));
        assert_eq!(calls.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_bounds_the_time_spent_retrying() {
        let calls = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let out: Result<(), _> = RetryPolicy::within(Duration::from_secs(60))
            .run(
                &CancellationToken::new(),
                |_| true,
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err("down")
                },
            )
            .await;
        assert!(matches!(out, Err(RetryError::Failed("down"))));
        let spent = start.elapsed();
        assert!(spent >= Duration::from_secs(60), "{spent:?}");
        assert!(spent < Duration::from_secs(61), "{spent:?}");
        // Capped backoff: many attempts, not a handful of ever longer waits.
        assert!(calls.load(Ordering::SeqCst) > 8);
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_ends_the_wait() {
        let token = CancellationToken::new();
        token.cancel();
        let out: Result<(), _> = RetryPolicy::default()
            .run(&token, |_| true, || async { Err("down") })
            .await;
        assert!(matches!(out, Err(RetryError::Cancelled("down"))));
    }
}
