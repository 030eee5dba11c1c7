//! The analyser protocol's lines (the book's chapter docs/src/researchers.md, the contract's
//! *analyser protocol*): parsing one line of an analyser's output and checking it against the
//! work item, and the work item as the analyser reads it (with `media_path` beside each
//! `media_uri`).
//!
//! A line is one JSON object, one of:
//!
//! - `{"clip_title": T, "clip_offsets_ns": [..], "clip_duration_ns": N, "episode_duration_ns": N}`
//!   (optionally `"clip_match_scores": [..]`, one score from 0 to 1 per offset, in their
//!   order, and `"clip_findable_from_db": N`, how findable the clip is: the level above its
//!   background, in dB, from which it is found, `null` when not even at the loudest level
//!   tried; `"episode_hash"`/`"clip_hash"` are ignored: the researcher hashes the files);
//! - `{"clip_title": T, "failure": "reason"}`: the pair cannot be researched, for good;
//! - `{"progress": "…"}`: the analyser is alive.
//!
//! Anything else fails the item, with the line named.

use std::collections::HashMap;

use archivist::messages::{
    check_findable_from_db, check_scores, PendingResearchItem, MAX_DURATION_NS, MAX_OFFSETS,
    MAX_SHORT_TEXT,
};
use serde::Deserialize;

/// The longest line an analyser may write, in bytes: a result as large as a bus message.
pub const MAX_LINE_BYTES: usize = messagebus::MAX_BODY_BYTES;

/// One valid line.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Line {
    /// The clip was looked for.
    Answer {
        /// The clip, as the work item names it.
        clip_title: String,
        /// Where the clip starts in the episode, in nanoseconds: sorted, without duplicates,
        /// each within the episode. Empty: not found.
        clip_offsets_ns: Vec<i64>,
        /// How sure the analyser is of each offset, from 0 to 1, in the order of
        /// `clip_offsets_ns` (sorted with them; of duplicate offsets, the highest score);
        /// `None` when it gave none.
        clip_match_scores: Option<Vec<f64>>,
        /// How findable the clip is, when the analyser predicted it: `Some(None)` when it is
        /// not found even at the loudest level tried.
        clip_findable_from_db: Option<Option<i32>>,
        /// The clip's length, in nanoseconds.
        clip_duration_ns: i64,
        /// The episode's length, in nanoseconds.
        episode_duration_ns: i64,
    },
    /// The pair cannot be researched, for a reason that will not pass.
    Failure {
        /// The clip, as the work item names it.
        clip_title: String,
        /// Why, cut to the messages' short-text limit.
        reason: String,
    },
    /// The analyser is alive; the text is for the log and the status.
    Progress(String),
}

impl Line {
    /// The clip the line answers, if it answers one.
    pub fn clip_title(&self) -> Option<&str> {
        match self {
            Line::Answer { clip_title, .. } | Line::Failure { clip_title, .. } => Some(clip_title),
            Line::Progress(_) => None,
        }
    }
}

/// A line as written, before the rules are checked.
#[derive(Debug, Deserialize)]
struct RawLine {
    clip_title: Option<String>,
    clip_offsets_ns: Option<Vec<i64>>,
    clip_match_scores: Option<Vec<f64>>,
    /// Absent: not predicted; `null`: not found even at the loudest level tried.
    #[serde(default, deserialize_with = "present")]
    clip_findable_from_db: Option<Option<i32>>,
    clip_duration_ns: Option<i64>,
    episode_duration_ns: Option<i64>,
    failure: Option<String>,
    progress: Option<String>,
}

