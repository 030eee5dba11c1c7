//! Logs: standard error, filtered by RUST_LOG (default `info`), as text coloured only on a
//! terminal and never with NO_COLOR set, or with ARCHIVIST_LOG_FORMAT=json as one JSON object
//! a line for a log system; standard output is kept for the commands' output. A closed
//! standard error drops log lines instead of panicking, and the demo's progress bar is
//! cleared around each line so that no stale frame is left.

use std::io::{IsTerminal, Write};
use std::sync::{Mutex, PoisonError};

use indicatif::ProgressBar;
use tracing_subscriber::EnvFilter;

use crate::values::UsageError;

/// The log filter when RUST_LOG is not set. sqlx logs Postgres notices ("relation already
/// exists, skipping" on every migration check) at info; lapin logs every channel the broker
/// closes as an error, and the RabbitMQ bus closes one on purpose each time it asks whether
/// a queue exists (its errors reach the archivist as results, said where they matter);
/// symphonia's probe logs each format it rules out as an error and its readers chat at info
/// (`analyse` says once what went wrong, naming the file).
const LOG_FILTER: &str = "info,sqlx=warn,lapin=off,symphonia=off";
/// The demo's log filter when RUST_LOG is not set: its archivists run many short runs a
/// second, so it shows only their warnings; its own progress lines stay at `info`.
const DEMO_LOG_FILTER: &str =
    "info,sqlx=warn,lapin=off,archivist::runner=warn,archivist::ingest=warn,\
archivist::pending_research=warn,archivist::completed_research=warn";

/// The progress bar on standard error, if one is drawn: log lines suspend it.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Starts logging in `format` (`text` or `json`). An invalid RUST_LOG or format is a usage
/// error naming it.
pub(crate) fn init(demo: bool, format: &str) -> Result<(), UsageError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(v.trim())
            .map_err(|e| UsageError(format!("invalid RUST_LOG {v:?}: {e}")))?,
        _ => EnvFilter::new(if demo { DEMO_LOG_FILTER } else { LOG_FILTER }),
    };
    match format.trim() {
        "" | "text" => {
            // https://no-color.org: set and not empty means no colour.
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(|| QuietStderr)
                .with_ansi(std::io::stderr().is_terminal() && !no_color)
                .with_target(false)
                .init();
        }
        "json" => {
            // Event fields (`message_id`, `lease_id`, …) at the top level; the archivist's
            // name is its span's field (`span.archivist`).
            tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .with_env_filter(filter)
                .with_writer(|| QuietStderr)
                .init();
        }
        other => {
            return Err(UsageError(format!(
                "invalid ARCHIVIST_LOG_FORMAT (--log-format) {other:?}: expected text or json"
            )))
        }
    }
    Ok(())
}

/// Draws `bar` on standard error from now on; log lines clear it while they are written.
pub(crate) fn show_bar(bar: &ProgressBar) {
    *BAR.lock().unwrap_or_else(PoisonError::into_inner) = Some(bar.clone());
}

/// No bar any more.
pub(crate) fn hide_bar() {
    *BAR.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

/// Standard error for the logs, where a write that fails (the reader closed the pipe:
/// `archivist demo 2>&1 | head`) is dropped: tracing-subscriber would otherwise report it on
/// that same closed stream, and panic doing so.
struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = BAR.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let write = || {
            let _ = std::io::stderr().write_all(buf);
        };
        match bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
