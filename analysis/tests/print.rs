//! Episode prints on every supported format (made by ffmpeg from a synthesised WAV): a full
//! analysis that prints gives the same answers as one that does not, and an analysis from
//! the print (through a [`FileSource`]) gives those answers again — the same clips found
//! and not found, the same occurrences, offsets within 1 ms and scores within 0.01 — while
//! reading a small part of the media. Damaged, truncated and foreign prints are refused.
//! Needs `ffmpeg` (scripts/test.sh installs it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use analysis::{
    Analyser, ClipInput, ClipOutcome, EpisodePrint, EpisodeReport, FileSource, Params, PrintError,
};

mod common;
use common::{ffmpeg, write_wav};

const RATE: u32 = 44_100;
const EPISODE_SECONDS: f64 = 150.0;

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    clips: Vec<ClipInput>,
}

/// An episode with a speech clip twice and a jingle once; a third clip (another voice)
/// occurs nowhere.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_owned();
    let speech = Speech::render(1, RATE, Voice::numbered(1), 5.0);
    let jingle = synth::jingle(2, RATE, 3.0);
    let absent = Speech::render(9, RATE, Voice::numbered(3), 4.0);
    let placed = [speech.clone(), jingle.clone()];
    let insertions = vec![
        Insertion {
            clip: 0,
            offset: 12 * u64::from(RATE) + 15_214,
            gain: 0.8,
            over: false,
        },
        Insertion {
            clip: 1,
            offset: 70 * u64::from(RATE) + 3,
            gain: 1.0,
            over: false,
        },
        Insertion {
            clip: 0,
            offset: 131 * u64::from(RATE) + 777,
            gain: 0.9,
            over: false,
        },
    ];
    let arcs = placed.iter().map(|c| Arc::new(c.clone())).collect();
    let (episode, _) = EpisodeSynth::new(3, RATE, EPISODE_SECONDS, 2, arcs, insertions)
        .with_bed(4, 0.03)
        .render();
    write_wav(&path.join("episode.wav"), &episode, RATE);
    let mut clips = Vec::new();
    for (i, c) in [speech, jingle, absent].iter().enumerate() {
        let p = path.join(format!("clip{i}.wav"));
        write_wav(&p, c, RATE);
        clips.push(ClipInput::new(p));
    }
    Fixture {
        _dir: dir,
        dir: path,
        clips,
    }
}

/// The formats the analyser reads, as ffmpeg makes them.
fn formats(f: &Fixture) -> Vec<PathBuf> {
    let wav = f.dir.join("episode.wav");
    let mut out = vec![wav.clone()];
    for (name, args) in [
        ("cbr.mp3", &["-c:a", "libmp3lame", "-b:a", "64k"][..]),
        ("vbr.mp3", &["-c:a", "libmp3lame", "-q:a", "4"][..]),
        ("episode.m4a", &["-c:a", "aac", "-b:a", "96k"][..]),
        ("episode.ogg", &["-c:a", "libvorbis", "-q:a", "3"][..]),
        ("episode.flac", &["-c:a", "flac"][..]),
        ("stereo48.wav", &["-ar", "48000", "-ac", "2"][..]),
        (
            "stereo.mp3",
            &["-ac", "2", "-c:a", "libmp3lame", "-b:a", "128k"][..],
        ),
        ("adts.aac", &["-c:a", "aac", "-b:a", "96k"][..]),
        ("episode.opus", &["-c:a", "libopus", "-b:a", "64k"][..]),
        ("episode.webm", &["-c:a", "libopus", "-b:a", "64k"][..]),
        (
            "faststart.m4a",
            &["-c:a", "aac", "-b:a", "96k", "-movflags", "+faststart"][..],
        ),
    ] {
        let path = f.dir.join(name);
        ffmpeg(&wav, &path, args);
        out.push(path);
    }
    out
}

