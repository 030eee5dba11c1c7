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

/// The offsets (ns) of every clip found in `episode`, by clip.
fn offsets(analyser: &Analyser, f: &Fixture, episode: &Path) -> Vec<Vec<u64>> {
    let inputs: Vec<ClipInput> = f.clips.iter().map(ClipInput::new).collect();
    let report = analyser
        .analyse(episode, &inputs)
        .unwrap_or_else(|e| panic!("{}: {e}", episode.display()));
    report
        .clips
        .iter()
        .map(|c| match c {
            ClipOutcome::Found(r) => r.offsets_ns(),
            ClipOutcome::Failed(e) => panic!("{}: {e}", episode.display()),
        })
        .collect()
}

/// `found` is `expected` (each clip as often), each offset shifted by `shift` ns, within 10 ms.
fn assert_offsets(what: &str, found: &[Vec<u64>], expected: &[Vec<u64>], shift: u64) {
    assert_eq!(found.len(), expected.len(), "{what}");
    for (c, (f, e)) in found.iter().zip(expected).enumerate() {
        assert_eq!(f.len(), e.len(), "{what}: clip {c}: {f:?} for {e:?}");
        for (o, t) in f.iter().zip(e) {
            let err = o.abs_diff(t + shift);
            eprintln!("{what}: clip {c}: {:.3} ms off", err as f64 / 1e6);
            assert!(
                err <= 10_000_000,
                "{what}: clip {c}: {o} for {} ({:.1} ms off)",
                t + shift,
                err as f64 / 1e6
            );
        }
    }
}

/// An ID3v2.3 tag of `size` bytes (a title, then padding), as some publishers leave them.
fn padded_id3(size: usize) -> Vec<u8> {
    let body = size - 10;
    let mut tag = b"ID3\x03\x00\x00".to_vec();
    tag.extend((0..4).rev().map(|i| ((body >> (7 * i)) & 0x7f) as u8));
    tag.extend_from_slice(b"TIT2\x00\x00\x00\x08\x00\x00\x00episode");
    tag.resize(size, 0);
    tag
}

fn concat(out: &Path, parts: &[&Path]) {
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend(std::fs::read(p).expect("read"));
    }
    std::fs::write(out, bytes).expect("write");
}

/// Every format as podcasts publish it is found at the offsets of the plain MP3 (and of the
/// truth) within 10 ms: Opus in Ogg and WebM, MP3 at 22.05 kHz mono and 8 kHz (MPEG 2.5), VBR
/// with a 2 MB cover, behind a 512 KB padded ID3 tag, M4A with chapters and a cover, raw ADTS,
/// 48 kHz FLAC, 24-bit WAV.
#[test]
fn formats_as_published_are_found_where_the_plain_mp3_has_them() {
    let f = fixture();
    let wav = f.dir.join("episode.wav");
    let analyser = Analyser::new(Params::default());
    let plain = f.dir.join("plain.mp3");
    ffmpeg(&wav, &plain, &["-c:a", "libmp3lame", "-b:a", "128k"]);
    let reference = offsets(&analyser, &f, &plain);
    assert_offsets("plain.mp3", &reference, &f.truth, 0);

    // A 2 MB cover (noise compresses badly) and a chapters file.
    let cover = f.dir.join("cover.png");
    let status = std::process::Command::new("ffmpeg")
        .args([
            "-nostdin",
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
        ])
        .arg("nullsrc=s=1000x1000,geq=random(1)*255:random(1)*255:random(1)*255")
        .args(["-frames:v", "1"])
        .arg(&cover)
        .status()
        .expect("ffmpeg");
    assert!(status.success());
    assert!(std::fs::metadata(&cover).unwrap().len() > 2_000_000);
    let chapters = f.dir.join("chapters.txt");
    std::fs::write(
        &chapters,
        ";FFMETADATA1\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=20000\ntitle=one\n\
         [CHAPTER]\nTIMEBASE=1/1000\nSTART=20000\nEND=40000\ntitle=two\n",
    )
    .unwrap();
    let with = |extra: &[&str], args: &[&str]| -> Vec<String> {
        extra.iter().chain(args).map(|s| s.to_string()).collect()
    };
    let cover_s = cover.to_string_lossy().into_owned();
    let chapters_s = chapters.to_string_lossy().into_owned();
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "vbr-cover.mp3",
            with(
                &["-i", &cover_s, "-map", "0:a", "-map", "1:v", "-c:v", "copy"],
                &[
                    "-disposition:v",
                    "attached_pic",
                    "-id3v2_version",
                    "3",
                    "-c:a",
                    "libmp3lame",
                    "-q:a",
                    "4",
                ],
            ),
        ),
        (
            "mono22.mp3",
            with(
                &[],
                &[
                    "-ac",
                    "1",
                    "-ar",
                    "22050",
                    "-c:a",
                    "libmp3lame",
                    "-b:a",
                    "64k",
                ],
            ),
        ),
        (
            "mpeg25.mp3",
            with(
                &[],
                &[
                    "-ac",
                    "1",
                    "-ar",
                    "8000",
                    "-c:a",
                    "libmp3lame",
                    "-b:a",
                    "16k",
                ],
            ),
        ),
        (
            "chapters-cover.m4a",
            with(
                &[
                    "-i",
                    &chapters_s,
                    "-i",
                    &cover_s,
                    "-map",
                    "0:a",
                    "-map",
                    "2:v",
                    "-map_chapters",
                    "1",
                ],
                &[
                    "-c:v",
                    "png",
                    "-disposition:v",
                    "attached_pic",
                    "-c:a",
                    "aac",
                    "-b:a",
                    "96k",
                ],
            ),
        ),
        (
            "adts.aac",
            with(&[], &["-c:a", "aac", "-b:a", "96k", "-f", "adts"]),
        ),
        ("hi.flac", with(&[], &["-ar", "48000", "-c:a", "flac"])),
        ("s24.wav", with(&[], &["-c:a", "pcm_s24le"])),
        (
            "episode.opus",
            with(&[], &["-c:a", "libopus", "-b:a", "48k"]),
        ),
        (
            "episode.webm",
            with(&[], &["-c:a", "libopus", "-b:a", "48k"]),
        ),
        (
            "no-id3.mp3",
            with(
                &[],
                &["-c:a", "libmp3lame", "-b:a", "128k", "-id3v2_version", "0"],
            ),
        ),
    ];
    for (name, args) in &cases {
        let out = f.dir.join(name);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ffmpeg(&wav, &out, &args);
        if *name == "no-id3.mp3" {
            // Behind a 512 KB ID3 tag, mostly padding.
            let padded = f.dir.join("padded-id3.mp3");
            let mut bytes = padded_id3(512 << 10);
            bytes.extend(std::fs::read(&out).unwrap());
            std::fs::write(&padded, bytes).unwrap();
            let found = offsets(&analyser, &f, &padded);
            assert_offsets("padded-id3.mp3", &found, &reference, 0);
            continue;
        }
        let found = offsets(&analyser, &f, &out);
        assert_offsets(name, &found, &reference, 0);
        assert_offsets(name, &found, &f.truth, 0);
    }
}

