//! `archivist analyse` end to end, through the built binary, on generated files: a
//! synthesised WAV and the MP3, AAC (M4A), Ogg Vorbis and FLAC ffmpeg makes of it, bad
//! files, a URL served by a local HTTP server, and an hour-long episode in bounded memory.
//! Needs `ffmpeg` (scripts/test.sh installs it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use common::audio::write_wav;
use common::Run;
use serde_json::Value;

const RATE: u32 = 22_050;
/// The offset error allowed (the analyser's target is a p95 of 10 ms).
const TOLERANCE_NS: u64 = 10_000_000;

fn ffmpeg(input: &Path, output: &Path, args: &[&str]) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i"])
        .arg(input)
        .args(args)
        .arg(output)
        .status()
        .expect("ffmpeg is needed: run scripts/test.sh, or apt-get install ffmpeg");
    assert!(
        status.success(),
        "ffmpeg failed making {}",
        output.display()
    );
}

/// The shared files: an episode in five formats, its clips, and the truth.
struct Files {
    dir: PathBuf,
    /// Clip file names, in the order of `truth`.
    clips: Vec<&'static str>,
    truth: Vec<Vec<u64>>,
    episode_ns: u64,
}

fn files() -> &'static Files {
    static FILES: OnceLock<Files> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let speech = Speech::render(11, RATE, Voice::numbered(4), 6.0);
        let mut voicemail = Speech::render(12, RATE, Voice::numbered(1), 4.0);
        synth::voicemail(&mut voicemail, RATE);
        let jingle = synth::jingle(13, RATE, 3.0);
        let absent = Speech::render(14, RATE, Voice::numbered(4), 5.0);
        let clips = vec![speech, voicemail, jingle, absent];
        let s = u64::from(RATE);
        let insertions = vec![
            // At 0 s and again later (twice in one episode).
            Insertion {
                clip: 0,
                offset: 0,
                gain: 1.0,
                over: false,
            },
            Insertion {
                clip: 0,
                offset: 61 * s + 5_160,
                gain: 0.6,
                over: false,
            },
            // Talked over.
            Insertion {
                clip: 1,
                offset: 20 * s + s / 2,
                gain: 1.0,
                over: true,
            },
            // Cut off by the end.
            Insertion {
                clip: 2,
                offset: 88 * s + s / 2,
                gain: 0.9,
                over: false,
            },
        ];
        let names = vec!["speech.wav", "voicemail.wav", "jingle.mp3", "absent.wav"];
        for (name, c) in names.iter().zip(&clips) {
            let wav = dir.join(name).with_extension("wav");
            common::audio::write_samples(&wav, RATE, c);
            if name.ends_with(".mp3") {
                ffmpeg(
                    &wav,
                    &dir.join(name),
                    &["-c:a", "libmp3lame", "-b:a", "128k"],
                );
            }
        }
        let arcs = clips.into_iter().map(Arc::new).collect();
        let mut episode = EpisodeSynth::new(15, RATE, 90.0, 3, arcs, insertions).with_bed(16, 0.04);
        let truth = episode.truth();
        let episode_ns = episode.len() * 1_000_000_000 / s;
        let wav = dir.join("episode.wav");
        write_wav(&wav, RATE, &mut |b| episode.fill(b));
        ffmpeg(
            &wav,
            &dir.join("episode.mp3"),
            &["-c:a", "libmp3lame", "-b:a", "64k"],
        );
        ffmpeg(
            &wav,
            &dir.join("episode.m4a"),
            &["-c:a", "aac", "-b:a", "64k"],
        );
        ffmpeg(
            &wav,
            &dir.join("episode.ogg"),
            &["-c:a", "libvorbis", "-q:a", "2"],
        );
        ffmpeg(&wav, &dir.join("episode.flac"), &["-c:a", "flac"]);
        Files {
            dir,
            clips: names,
            truth,
            episode_ns,
        }
    })
}

fn analyse(dir: &Path, args: &[&str]) -> Run {
    let mut all = vec!["analyse"];
    all.extend_from_slice(args);
    Run::from_output(common::command(dir, &all, &[]).output().unwrap())
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)[..64].to_owned()
}