/// The two reports give the same answers: the same clips found, the same number of
/// occurrences, offsets within 1 ms and scores within 0.01.
fn assert_same(what: &str, full: &EpisodeReport, other: &EpisodeReport) {
    let mut largest = (0u64, 0f32);
    assert_eq!(full.hash, other.hash, "{what}");
    assert_eq!(full.duration_ns, other.duration_ns, "{what}");
    assert_eq!(full.clips.len(), other.clips.len(), "{what}");
    for (c, (a, b)) in full.clips.iter().zip(&other.clips).enumerate() {
        let (ClipOutcome::Found(a), ClipOutcome::Found(b)) = (a, b) else {
            panic!("{what}: clip {c}: {a:?} / {b:?}");
        };
        assert_eq!(
            a.matches.len(),
            b.matches.len(),
            "{what}: clip {c}: {:?} / {:?}",
            a.matches,
            b.matches
        );
        for (x, y) in a.matches.iter().zip(&b.matches) {
            assert!(
                x.offset_ns.abs_diff(y.offset_ns) <= 1_000_000,
                "{what}: clip {c}: {x:?} / {y:?}"
            );
            assert!(
                (x.score - y.score).abs() <= 0.01,
                "{what}: clip {c}: {x:?} / {y:?}"
            );
            largest.0 = largest.0.max(x.offset_ns.abs_diff(y.offset_ns));
            largest.1 = largest.1.max((x.score - y.score).abs());
        }
    }
    eprintln!(
        "{what}: offsets differ by {} ns at most, scores by {}",
        largest.0, largest.1
    );
}

#[test]
fn every_format_answers_from_its_print_as_in_full_reading_a_small_part_of_it() {
    let f = fixture();
    let analyser = Analyser::new(Params::default());
    for episode in formats(&f) {
        let what = episode.file_name().unwrap().to_string_lossy().into_owned();
        let plain = analyser.analyse(&episode, &f.clips).expect("analyse");
        let (printed, print) = analyser
            .analyse_printing(&episode, &f.clips, "{\"size\":1}".into(), &mut |_| {})
            .expect("analyse printing");
        assert_same(&format!("{what} printing"), &plain, &printed);
        // The clips placed are found, the absent one is not.
        let counts: Vec<usize> = plain
            .clips
            .iter()
            .map(|c| match c {
                ClipOutcome::Found(r) => r.matches.len(),
                ClipOutcome::Failed(e) => panic!("{e}"),
            })
            .collect();
        assert_eq!(counts, [2, 1, 0], "{what}");

        let bytes = print.to_bytes();
        let print = EpisodePrint::from_bytes(&bytes, analyser.params()).expect("read back");
        assert_eq!(print.identity(), "{\"size\":1}");
        assert_eq!(print.hash(), plain.hash);
        assert_eq!(print.duration_ns(), plain.duration_ns);
        let per_hour = bytes.len() as f64 * 3.6e12 / print.duration_ns() as f64;
        assert!(per_hour < 1e6, "{what}: {per_hour:.0} bytes an hour");

        let mut media = FileSource::open(&episode).expect("open");
        let from_print = analyser
            .analyse_from_print(&print, &mut media, &f.clips)
            .expect("analyse from print");
        assert_same(&format!("{what} from its print"), &plain, &from_print);
        let size = std::fs::metadata(&episode).unwrap().len();
        eprintln!(
            "{what}: print {} bytes ({per_hour:.0} an hour), read {} of {size} bytes in {} reads",
            bytes.len(),
            media.bytes_read(),
            media.requests()
        );
        // A short episode with several clips: a third at most here (20–28% measured after
        // issue 32's 4 votes and ±0.5 s search); the benchmark measures an hour's ratio.
        assert!(
            media.bytes_read() * 3 < size,
            "{what}: read {} of {size} bytes",
            media.bytes_read()
        );
    }
}

#[test]
fn a_print_damaged_truncated_or_of_other_params_is_refused_and_other_media_too() {
    let f = fixture();
    let analyser = Analyser::new(Params::default());
    let episode = f.dir.join("episode.wav");
    let (_, print) = analyser
        .analyse_printing(&episode, &f.clips[..1], String::new(), &mut |_| {})
        .expect("analyse printing");
    let bytes = print.to_bytes();
    let params = analyser.params();
    assert!(matches!(
        EpisodePrint::from_bytes(&bytes[..bytes.len() - 100], params),
        Err(PrintError::Damaged(_))
    ));
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    assert!(matches!(
        EpisodePrint::from_bytes(&damaged, params),
        Err(PrintError::Damaged(_))
    ));
    let other = Params {
        min_prominence: 0.6,
        ..Params::default()
    };
    assert!(matches!(
        EpisodePrint::from_bytes(&bytes, &other),
        Err(PrintError::Params { .. })
    ));
    // A print used with an analyser of other peak parameters, or with other media, fails
    // (the caller then analyses in full) rather than answering wrongly.
    let print = EpisodePrint::from_bytes(&bytes, params).expect("read back");
    let mut media = FileSource::open(&episode).expect("open");
    assert!(Analyser::new(other)
        .analyse_from_print(&print, &mut media, &f.clips[..1])
        .is_err());
    let shorter = f.dir.join("shorter.wav");
    ffmpeg(&episode, &shorter, &["-t", "100"]);
    let mut media = FileSource::open(&shorter).expect("open");
    assert!(analyser
        .analyse_from_print(&print, &mut media, &f.clips[..1])
        .is_err());
}

