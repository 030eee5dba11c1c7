//! The research progress over time: samples of (time, researched pairs, pairs, matches)
//! kept in this process, from a sampler (`app.rs`) and from each read of the counts. Nothing
//! is stored: a restarted server starts a new history.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};
use datastore::Status;
use serde::Serialize;

/// Samples kept: two hours at the sampler's pace (more when pages are loaded often).
const CAPACITY: usize = 720;
/// A read closer than this to the last sample adds none but brings that sample's counts up to
/// date: a page loaded by many at once, or reloaded in a loop, adds one a second at most, and
/// the latest sample is still what the page shows.
const MIN_GAP: chrono::Duration = chrono::Duration::seconds(1);
/// The span the progress rate is taken over.
const RATE_WINDOW: chrono::Duration = chrono::Duration::minutes(5);

/// One reading of the counts.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Sample {
    pub(crate) at: DateTime<Utc>,
    pub(crate) researched_pairs: u64,
    pub(crate) research_pairs: u64,
    pub(crate) matched_pairs: u64,
}

/// The samples, oldest first.
#[derive(Debug, Default)]
pub(crate) struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// Records `status` as read at `at`.
    pub(crate) fn record(&self, at: DateTime<Utc>, status: &Status) {
        let sample = Sample {
            at,
            researched_pairs: status.researched_pairs,
            research_pairs: status.research_pairs,
            matched_pairs: status.matched_pairs,
        };
        // No code panics while holding the lock; a poisoned one still holds whole samples.
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = samples.back_mut().filter(|last| at - last.at < MIN_GAP) {
            *last = Sample {
                at: last.at,
                ..sample
            };
            return;
        }
        samples.push_back(sample);
        while samples.len() > CAPACITY {
            samples.pop_front();
        }
    }

    /// Every sample, oldest first.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples.iter().copied().collect()
    }
}

/// Pairs researched per minute over the last [`RATE_WINDOW`] of `samples` (oldest first);
/// `None` before two samples a few seconds apart.
pub(crate) fn rate_per_minute(samples: &[Sample]) -> Option<f64> {
    let last = samples.last()?;
    let first = samples.iter().find(|s| last.at - s.at <= RATE_WINDOW)?;
    let seconds = (last.at - first.at).num_milliseconds() as f64 / 1000.0;
    if seconds < 5.0 {
        return None;
    }
    let done = last.researched_pairs.saturating_sub(first.researched_pairs) as f64;
    Some(done * 60.0 / seconds)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn status(researched: u64) -> Status {
        Status {
            research_pairs: 100,
            researched_pairs: researched,
            ..Status::default()
        }
    }

    #[test]
    fn close_reads_add_no_sample_and_the_oldest_go() {
        let h = History::default();
        let t0 = Utc::now();
        h.record(t0, &status(1));
        // Reads every half second add one sample a second, however long they go on.
        for i in 1..=4 {
            h.record(t0 + chrono::Duration::milliseconds(500 * i), &status(2));
        }
        let at: Vec<_> = h.samples().iter().map(|s| s.at - t0).collect();
        assert_eq!(
            at,
            [
                chrono::Duration::zero(),
                chrono::Duration::seconds(1),
                chrono::Duration::seconds(2)
            ]
        );
        for i in 1..=(CAPACITY as i64 + 5) {
            h.record(t0 + chrono::Duration::seconds(i), &status(i as u64));
        }
        let samples = h.samples();
        assert_eq!(samples.len(), CAPACITY);
        assert_eq!(
            samples.last().unwrap().researched_pairs,
            CAPACITY as u64 + 5
        );
    }

    #[test]
    fn rate_over_the_window() {
        let h = History::default();
        let t0 = Utc::now();
        assert_eq!(rate_per_minute(&h.samples()), None);
        h.record(t0, &status(0));
        h.record(t0 + chrono::Duration::minutes(10), &status(10));
        h.record(t0 + chrono::Duration::minutes(12), &status(30));
        // Only the last two are within five minutes of the newest: 20 pairs in 2 minutes.
        assert_eq!(rate_per_minute(&h.samples()), Some(10.0));
    }
}
