//! The whole chain on synthesised audio in memory: clips inserted at known offsets are
//! found there, absent clips are not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use analysis::{ClipPrint, EpisodeScan, Match, Params};

const RATE: u32 = 16_000;

fn scan(params: &Params, episode: &[f32], clips: &[Vec<f32>]) -> Vec<Vec<Match>> {
    let prints: Vec<Arc<ClipPrint>> = clips
        .iter()
        .map(|c| Arc::new(ClipPrint::from_samples(c, RATE, String::new(), params)))
        .collect();
    let mut s = EpisodeScan::new(params, &prints, RATE);
    for chunk in episode.chunks(4_096) {
        s.push(chunk);
    }
    s.finish()
}

fn ns(samples: u64) -> u64 {
    samples * 1_000_000_000 / u64::from(RATE)
}

#[test]
fn inserted_clips_are_found_at_their_offsets_and_absent_ones_nowhere() {
    let p = Params::default();
    let speech = Speech::render(100, RATE, Voice::numbered(2), 6.0);
    let mut voicemail = Speech::render(101, RATE, Voice::numbered(3), 5.0);
    synth::voicemail(&mut voicemail, RATE);
    let jingle = synth::jingle(102, RATE, 3.0);
    let absent = Speech::render(103, RATE, Voice::numbered(2), 5.0);
    let clips = vec![speech, voicemail, jingle, absent];
    let len = 120.0;
    let end = (len * f64::from(RATE)) as u64;
    let insertions = vec![
        Insertion {
            clip: 0,
            offset: 0,
            gain: 1.0,
            over: false,
        },
        Insertion {
            clip: 0,
            offset: 70 * u64::from(RATE) + 1_234,
            gain: 0.7,
            over: false,
        },
        Insertion {
            clip: 1,
            offset: 33 * u64::from(RATE) + 77,
            gain: 1.0,
            over: true,
        },
        Insertion {
            clip: 2,
            offset: end - 3 * u64::from(RATE),
            gain: 1.0,
            over: false,
        },
    ];
    let arcs = clips.iter().map(|c| Arc::new(c.clone())).collect();
    let (episode, truth) = EpisodeSynth::new(7, RATE, len, 3, arcs, insertions)
        .with_bed(8, 0.05)
        .render();
    let found = scan(&p, &episode, &clips);
    for (c, (f, t)) in found.iter().zip(&truth).enumerate() {
        let offsets: Vec<u64> = f.iter().map(|m| m.offset_ns).collect();
        assert_eq!(offsets.len(), t.len(), "clip {c}: found {f:?}, truth {t:?}");
        for (o, t) in offsets.iter().zip(t) {
            assert!(o.abs_diff(*t) < 2_000_000, "clip {c}: {o} vs {t}");
        }
    }
    assert_eq!(truth[0], vec![0, ns(70 * u64::from(RATE) + 1_234)]);
}