/// WAV lengths that ffmpeg and sox read past: a data length beyond the file (0xFFFFFFF0,
/// 0x80000000), both lengths 0 (a streamed WAV never patched), and 0xFFFFFFFF.
#[test]
fn wavs_with_lengths_past_the_file_or_zero_are_read_to_their_end() {
    let f = fixture();
    let wav = f.dir.join("episode.wav");
    let analyser = Analyser::new(Params::default());
    let reference = offsets(&analyser, &f, &wav);
    let bytes = std::fs::read(&wav).unwrap();
    assert_eq!(&bytes[36..40], b"data");
    for (riff, data) in [
        (u32::MAX, 0xFFFF_FFF0),
        (0xFFFF_FFF0, 0xFFFF_FFF0),
        (u32::MAX, 0x8000_0000),
        (0, 0),
        (u32::MAX, u32::MAX),
    ] {
        let mut b = bytes.clone();
        b[4..8].copy_from_slice(&riff.to_le_bytes());
        b[40..44].copy_from_slice(&data.to_le_bytes());
        let path = f.dir.join(format!("len-{riff:x}-{data:x}.wav"));
        std::fs::write(&path, &b).unwrap();
        let found = offsets(&analyser, &f, &path);
        assert_offsets(&path.display().to_string(), &found, &reference, 0);
        let report = analyser.analyse(&path, &[]).unwrap();
        assert!(report.duration_ns.abs_diff(f.episode_ns) < 1_000_000);
    }
}

/// Opus decodes at 48 kHz, its pre-skip dropped: the samples start where the source did.
#[test]
fn opus_is_decoded_at_48_khz_from_its_first_sample() {
    let f = fixture();
    let wav = f.dir.join("episode.wav");
    let opus = f.dir.join("episode.opus");
    ffmpeg(&wav, &opus, &["-c:a", "libopus", "-b:a", "64k"]);
    let (samples, rate, _) = analysis::decode::decode_all(&opus).unwrap();
    assert_eq!(rate, 48_000);
    let source = f.episode_ns as f64 * 48e-6;
    assert!(
        (samples.len() as f64 - source).abs() < 48.0 * 5.0,
        "{} samples for {source}",
        samples.len()
    );
}

