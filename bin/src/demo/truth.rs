//! The analyser's answers, as recorded in the datastore, against the truth of the demo's
//! audio (where `audio.rs` put each clip): how many occurrences were found, how far off
//! their offsets were, and whether anything was found where nothing was put.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use datastore::Match;
use serde::Serialize;

use crate::demo::curators::DataSet;

/// A found offset within this of a true one is a hit; any other is a false match (the
/// analysis benchmark's rule).
const HIT_NS: i64 = 100_000_000;

/// The analyser against the truth.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(crate) struct Check {
    /// Clip occurrences put into the episodes.
    pub(crate) occurrences: u64,
    /// Of those, found (an offset recorded within 100 ms).
    pub(crate) found: u64,
    /// `found / occurrences`.
    pub(crate) recall: f64,
    /// Offsets recorded where no clip was put.
    pub(crate) false_matches: u64,
    /// Pairs whose clip was never put in the episode, and of those, any matched.
    pub(crate) absent_pairs: u64,
    pub(crate) absent_pairs_matched: u64,
    /// How far the found offsets were from the true ones, in milliseconds.
    pub(crate) offset_error_ms_median: f64,
    pub(crate) offset_error_ms_p95: f64,
    pub(crate) offset_error_ms_max: f64,
}

/// Compares `matches` (every match recorded) with the data set's truth.
pub(crate) fn check(data: &DataSet, matches: &[Match]) -> Check {
    check_clips(data, matches, |_| true)
}

/// [`check`] for the clips of [`crate::demo::clips::CLIPS`] whose index `only` keeps.
pub(crate) fn check_clips(
    data: &DataSet,
    matches: &[Match],
    only: impl Fn(usize) -> bool,
) -> Check {
    let recorded: HashMap<(&str, DateTime<Utc>, &str), &[i64]> = matches
        .iter()
        .map(|m| {
            (
                (
                    m.episode_title.as_str(),
                    m.episode_date_aired,
                    m.clip_title.as_str(),
                ),
                m.clip_offsets_ns.as_slice(),
            )
        })
        .collect();
    let mut c = Check::default();
    let mut errors = Vec::new();
    for (episode, plan) in data.episodes.iter().zip(&data.plans) {
        for (index, (clip, truth)) in data.clips.iter().zip(plan.truth()).enumerate() {
            if !only(index) {
                continue;
            }
            let found = recorded
                .get(&(
                    episode.title.as_str(),
                    episode.date_aired,
                    clip.title.as_str(),
                ))
                .copied()
                .unwrap_or_default();
            if truth.is_empty() {
                c.absent_pairs += 1;
                c.absent_pairs_matched += u64::from(!found.is_empty());
            }
            c.occurrences += truth.len() as u64;
            for t in &truth {
                if let Some(e) = found.iter().map(|f| (f - t).abs()).min() {
                    if e <= HIT_NS {
                        c.found += 1;
                        errors.push(e as f64 / 1e6);
                    }
                }
            }
            c.false_matches += found
                .iter()
                .filter(|f| truth.iter().all(|t| (*f - t).abs() > HIT_NS))
                .count() as u64;
        }
    }
    c.recall = if c.occurrences == 0 {
        1.0
    } else {
        c.found as f64 / c.occurrences as f64
    };
    errors.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((errors.len() as f64 - 1.0) * q).round().max(0.0) as usize;
        errors.get(i).copied().unwrap_or(0.0)
    };
    c.offset_error_ms_median = at(0.5);
    c.offset_error_ms_p95 = at(0.95);
    c.offset_error_ms_max = errors.last().copied().unwrap_or(0.0);
    c
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::demo::curators::data_set;

    fn truthful(data: &DataSet, shift_ns: i64) -> Vec<Match> {
        let mut out = Vec::new();
        for (e, plan) in data.episodes.iter().zip(&data.plans) {
            for (c, truth) in data.clips.iter().zip(plan.truth()) {
                if !truth.is_empty() {
                    out.push(Match {
                        episode_title: e.title.clone(),
                        episode_date_aired: e.date_aired,
                        clip_title: c.title.clone(),
                        clip_offsets_ns: truth.iter().map(|t| t + shift_ns).collect(),
                        clip_match_scores: None,
                        research_date: Utc::now(),
                        episode_media_sha256: None,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn the_truth_itself_scores_perfectly_and_errors_are_measured() {
        let data = data_set(std::path::Path::new("/tmp/demo-media"));
        let c = check(&data, &truthful(&data, 0));
        assert!(c.occurrences > 50, "{c:?}");
        assert_eq!(c.found, c.occurrences);
        assert_eq!(c.false_matches, 0);
        assert!(c.absent_pairs > 0);
        assert_eq!(c.absent_pairs_matched, 0);
        assert_eq!(c.offset_error_ms_max, 0.0);

        let off = check(&data, &truthful(&data, 7_000_000));
        assert_eq!(off.found, off.occurrences);
        assert_eq!(off.offset_error_ms_median, 7.0);

        let wrong = check(&data, &truthful(&data, 2_000_000_000));
        assert_eq!(wrong.found, 0);
        assert_eq!(wrong.recall, 0.0);
        assert_eq!(wrong.false_matches, wrong.occurrences);
    }
}
