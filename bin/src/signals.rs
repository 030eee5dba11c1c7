//! SIGINT and SIGTERM: the first cancels the token, so archivists stop between messages and
//! the process exits once they have; a second one exits at once.

use anyhow::Context;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// Installs the handlers and spawns the task that waits for the signals.
pub(crate) fn spawn(token: CancellationToken) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(
            signal = name,
            "stopping: finishing the messages in hand (signal again to exit at once)"
        );
        token.cancel();
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::warn!("second signal: exiting without waiting");
        std::process::exit(130);
    });
    Ok(())
}