/// A field that may be absent, or present with a value of its type (`null` included).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// Parses one line of analyser output and checks it against `clips` (the titles the analyser
/// was given, each answered at most once: `answered` holds those answered so far in this run).
/// The error says what is wrong, for the item's failure reason.
pub fn parse_line(
    line: &str,
    clips: &HashMap<String, usize>,
    answered: &std::collections::HashSet<String>,
) -> Result<Line, String> {
    let trimmed = line.trim();
    if !trimmed.starts_with('{') {
        return Err("not a JSON object".into());
    }
    let raw: RawLine =
        serde_json::from_str(trimmed).map_err(|e| format!("not a valid JSON line: {e}"))?;
    if let Some(progress) = raw.progress {
        if raw.clip_title.is_some() {
            return Err("a progress line names no clip".into());
        }
        return Ok(Line::Progress(
            progress.chars().take(MAX_SHORT_TEXT).collect(),
        ));
    }
    let Some(clip_title) = raw.clip_title else {
        return Err("no `clip_title` (nor `progress`)".into());
    };
    if !clips.contains_key(&clip_title) {
        return Err(format!("unknown clip {clip_title:?}: not in the work item"));
    }
    if answered.contains(&clip_title) {
        return Err(format!("clip {clip_title:?} answered twice"));
    }
    if let Some(reason) = raw.failure {
        if raw.clip_offsets_ns.is_some() {
            return Err("`failure` and `clip_offsets_ns` together: give one".into());
        }
        if raw.clip_match_scores.is_some() {
            return Err("`failure` and `clip_match_scores` together: give one".into());
        }
        let reason = reason.trim();
        if reason.is_empty() {
            return Err("an empty `failure` reason".into());
        }
        if reason.contains('\0') {
            return Err("a `failure` reason with a NUL character".into());
        }
        return Ok(Line::Failure {
            clip_title,
            reason: truncate(reason, MAX_SHORT_TEXT),
        });
    }
    let offsets = raw
        .clip_offsets_ns
        .ok_or("no `clip_offsets_ns` (nor `failure`)")?;
    let episode_duration_ns = raw.episode_duration_ns.ok_or("no `episode_duration_ns`")?;
    let clip_duration_ns = raw.clip_duration_ns.ok_or("no `clip_duration_ns`")?;
    for (name, ns) in [
        ("episode_duration_ns", episode_duration_ns),
        ("clip_duration_ns", clip_duration_ns),
    ] {
        if !(0..=MAX_DURATION_NS).contains(&ns) {
            return Err(format!(
                "{name} {ns} is not between 0 and {MAX_DURATION_NS}"
            ));
        }
    }
    if offsets.len() > MAX_OFFSETS {
        return Err(format!("more than {MAX_OFFSETS} offsets"));
    }
    if let Some(bad) = offsets.iter().find(|&&o| o < 0 || o > episode_duration_ns) {
        return Err(format!(
            "offset {bad} is outside the episode (0 to episode_duration_ns {episode_duration_ns})"
        ));
    }
    let clip_findable_from_db = raw.clip_findable_from_db;
    if let Some(Some(db)) = clip_findable_from_db {
        check_findable_from_db(db).map_err(|e| format!("clip_findable_from_db: {e}"))?;
    }
    let Some(scores) = raw.clip_match_scores else {
        let mut offsets = offsets;
        offsets.sort_unstable();
        offsets.dedup();
        return Ok(Line::Answer {
            clip_title,
            clip_offsets_ns: offsets,
            clip_match_scores: None,
            clip_findable_from_db,
            clip_duration_ns,
            episode_duration_ns,
        });
    };
    check_scores(&scores, offsets.len()).map_err(|e| format!("clip_match_scores: {e}"))?;
    let mut scored: Vec<(i64, f64)> = offsets.into_iter().zip(scores).collect();
    // By offset, the highest score first: dedup keeps it.
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    scored.dedup_by_key(|p| p.0);
    let (offsets, scores) = scored.into_iter().unzip();
    Ok(Line::Answer {
        clip_title,
        clip_offsets_ns: offsets,
        clip_match_scores: Some(scores),
        clip_findable_from_db,
        clip_duration_ns,
        episode_duration_ns,
    })
}