#[test]
fn clips_found_by_their_peak_coincidences_alone_are_found_from_the_print_too() {
    // No cluster of landmark votes is ever enough here: every candidate is one of peak
    // coincidences (Params::peak_hit_min), judged by its higher bar.
    let f = fixture();
    let analyser = Analyser::new(Params {
        min_votes: u32::MAX,
        ..Params::default()
    });
    let wav = f.dir.join("episode.wav");
    let mp3 = f.dir.join("cbr.mp3");
    ffmpeg(&wav, &mp3, &["-c:a", "libmp3lame", "-b:a", "64k"]);
    for episode in [wav, mp3] {
        let what = episode.file_name().unwrap().to_string_lossy().into_owned();
        let (plain, print) = analyser
            .analyse_printing(&episode, &f.clips, String::new(), &mut |_| {})
            .expect("analyse printing");
        let found: Vec<Vec<u32>> = plain
            .clips
            .iter()
            .map(|c| match c {
                ClipOutcome::Found(r) => r.matches.iter().map(|m| m.votes).collect(),
                ClipOutcome::Failed(e) => panic!("{e}"),
            })
            .collect();
        assert_eq!(
            found.iter().map(Vec::len).collect::<Vec<_>>(),
            [2, 1, 0],
            "{what}: {found:?}"
        );
        let mut media = FileSource::open(&episode).expect("open");
        let from_print = analyser
            .analyse_from_print(&print, &mut media, &f.clips)
            .expect("analyse from print");
        assert_same(&format!("{what} from its print"), &plain, &from_print);
    }
}

/// A stitched MP3 (an ad of another format byte-concatenated with the episode): prints the
/// same answers as a full analysis; from the print, a window after the change of format is
/// not decoded from the packets (a fresh decoder there is not what the full decode had), so
/// the print path fails and the caller analyses in full; with the ad after every clip (a
/// post-roll), the print answers as the full analysis does.
#[test]
fn a_stitched_mp3_never_answers_wrongly_from_its_print() {
    let f = fixture();
    let analyser = Analyser::new(Params::default());
    let wav = f.dir.join("episode.wav");
    let ad = Speech::render(21, RATE, Voice::numbered(4), 7.3);
    let ad_wav = f.dir.join("ad.wav");
    write_wav(&ad_wav, &ad, RATE);
    let ad_mp3 = f.dir.join("ad.mp3");
    ffmpeg(
        &ad_wav,
        &ad_mp3,
        &[
            "-ac",
            "2",
            "-c:a",
            "libmp3lame",
            "-b:a",
            "128k",
            "-id3v2_version",
            "0",
        ],
    );
    let episode = f.dir.join("mono22.mp3");
    ffmpeg(
        &wav,
        &episode,
        &[
            "-ac",
            "1",
            "-ar",
            "22050",
            "-c:a",
            "libmp3lame",
            "-b:a",
            "64k",
            "-id3v2_version",
            "0",
        ],
    );
    let join = |name: &str, parts: [&PathBuf; 2]| -> PathBuf {
        let mut bytes = std::fs::read(parts[0]).unwrap();
        bytes.extend(std::fs::read(parts[1]).unwrap());
        let out = f.dir.join(name);
        std::fs::write(&out, bytes).unwrap();
        out
    };
    let pre_roll = join("pre-roll.mp3", [&ad_mp3, &episode]);
    let post_roll = join("post-roll.mp3", [&episode, &ad_mp3]);
    for (path, from_print_answers) in [(pre_roll, false), (post_roll, true)] {
        let what = path.file_name().unwrap().to_string_lossy().into_owned();
        let plain = analyser.analyse(&path, &f.clips).expect("analyse");
        let (printed, print) = analyser
            .analyse_printing(&path, &f.clips, String::new(), &mut |_| {})
            .expect("analyse printing");
        assert_same(&format!("{what} printing"), &plain, &printed);
        let print = EpisodePrint::from_bytes(&print.to_bytes(), analyser.params()).unwrap();
        let mut media = FileSource::open(&path).expect("open");
        match analyser.analyse_from_print(&print, &mut media, &f.clips) {
            Ok(from_print) => {
                assert!(from_print_answers, "{what}: answered from the print");
                assert_same(&format!("{what} from its print"), &plain, &from_print);
            }
            Err(e) => {
                assert!(!from_print_answers, "{what}: {e}");
                assert!(matches!(e, analysis::Error::Decode { .. }), "{what}: {e}");
            }
        }
    }
}