fn check_json(f: &Files, episode: &str, lines: &[Value]) {
    assert_eq!(lines.len(), f.clips.len());
    for ((line, name), truth) in lines.iter().zip(&f.clips).zip(&f.truth) {
        assert_eq!(line["clip"], *name, "in the order given");
        let offsets: Vec<u64> = line["clip_offsets_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(offsets.len(), truth.len(), "{episode}: {name}: {line}");
        for (o, t) in offsets.iter().zip(truth) {
            assert!(
                o.abs_diff(*t) <= TOLERANCE_NS,
                "{episode}: {name}: {o} vs {t}"
            );
        }
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "ascending");
        assert_eq!(line["matches"].as_array().unwrap().len(), offsets.len());
        for m in line["matches"].as_array().unwrap() {
            let score = m["score"].as_f64().unwrap();
            assert!(score > 0.0 && score <= 1.0, "{m}");
        }
        let duration = line["episode_duration_ns"].as_u64().unwrap();
        assert!(
            duration.abs_diff(f.episode_ns) < 60_000_000,
            "{episode}: {duration}"
        );
        assert!(line["clip_duration_ns"].as_u64().unwrap() > 2_900_000_000);
        assert_eq!(line["clip_hash"], sha256(&f.dir.join(name)));
        assert_eq!(line["episode_hash"], sha256(&f.dir.join(episode)));
    }
}

#[test]
fn clips_are_found_in_every_format() {
    let f = files();
    for episode in [
        "episode.wav",
        "episode.mp3",
        "episode.m4a",
        "episode.ogg",
        "episode.flac",
    ] {
        let mut args = vec![episode];
        args.extend(&f.clips);
        args.push("--json");
        let run = analyse(&f.dir, &args).expect_code(0);
        check_json(f, episode, &run.json_lines());
    }
}

#[test]
fn people_read_offsets_as_a_clock() {
    let f = files();
    let run = analyse(&f.dir, &["episode.mp3", "speech.wav", "absent.wav"]).expect_code(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].starts_with("episode.mp3: 0:01:30.0"),
        "{}",
        run.stdout
    );
    // 61 s + 5,160 samples at 22,050 Hz = 1:01.234.
    assert!(
        lines[1].starts_with("speech.wav (0:00:06.000, sha256 ")
            && lines[1].contains("0:00:00.000 (score ")
            && lines[1].contains("0:01:01.23"),
        "{}",
        run.stdout
    );
    assert!(lines[2].ends_with(": not found"), "{}", run.stdout);
}

#[test]
fn file_urls_are_read_and_http_urls_downloaded() {
    let f = files();
    let body = std::fs::read(f.dir.join("episode.mp3")).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Serves the episode at /episode.mp3 and 404 for anything else, two requests.
    let server = std::thread::spawn(move || {
        for stream in listener.incoming().take(2) {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
            }
            if request.starts_with("GET /episode.mp3 ") {
                write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .unwrap();
                stream.write_all(&body).unwrap();
            } else {
                stream
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .unwrap();
            }
        }
    });
    let url = format!("http://127.0.0.1:{port}/episode.mp3");
    let clip_urls: Vec<String> = f
        .clips
        .iter()
        .map(|c| format!("file://{}", f.dir.join(c).display()))
        .collect();
    let mut args = vec![url.as_str()];
    args.extend(clip_urls.iter().map(String::as_str));
    args.push("--json");
    let run = analyse(&f.dir, &args).expect_code(0);
    let lines = run.json_lines();
    assert_eq!(lines[0]["clip"], clip_urls[0]);
    assert_eq!(lines[0]["episode"], url);
    let offsets = lines[0]["clip_offsets_ns"].as_array().unwrap();
    assert_eq!(offsets.len(), 2, "{}", run.stdout);
    assert_eq!(lines[0]["episode_hash"], sha256(&f.dir.join("episode.mp3")));

    let missing = format!("http://127.0.0.1:{port}/gone.mp3");
    let run = analyse(&f.dir, &[&missing, "speech.wav"]).expect_code(2);
    assert!(
        run.stderr.contains("gone.mp3") && run.stderr.contains("404"),
        "{}",
        run.stderr
    );
    server.join().unwrap();
}

#[test]
fn bad_inputs_exit_2_naming_the_file_and_the_problem() {
    let f = files();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("empty.mp3"), b"").unwrap();
    std::fs::write(d.join("notes.mp3"), "not audio at all\n".repeat(200)).unwrap();
    let mp3 = std::fs::read(f.dir.join("episode.mp3")).unwrap();
    std::fs::write(d.join("header-only.mp3"), &mp3[..300]).unwrap();
    std::fs::copy(f.dir.join("speech.wav"), d.join("speech.wav")).unwrap();

    for (episode, words) in [
        ("empty.mp3", "empty file"),
        ("notes.mp3", "not audio"),
        ("missing.mp3", "cannot read"),
        ("header-only.mp3", "header-only.mp3"),
    ] {
        let run = analyse(d, &[episode, "speech.wav"]).expect_code(2);
        assert!(
            run.stderr.contains(episode) && run.stderr.contains(words),
            "{episode}: {}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "nothing analysed: {}", run.stdout);
    }
    // A bad clip fails alone: the others are answered, the failing one says why.
    std::fs::copy(f.dir.join("episode.wav"), d.join("episode.wav")).unwrap();
    let run = analyse(d, &["episode.wav", "notes.mp3", "speech.wav", "--json"]).expect_code(2);
    let lines = run.json_lines();
    assert!(
        lines[0]["failure"].as_str().unwrap().contains("not audio"),
        "{}",
        run.stdout
    );
    assert_eq!(lines[1]["clip_offsets_ns"].as_array().unwrap().len(), 2);
    assert!(run.stderr.contains("notes.mp3"), "{}", run.stderr);
    // Bad usage: no clip, an unknown scheme.
    analyse(d, &["episode.wav"]).expect_code(2);
    let run = analyse(d, &["episode.wav", "ftp://host/clip.mp3"]).expect_code(2);
    assert!(run.stderr.contains("ftp"), "{}", run.stderr);
}