/// A codec the analyser does not decode is named in words, not by symphonia's number.
#[test]
fn a_codec_not_decoded_is_named() {
    let f = fixture();
    let wav = f.dir.join("episode.wav");
    let alac = f.dir.join("episode.m4a");
    ffmpeg(&wav, &alac, &["-c:a", "alac"]);
    let e = Analyser::new(Params::default())
        .analyse(&alac, &[])
        .expect_err("alac");
    let text = e.to_string();
    assert!(matches!(e, Error::UnsupportedCodec { .. }), "{text}");
    assert!(text.contains("alac") && !text.contains("0x"), "{text}");
}

/// A stitched MP3 (dynamic ad insertion): an ad of another encoder's format byte-concatenated
/// before the episode, or in its middle. Decoded whole, with every offset the ad's length
/// plus the offset in the episode (within 10 ms).
#[test]
fn stitched_mp3s_are_decoded_whole_with_the_ads_length_added() {
    let f = fixture();
    let wav = f.dir.join("episode.wav");
    let analyser = Analyser::new(Params::default());
    // The ad: 7.3 s of another voice over a jingle, at 44.1 kHz.
    let mut ad = Speech::render(21, RATE, Voice::numbered(4), 7.3);
    for (a, j) in ad.iter_mut().zip(synth::jingle(22, RATE, 7.3)) {
        *a = 0.7 * *a + 0.3 * j;
    }
    let ad_wav = f.dir.join("ad.wav");
    write_wav(&ad_wav, &ad, RATE);
    let ad_ns = ad.len() as u64 * 1_000_000_000 / u64::from(RATE);
    let ad_stereo = f.dir.join("ad-stereo.mp3");
    ffmpeg(
        &ad_wav,
        &ad_stereo,
        &["-ac", "2", "-c:a", "libmp3lame", "-b:a", "128k"],
    );
    let seg = |input: &Path, name: &str, args: &[&str]| -> PathBuf {
        let out = f.dir.join(name);
        let mut all = args.to_vec();
        all.extend_from_slice(&["-id3v2_version", "0"]);
        ffmpeg(input, &out, &all);
        out
    };
    let mono44 = seg(
        &wav,
        "ep-mono44.mp3",
        &["-ac", "1", "-c:a", "libmp3lame", "-b:a", "64k"],
    );
    let mono22 = seg(
        &wav,
        "ep-mono22.mp3",
        &[
            "-ac",
            "1",
            "-ar",
            "22050",
            "-c:a",
            "libmp3lame",
            "-b:a",
            "64k",
        ],
    );
    let plain = f.dir.join("plain.mp3");
    ffmpeg(&wav, &plain, &["-c:a", "libmp3lame", "-b:a", "128k"]);
    let reference = offsets(&analyser, &f, &plain);

    for (name, episode) in [
        ("stitched-mono.mp3", &mono44),
        ("stitched-22k.mp3", &mono22),
    ] {
        let out = f.dir.join(name);
        concat(&out, &[&ad_stereo, episode]);
        let found = offsets(&analyser, &f, &out);
        assert_offsets(name, &found, &reference, ad_ns);
        let report = analyser.analyse(&out, &[]).unwrap();
        assert!(
            report.duration_ns.abs_diff(f.episode_ns + ad_ns) < 10_000_000,
            "{name}: {} ns",
            report.duration_ns
        );
    }

    // An ad in the middle: the episode cut at 20 s (a clip at 12 s before it, one at 30 s
    // after), each part its own 22.05 kHz mono stream.
    let split = 20 * RATE as usize;
    let samples: Vec<f32> = hound::WavReader::open(&wav)
        .unwrap()
        .samples::<i16>()
        .map(|s| f32::from(s.unwrap()) / 32_767.0)
        .collect();
    let (a, b) = (f.dir.join("part1.wav"), f.dir.join("part2.wav"));
    write_wav(&a, &samples[..split], RATE);
    write_wav(&b, &samples[split..], RATE);
    let a = seg(
        &a,
        "part1.mp3",
        &[
            "-ac",
            "1",
            "-ar",
            "22050",
            "-c:a",
            "libmp3lame",
            "-b:a",
            "64k",
        ],
    );
    let b = seg(
        &b,
        "part2.mp3",
        &[
            "-ac",
            "1",
            "-ar",
            "22050",
            "-c:a",
            "libmp3lame",
            "-b:a",
            "64k",
        ],
    );
    let ad_mid = seg(
        &ad_wav,
        "ad-mid.mp3",
        &["-ac", "2", "-c:a", "libmp3lame", "-b:a", "128k"],
    );
    let out = f.dir.join("stitched-middle.mp3");
    concat(&out, &[&a, &ad_mid, &b]);
    let found = offsets(&analyser, &f, &out);
    let shifted: Vec<Vec<u64>> = reference
        .iter()
        .map(|o| {
            o.iter()
                .map(|&t| if t >= 20_000_000_000 { t + ad_ns } else { t })
                .collect()
        })
        .collect();
    assert_offsets("stitched-middle.mp3", &found, &shifted, 0);
}