/// At most `max` characters of `text`.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// A line as named in an error: at most 200 characters of it.
pub(crate) fn shown(line: &str) -> String {
    let cut: String = line.chars().take(200).collect();
    if cut.len() < line.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// The work item as the analyser reads it: `item` with `media_path` beside the episode's and
/// each given clip's `media_uri`. `clip_paths` holds the clips to analyse, in the item's
/// order; clips left out (their media is gone) are not given.
pub fn analyser_input(
    item: &PendingResearchItem,
    episode_path: &str,
    clip_paths: &[(usize, String)],
) -> Vec<u8> {
    let mut episode = serde_json::to_value(&item.episode).unwrap_or_default();
    if let Some(map) = episode.as_object_mut() {
        map.insert("media_path".into(), episode_path.into());
    }
    let clips: Vec<serde_json::Value> = clip_paths
        .iter()
        .filter_map(|(i, path)| {
            let mut clip = serde_json::to_value(item.clips.get(*i)?).ok()?;
            if let Some(map) = clip.as_object_mut() {
                map.insert("media_path".into(), path.as_str().into());
            }
            Some(clip)
        })
        .collect();
    let value = serde_json::json!({
        "lease_id": item.lease_id,
        "lease_expires_at": item.lease_expires_at,
        "episode": episode,
        "clips": clips,
    });
    let mut body = serde_json::to_vec(&value).unwrap_or_default();
    body.push(b'\n');
    body
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::collections::HashSet;

    fn clips() -> HashMap<String, usize> {
        [("A".to_string(), 0), ("B".to_string(), 1)]
            .into_iter()
            .collect()
    }

    #[test]
    fn an_answer_may_say_how_findable_its_clip_is() {
        let none = HashSet::new();
        let line = |f: &str| {
            format!(
                r#"{{"clip_title":"A","clip_offsets_ns":[10],"clip_duration_ns":5,"episode_duration_ns":100{f}}}"#
            )
        };
        let findable = |f: &str| match parse_line(&line(f), &clips(), &none) {
            Ok(Line::Answer {
                clip_findable_from_db,
                ..
            }) => Ok(clip_findable_from_db),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(findable(""), Ok(None));
        assert_eq!(
            findable(r#","clip_findable_from_db":-6"#),
            Ok(Some(Some(-6)))
        );
        assert_eq!(findable(r#","clip_findable_from_db":null"#), Ok(Some(None)));
        let scored = r#","clip_match_scores":[0.5],"clip_findable_from_db":6"#;
        assert_eq!(findable(scored), Ok(Some(Some(6))));
        let err = findable(r#","clip_findable_from_db":500"#).unwrap_err();
        assert!(err.contains("clip_findable_from_db"), "{err}");
        assert!(findable(r#","clip_findable_from_db":"loud""#).is_err());
    }

    #[test]
    fn parses_the_three_kinds() {
        let none = HashSet::new();
        assert_eq!(
            parse_line(
                r#"{"clip_title":"A","clip_offsets_ns":[30,10],"clip_duration_ns":5,"episode_duration_ns":100}"#,
                &clips(),
                &none
            )
            .unwrap(),
            Line::Answer {
                clip_title: "A".into(),
                clip_offsets_ns: vec![10, 30],
                clip_match_scores: None,
                clip_duration_ns: 5,
                episode_duration_ns: 100,
                clip_findable_from_db: None,
            }
        );
        assert_eq!(
            parse_line(
                r#"{"clip_title":"A","clip_offsets_ns":[30,10,30],"clip_match_scores":[0.5,1,0.75],"clip_duration_ns":5,"episode_duration_ns":100}"#,
                &clips(),
                &none
            )
            .unwrap(),
            Line::Answer {
                clip_title: "A".into(),
                clip_offsets_ns: vec![10, 30],
                clip_match_scores: Some(vec![1.0, 0.75]),
                clip_duration_ns: 5,
                episode_duration_ns: 100,
                clip_findable_from_db: None,
            }
        );
        assert_eq!(
            parse_line(
                r#"{"clip_title":"B","failure":"not audio"}"#,
                &clips(),
                &none
            )
            .unwrap(),
            Line::Failure {
                clip_title: "B".into(),
                reason: "not audio".into()
            }
        );
        assert_eq!(
            parse_line(r#" {"progress":"half"} "#, &clips(), &none).unwrap(),
            Line::Progress("half".into())
        );
    }

    #[test]
    fn names_what_is_wrong() {
        let answered: HashSet<String> = ["A".to_string()].into_iter().collect();
        for (line, expect) in [
            ("garbage", "not a JSON object"),
            ("{nope", "not a valid JSON line"),
            (r#"{"clip_title":"Z","failure":"x"}"#, "unknown clip"),
            (r#"{"clip_title":"A","failure":"x"}"#, "answered twice"),
            (r#"{"clip_title":"B","failure":" "}"#, "empty"),
            (
                r#"{"clip_title":"B","clip_offsets_ns":[101],"clip_duration_ns":5,"episode_duration_ns":100}"#,
                "outside the episode",
            ),
            (
                r#"{"clip_title":"B","clip_offsets_ns":[-1],"clip_duration_ns":5,"episode_duration_ns":100}"#,
                "outside the episode",
            ),
            (
                r#"{"clip_title":"B","clip_offsets_ns":[]}"#,
                "episode_duration_ns",
            ),
            (r#"{"other":1}"#, "no `clip_title`"),
            (
                r#"{"clip_title":"B","clip_offsets_ns":[1,2],"clip_match_scores":[0.5],"clip_duration_ns":5,"episode_duration_ns":100}"#,
                "one score per offset, in their order (scores: 1, offsets: 2)",
            ),
            (
                r#"{"clip_title":"B","clip_offsets_ns":[1],"clip_match_scores":[1.5],"clip_duration_ns":5,"episode_duration_ns":100}"#,
                "score 1.5 is not a number from 0 to 1",
            ),
            (
                r#"{"clip_title":"B","clip_offsets_ns":[1],"clip_match_scores":[-0.1],"clip_duration_ns":5,"episode_duration_ns":100}"#,
                "not a number from 0 to 1",
            ),
            (
                r#"{"clip_title":"B","clip_offsets_ns":[1],"clip_match_scores":["high"],"clip_duration_ns":5,"episode_duration_ns":100}"#,
                "not a valid JSON line",
            ),
            (
                r#"{"clip_title":"B","failure":"x","clip_match_scores":[]}"#,
                "`failure` and `clip_match_scores`",
            ),
        ] {
            let err = parse_line(line, &clips(), &answered).unwrap_err();
            assert!(err.contains(expect), "{line}: {err}");
        }
    }
}
