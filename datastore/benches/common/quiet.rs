//! Turns on a shared machine: several long benchmarks can run at once and still measure alone.
//!
//! `ARCHIVIST_BENCH_QUIET_DIR` names a directory that every cooperating benchmark shares. A
//! benchmark that measures puts a file of its own there for as long as it measures
//! ([`hold`]); one that only drives work towards its next measurement ([`wait_turn`]) pauses
//! while any other's file is there. So two lives can be driven side by side on two cores, while
//! each one's figures are taken with the other paused. `scripts/bench-quietly.sh` holds a turn
//! for any other command (the pipeline and bus benchmarks). Unset: nothing waits.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn dir() -> Option<PathBuf> {
    std::env::var_os("ARCHIVIST_BENCH_QUIET_DIR").map(PathBuf::from)
}

fn own_prefix() -> String {
    format!("{}-", std::process::id())
}

/// The other holders' files (named pid-time-what).
fn others(dir: &PathBuf) -> Vec<String> {
    let own = own_prefix();
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with(&own) && !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// Pauses while another benchmark measures.
pub(crate) async fn wait_turn() {
    let Some(dir) = dir() else { return };
    let mut said = false;
    while !others(&dir).is_empty() {
        if !said {
            eprintln!("   (paused while another benchmark measures)");
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// This process measures: the others pause until the guard is dropped.
pub(crate) struct Turn(Option<PathBuf>);

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Waits until nobody else measures, then takes the turn. Files are named by the time they
/// were made, so of two that appear together the earlier keeps its turn and the later waits.
pub(crate) async fn hold(what: &str) -> Turn {
    let Some(dir) = dir() else { return Turn(None) };
    std::fs::create_dir_all(&dir).expect("ARCHIVIST_BENCH_QUIET_DIR: a directory we can write");
    loop {
        wait_turn().await;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        // pid-time-what: the pid marks it ours for `others`, the time orders it.
        let path = dir.join(format!("{}{nanos:020}-{what}", own_prefix()));
        std::fs::write(&path, b"").expect("ARCHIVIST_BENCH_QUIET_DIR: a directory we can write");
        let turn = Turn(Some(path));
        // Another that came at the same moment: the earlier file (by time) keeps the turn.
        let earlier = others(&dir).into_iter().any(|o| {
            o.split('-')
                .nth(1)
                .is_some_and(|t| t < format!("{nanos:020}").as_str())
        });
        if !earlier {
            // Drivers look between steps: give a step in flight time to end.
            tokio::time::sleep(Duration::from_millis(500)).await;
            return turn;
        }
        drop(turn);
    }
}
