//! Decoding every supported format, made by ffmpeg from a synthesised WAV: the clips are
//! found at their offsets in each (encoder delay handled), durations and hashes reported,
//! and bad files are clear errors. Needs `ffmpeg` (scripts/test.sh installs it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use analysis::{Analyser, ClipInput, ClipOutcome, Error, Params};

mod common;
use common::{ffmpeg, write_wav};

const RATE: u32 = 44_100;

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    clips: Vec<PathBuf>,
    truth: Vec<Vec<u64>>,
    episode_ns: u64,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_owned();
    let speech = Speech::render(1, RATE, Voice::numbered(1), 5.0);
    let jingle = synth::jingle(2, RATE, 3.0);
    let clips = [speech, jingle];
    let insertions = vec![
        Insertion {
            clip: 0,
            offset: 12 * u64::from(RATE) + 15_214,
            gain: 0.8,
            over: false,
        },
        Insertion {
            clip: 1,
            offset: 30 * u64::from(RATE),
            gain: 1.0,
            over: false,
        },
    ];
    let arcs = clips.iter().map(|c| Arc::new(c.clone())).collect();
    let (episode, truth) = EpisodeSynth::new(3, RATE, 40.0, 2, arcs, insertions)
        .with_bed(4, 0.03)
        .render();
    write_wav(&path.join("episode.wav"), &episode, RATE);
    let mut clip_paths = Vec::new();
    for (i, c) in clips.iter().enumerate() {
        let p = path.join(format!("clip{i}.wav"));
        write_wav(&p, c, RATE);
        clip_paths.push(p);
    }
    Fixture {
        episode_ns: episode.len() as u64 * 1_000_000_000 / u64::from(RATE),
        _dir: dir,
        dir: path,
        clips: clip_paths,
        truth,
    }
}

fn check(f: &Fixture, analyser: &Analyser, episode: &Path, tolerance_ns: u64) {
    let inputs: Vec<ClipInput> = f.clips.iter().map(ClipInput::new).collect();
    let report = analyser.analyse(episode, &inputs).expect("analyse");
    assert_eq!(report.hash.len(), 64);
    // Encoders pad the end to a whole frame: allow 50 ms.
    assert!(
        report.duration_ns.abs_diff(f.episode_ns) < 50_000_000,
        "{}: duration {} vs {}",
        episode.display(),
        report.duration_ns,
        f.episode_ns
    );
    for (c, outcome) in report.clips.iter().enumerate() {
        let ClipOutcome::Found(r) = outcome else {
            panic!("clip {c} failed: {outcome:?}");
        };
        let offsets = r.offsets_ns();
        assert_eq!(
            offsets.len(),
            f.truth[c].len(),
            "{}: clip {c}: {:?}",
            episode.display(),
            r.matches
        );
        for (o, t) in offsets.iter().zip(&f.truth[c]) {
            let err = o.abs_diff(*t);
            eprintln!(
                "{}: clip {c}: error {:.3} ms, score {:.2}",
                episode.display(),
                err as f64 / 1e6,
                r.matches[0].score
            );
            assert!(
                err <= tolerance_ns,
                "{}: clip {c}: {o} vs {t} ({} µs)",
                episode.display(),
                err / 1_000
            );
        }
    }
}

#[test]
fn every_format_is_decoded_and_its_clips_found_in_place() {
    let f = fixture();
    let wav = f.dir.join("episode.wav");
    let analyser = Analyser::new(Params::default());
    check(&f, &analyser, &wav, 1_000_000);
    for (name, args) in [
        ("episode.mp3", &["-c:a", "libmp3lame", "-b:a", "64k"][..]),
        ("episode.m4a", &["-c:a", "aac", "-b:a", "96k"][..]),
        ("episode.ogg", &["-c:a", "libvorbis", "-q:a", "3"][..]),
        ("episode.flac", &["-c:a", "flac"][..]),
        ("episode48.wav", &["-ar", "48000", "-ac", "2"][..]),
    ] {
        let out = f.dir.join(name);
        ffmpeg(&wav, &out, args);
        check(&f, &analyser, &out, 5_000_000);
    }
    // The clips were fingerprinted once for all six episodes.
    assert_eq!(analyser.cached_clips().0, 2);
}

#[test]
fn bad_files_are_clear_errors_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let analyser = Analyser::new(Params::default());
    let empty = dir.path().join("empty.mp3");
    std::fs::write(&empty, b"").expect("write");
    let text = dir.path().join("notes.mp3");
    std::fs::write(
        &text,
        "these are not the droids you are looking for\n".repeat(100),
    )
    .expect("write");
    let missing = dir.path().join("missing.wav");
    let e = analyser.analyse(&empty, &[]).expect_err("empty");
    assert!(
        matches!(e, Error::Empty { .. }) && e.to_string().contains("empty.mp3"),
        "{e}"
    );
    let e = analyser.analyse(&text, &[]).expect_err("text");
    assert!(
        matches!(e, Error::NotAudio { .. }) && e.to_string().contains("notes.mp3"),
        "{e}"
    );
    let e = analyser.analyse(&missing, &[]).expect_err("missing");
    assert!(
        matches!(e, Error::Io { .. }) && e.to_string().contains("missing.wav"),
        "{e}"
    );
    assert!(!e.is_retryable());
}
