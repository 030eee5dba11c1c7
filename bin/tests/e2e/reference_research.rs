//! The question the project exists for, through the binary end to end: an episode and clips
//! made here (synthesised, with a truth the analyser never sees) are curated, leased, researched
//! by `archivist research` with its default analyser, the reference one, and recorded; the
//! matches are where the clips were put, and an absent clip matches nowhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;
use std::sync::Arc;

use crate::common::pipeline::Scenario;
use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use serde_json::{json, Value};

const RATE: u32 = 16_000;

fn item(title: &str, path: &Path, aired: Option<&str>) -> String {
    let mut v = json!({
        "initial_date_curated": "2026-01-10T08:00:00Z",
        "last_date_curated": "2026-01-10T08:00:00Z",
        "curator_information": "reference_research.rs",
        "title": title,
        "description": "synthesised",
        "media_uri": format!("file://{}", path.display()),
        "media_type": "wav",
        "priority": 0,
    });
    if let Some(aired) = aired {
        v["date_aired"] = json!(aired);
    }
    v.to_string() + "\n"
}

#[test]
fn research_with_the_reference_analyser_records_where_the_clips_occur() {
    let mut s = Scenario::database(None);
    // One work item for the three clips.
    s.bus.set("ARCHIVIST_MAX_CLIPS", "50");
    let dir = s.path().join("media");
    std::fs::create_dir_all(&dir).unwrap();
    let theme = Speech::render(21, RATE, Voice::numbered(2), 5.0);
    let jingle = synth::jingle(22, RATE, 3.0);
    let absent = Speech::render(23, RATE, Voice::numbered(2), 5.0);
    let clips = [("Theme", &theme), ("Jingle", &jingle), ("Absent", &absent)];
    for (title, samples) in clips {
        common::audio::write_samples(&dir.join(format!("{title}.wav")), RATE, samples);
    }
    let sec = u64::from(RATE);
    let insertions = vec![
        Insertion {
            clip: 0,
            offset: 7 * sec + 1_234,
            gain: 1.0,
            over: false,
        },
        Insertion {
            clip: 1,
            offset: 25 * sec,
            gain: 0.8,
            over: false,
        },
        Insertion {
            clip: 0,
            offset: 41 * sec + sec / 3,
            gain: 0.7,
            over: true,
        },
    ];
    let arcs = vec![
        Arc::new(theme.clone()),
        Arc::new(jingle.clone()),
        Arc::new(absent.clone()),
    ];
    let mut episode = EpisodeSynth::new(24, RATE, 60.0, 2, arcs, insertions).with_bed(25, 0.03);
    let truth = episode.truth();
    let episode_path = dir.join("episode.wav");
    common::audio::write_wav(&episode_path, RATE, &mut |b| episode.fill(b));

    s.run(&["migrate"], &[]).expect_code(0);
    s.run_with_input(
        &["send", "curated_episodes"],
        &item(
            "Synthesised episode",
            &episode_path,
            Some("2026-01-01T00:00:00Z"),
        ),
    )
    .expect_code(0);
    let clip_lines: String = clips
        .iter()
        .map(|(t, _)| item(t, &dir.join(format!("{t}.wav")), None))
        .collect();
    s.run_with_input(&["send", "curated_clips"], &clip_lines)
        .expect_code(0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    let env = [
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_RESEARCHERS", "1"),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
    let research = s
        .run(&["research", "--once", "--concurrency", "1"], &[])
        .expect_code(0);
    s.run(&["completed-research"], &[]).expect_code(0);

    let status = s.status();
    assert_eq!(
        status["researched_pairs"], 3,
        "{status}\n{}",
        research.stderr
    );
    assert_eq!(status["failed_pairs"], 0, "{status}");
    let matches: Vec<Value> = s.run(&["matches"], &[]).expect_code(0).json_lines();
    let found = |title: &str| -> Vec<i64> {
        matches
            .iter()
            .find(|m| m["clip_title"] == title)
            .map(|m| {
                m["clip_offsets_ns"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o.as_i64().unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };
    for (i, (title, _)) in clips.iter().enumerate() {
        let got = found(title);
        let want = &truth[i];
        assert_eq!(
            got.len(),
            want.len(),
            "{title}: found {got:?}, truth {want:?}"
        );
        for (g, w) in got.iter().zip(want) {
            let error_ms = (*g - *w as i64).abs() as f64 / 1e6;
            assert!(
                error_ms <= 10.0,
                "{title}: {g} ns against {w} ns ({error_ms} ms)"
            );
        }
    }
    // Each match carries the reference analyser's scores, one per offset, from 0 to 1; a clip
    // put in unchanged is a sure match.
    assert!(!matches.is_empty());
    for m in &matches {
        let scores = m["clip_match_scores"]
            .as_array()
            .unwrap_or_else(|| panic!("no scores: {m}"));
        assert_eq!(
            scores.len(),
            m["clip_offsets_ns"].as_array().unwrap().len(),
            "{m}"
        );
        for score in scores {
            let score = score.as_f64().unwrap();
            assert!((0.5..=1.0).contains(&score), "{m}");
        }
    }
    // Each clip's findability, predicted by the researcher from the clip alone, travels on
    // its later results (predicted after the first item's answers, off the lease's path: which
    // results carry it depends on the slots' timing) and is kept on the clip, where the pages
    // and `/api/clips` read it: where kept, a spoken theme and a jingle are found at their
    // background's level or below it.
    let url = s.database_url();
    let listed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store = datastore::connect(&url).await.unwrap();
            let browse = store.browse().unwrap();
            browse
                .list_clips(&datastore::ListQuery {
                    search: None,
                    cursor: None,
                    limit: 10,
                })
                .await
                .unwrap()
        });
    for c in &listed.items {
        let Some(f) = c.findability else { continue };
        assert!(
            f.from_db.is_some_and(|db| db <= 0),
            "{}: {:?}",
            c.clip.title,
            c.findability
        );
    }
    assert_eq!(listed.items.len(), 3);
}

/// A clip whose WAV header says 0 Hz (symphonia panics on it while probing) fails alone: its
/// pair is failed research naming the sample rate, and the good clip of the same work item
/// is researched and found. Before, the panic took the whole item with it.
#[test]
fn a_crafted_clip_fails_its_own_pair_and_the_good_clip_of_the_item_is_found() {
    let mut s = Scenario::database(None);
    s.bus.set("ARCHIVIST_MAX_CLIPS", "50");
    let dir = s.path().join("media");
    std::fs::create_dir_all(&dir).unwrap();
    let theme = Speech::render(31, RATE, Voice::numbered(3), 5.0);
    common::audio::write_samples(&dir.join("Theme.wav"), RATE, &theme);
    // The same clip with the `fmt` chunk's sample rate set to 0.
    let mut crafted = std::fs::read(dir.join("Theme.wav")).unwrap();
    let fmt = crafted.windows(4).position(|w| w == b"fmt ").unwrap();
    crafted[fmt + 12..fmt + 16].copy_from_slice(&0u32.to_le_bytes());
    std::fs::write(dir.join("Crafted.wav"), &crafted).unwrap();
    let sec = u64::from(RATE);
    let insertions = vec![Insertion {
        clip: 0,
        offset: 9 * sec + 321,
        gain: 1.0,
        over: false,
    }];
    let mut episode =
        EpisodeSynth::new(32, RATE, 30.0, 2, vec![Arc::new(theme)], insertions).with_bed(33, 0.03);
    let truth = episode.truth();
    let episode_path = dir.join("episode.wav");
    common::audio::write_wav(&episode_path, RATE, &mut |b| episode.fill(b));

    s.run(&["migrate"], &[]).expect_code(0);
    s.run_with_input(
        &["send", "curated_episodes"],
        &item("Episode", &episode_path, Some("2026-01-01T00:00:00Z")),
    )
    .expect_code(0);
    let clip_lines: String = ["Crafted", "Theme"]
        .iter()
        .map(|t| item(t, &dir.join(format!("{t}.wav")), None))
        .collect();
    s.run_with_input(&["send", "curated_clips"], &clip_lines)
        .expect_code(0);
    s.run(&["episodes", "--once"], &[]).expect_code(0);
    s.run(&["clips", "--once"], &[]).expect_code(0);
    let env = [
        ("ARCHIVIST_START_JITTER", "0s"),
        ("ARCHIVIST_RESEARCHERS", "1"),
    ];
    s.run(&["pending-research"], &env).expect_code(0);
    let research = s
        .run(&["research", "--once", "--concurrency", "1"], &[])
        .expect_code(0);
    assert!(
        !research.stderr.contains("internal error"),
        "a caught decoder panic is no bug: {}",
        research.stderr
    );
    s.run(&["completed-research"], &[]).expect_code(0);

    let status = s.status();
    assert_eq!(
        (
            status["researched_pairs"].as_u64(),
            status["failed_pairs"].as_u64()
        ),
        (Some(1), Some(1)),
        "{status}\n{}",
        research.stderr
    );
    assert!(
        status["failure_reasons"]
            .to_string()
            .contains("sample rate 0 Hz is outside 1000–384000 Hz"),
        "{status}"
    );
    let matches: Vec<Value> = s.run(&["matches"], &[]).expect_code(0).json_lines();
    let theme = matches
        .iter()
        .find(|m| m["clip_title"] == "Theme")
        .unwrap_or_else(|| panic!("Theme researched: {matches:?}"));
    let got = theme["clip_offsets_ns"].as_array().unwrap();
    assert_eq!(got.len(), 1, "{theme}");
    let error_ms = (got[0].as_i64().unwrap() - truth[0][0] as i64).abs() as f64 / 1e6;
    assert!(error_ms <= 10.0, "{theme} against {:?}", truth[0]);
}