#[test]
fn a_truncated_mp3_is_analysed_as_far_as_it_goes() {
    let f = files();
    let dir = tempfile::tempdir().unwrap();
    let mut mp3 = Vec::new();
    std::fs::File::open(f.dir.join("episode.mp3"))
        .unwrap()
        .read_to_end(&mut mp3)
        .unwrap();
    // Cut mid-frame at about 70 s of 90: the clip at 61 s is whole, the jingle at 88.5 s gone.
    let cut = mp3.len() * 70 / 90 + 77;
    std::fs::write(dir.path().join("cut.mp3"), &mp3[..cut]).unwrap();
    let speech = f.dir.join("speech.wav");
    let jingle = f.dir.join("jingle.mp3");
    let run = analyse(
        dir.path(),
        &[
            "cut.mp3",
            speech.to_str().unwrap(),
            jingle.to_str().unwrap(),
            "--json",
        ],
    )
    .expect_code(0);
    let lines = run.json_lines();
    assert_eq!(lines[0]["clip_offsets_ns"].as_array().unwrap().len(), 2);
    assert!(lines[1]["clip_offsets_ns"].as_array().unwrap().is_empty());
    let duration = lines[0]["episode_duration_ns"].as_u64().unwrap();
    assert!(
        (65_000_000_000..75_000_000_000).contains(&duration),
        "{duration}"
    );
}

#[test]
fn an_hour_long_episode_is_analysed_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 8 kHz keeps the file (58 MB) and its synthesis small; the analyser's memory does not
    // depend on the rate (it resamples to its own as it goes).
    let rate = 8_000u32;
    let s = u64::from(rate);
    let clips: Vec<Vec<f32>> = (0..10)
        .map(|i| Speech::render(100 + i, rate, Voice::numbered(i as u32), 5.0 + i as f32))
        .collect();
    let insertions = vec![
        Insertion {
            clip: 0,
            offset: 600 * s,
            gain: 1.0,
            over: false,
        },
        Insertion {
            clip: 3,
            offset: 1_800 * s + 123,
            gain: 1.0,
            over: false,
        },
        Insertion {
            clip: 9,
            offset: 3_540 * s,
            gain: 1.0,
            over: false,
        },
    ];
    let mut names = Vec::new();
    for (i, c) in clips.iter().enumerate() {
        let name = format!("clip{i}.wav");
        let mut at = 0;
        write_wav(&d.join(&name), rate, &mut |buf| {
            let n = buf.len().min(c.len() - at);
            buf[..n].copy_from_slice(&c[at..at + n]);
            at += n;
            n
        });
        names.push(name);
    }
    let arcs = clips.into_iter().map(Arc::new).collect();
    let mut episode = EpisodeSynth::new(5, rate, 3_600.0, 4, arcs, insertions).with_bed(6, 0.03);
    let truth = episode.truth();
    write_wav(&d.join("hour.wav"), rate, &mut |b| episode.fill(b));

    let mut args = vec!["hour.wav"];
    args.extend(names.iter().map(String::as_str));
    args.push("--json");
    let run = analyse(d, &args).expect_code(0);
    let lines = run.json_lines();
    for (line, t) in lines.iter().zip(&truth) {
        let offsets: Vec<u64> = line["clip_offsets_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(offsets.len(), t.len(), "{line}");
        for (o, t) in offsets.iter().zip(t) {
            assert!(o.abs_diff(*t) <= TOLERANCE_NS, "{o} vs {t}");
        }
    }
    assert_eq!(lines[0]["episode_duration_ns"], 3_600_000_000_000u64);
    // The largest resident set of any child of this test process so far (the analyser
    // included): a bound, not a speed claim.
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    let peak_mb = usage.max_rss() / 1024;
    assert!(peak_mb < 200, "peak resident memory {peak_mb} MB");
}
