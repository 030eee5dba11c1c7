//! `archivist analyse` end to end, through the built binary, on generated files: a
//! synthesised WAV and the MP3, AAC (M4A), Ogg Vorbis and FLAC ffmpeg makes of it, bad
//! files, URLs served by a local HTTP server, and an hour-long episode (WAV and MP3) in
//! bounded memory, measured on the analyser process alone.
//! Needs `ffmpeg` (scripts/test.sh installs it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use crate::common::audio::write_wav;
use crate::common::Run;
use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
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
        // How findable each clip is, predicted from the clip alone: speech and a jingle are
        // found at their background's level or below it.
        let from_db = line["clip_findable_from_db"].as_i64();
        assert!(from_db.is_some_and(|db| db <= 0), "{name}: {line}");
        assert!(
            line["clip_findability"]
                .as_str()
                .unwrap()
                .starts_with("findable from "),
            "{line}"
        );
    }
}

/// A steady tone is found only when louder than what plays under it: `analyse` says so, in
/// its JSON (`null`: not even at +12 dB) and to a person, who then cuts another clip.
#[test]
fn a_steady_tone_is_said_to_be_hard_to_find() {
    let f = files();
    let tone: Vec<f32> = (0..RATE * 3)
        .map(|i| 0.3 * (2.0 * std::f32::consts::PI * 1_000.0 * i as f32 / RATE as f32).sin())
        .collect();
    common::audio::write_samples(&f.dir.join("tone.wav"), RATE, &tone);
    let run = analyse(&f.dir, &["episode.wav", "tone.wav", "jingle.mp3", "--json"]).expect_code(0);
    let lines = run.json_lines();
    assert_eq!(
        lines[0]["clip_findable_from_db"],
        Value::Null,
        "{}",
        run.stdout
    );
    assert!(
        lines[0]["clip_findability"]
            .as_str()
            .unwrap()
            .contains("not found even +12 dB over its background"),
        "{}",
        run.stdout
    );
    assert!(
        lines[1]["clip_findable_from_db"].as_i64().is_some(),
        "{}",
        run.stdout
    );
    let run = analyse(&f.dir, &["episode.wav", "tone.wav"]).expect_code(0);
    assert!(
        run.stdout
            .contains("cut a longer or cleaner clip): not found"),
        "{}",
        run.stdout
    );
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
            && lines[1].contains(", findable from ")
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
fn with_a_print_store_the_first_run_prints_and_the_second_answers_from_the_print() {
    let f = files();
    // The test's own store (never the user's), in a directory of its own.
    let own = tempfile::tempdir().unwrap();
    let store = own.path().join("prints");
    let store_arg = store.display().to_string();
    for episode in ["episode.mp3", "episode.m4a"] {
        let mut args = vec![episode];
        args.extend(&f.clips);
        args.extend(["--json", "--print-store", &store_arg]);
        let first = analyse(&f.dir, &args).expect_code(0);
        assert!(
            first.stderr.contains("episode print written"),
            "{episode}: {}",
            first.stderr
        );
        check_json(f, episode, &first.json_lines());
        let second = analyse(&f.dir, &args).expect_code(0);
        assert!(
            second.stderr.contains("answered from the episode's print")
                && !second.stderr.contains("episode print written"),
            "{episode}: {}",
            second.stderr
        );
        // The same answers: the same offsets, scores within 0.01 (the analyser's promise
        // for a print; measured identical or within 2·10⁻⁷).
        let (a, b) = (first.json_lines(), second.json_lines());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x["clip_offsets_ns"], y["clip_offsets_ns"], "{episode}");
            assert_eq!(x["episode_hash"], y["episode_hash"], "{episode}");
            assert_eq!(x["episode_duration_ns"], y["episode_duration_ns"]);
            let scores = |v: &Value| -> Vec<f64> {
                v["matches"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["score"].as_f64().unwrap())
                    .collect()
            };
            for (s, t) in scores(x).iter().zip(scores(y)) {
                assert!((s - t).abs() <= 0.01, "{episode}: {x} vs {y}");
            }
        }
    }
    // One print per episode, in the store given; none in the user's (the test's) cache.
    let listed = common::command(
        &f.dir,
        &["prints", "--print-store", &store_arg, "list", "--json"],
        &[],
    )
    .output()
    .unwrap();
    let listed = Run::from_output(listed).expect_code(0);
    assert_eq!(listed.json_lines().len(), 2, "{}", listed.stdout);
    assert!(!f.dir.join(".cache/archivist/prints").exists());
}

/// A server on an ephemeral port that answers each of `requests` connections with `answer`
/// (given the stream), then ends.
fn serve(
    requests: usize,
    answer: impl Fn(&mut std::net::TcpStream) + Send + 'static,
) -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
            }
            answer(&mut stream);
        }
    });
    (port, server)
}

#[test]
fn a_download_that_stalls_trickles_or_is_too_large_fails_clearly() {
    let f = files();
    let body = std::fs::read(f.dir.join("episode.mp3")).unwrap();
    let len = body.len();
    // A server that sends the headers and the first 10 kB, then nothing, holding the
    // connection open until the client gives up.
    let (port, server) = serve(1, move |stream| {
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nContent-Length: {len}\r\n\r\n"
        )
        .unwrap();
        stream.write_all(&body[..10_000]).unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
    });
    let url = format!("http://127.0.0.1:{port}/stalls.mp3");
    let started = std::time::Instant::now();
    let run = analyse(&f.dir, &[&url, "speech.wav", "--fetch-read-timeout", "1s"]).expect_code(2);
    assert!(
        run.stderr.contains(&url)
            && run
                .stderr
                .contains("sent nothing for 1s (--fetch-read-timeout)"),
        "{}",
        run.stderr
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    server.join().unwrap();

    // A byte every 100 ms never trips the read timeout; the whole download's limit stops it.
    let (port, server) = serve(1, |stream| {
        write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n").unwrap();
        while stream.write_all(b"x").is_ok() {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    });
    let url = format!("http://127.0.0.1:{port}/trickles.mp3");
    let run = analyse(&f.dir, &[&url, "speech.wav", "--fetch-timeout", "1s"]).expect_code(2);
    assert!(
        run.stderr.contains(&url) && run.stderr.contains("not done after 1s (--fetch-timeout)"),
        "{}",
        run.stderr
    );
    server.join().unwrap();

    // Too large: by its announced length, and, with none announced, as it comes.
    let (port, server) = serve(2, |stream| {
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n");
        let _ = stream.write_all(&[0u8; 5_000]);
    });
    let url = format!("http://127.0.0.1:{port}/large.mp3");
    let run = analyse(&f.dir, &[&url, "speech.wav", "--max-media-size", "4KB"]).expect_code(2);
    assert!(
        run.stderr.contains(&url) && run.stderr.contains("over 4000 bytes (--max-media-size)"),
        "{}",
        run.stderr
    );
    // The clip's download fails alone; the episode is still analysed.
    let clip = format!("http://127.0.0.1:{port}/large-clip.wav");
    let run = analyse(
        &f.dir,
        &[
            "episode.wav",
            &clip,
            "speech.wav",
            "--max-media-size",
            "4KB",
            "--json",
        ],
    )
    .expect_code(2);
    let lines = run.json_lines();
    assert!(
        lines[0]["failure"]
            .as_str()
            .unwrap()
            .contains("over 4000 bytes"),
        "{}",
        run.stdout
    );
    assert_eq!(lines[1]["clip_offsets_ns"].as_array().unwrap().len(), 2);
    server.join().unwrap();

    let (port, server) = serve(1, |stream| {
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
        let _ = stream.write_all(&[0u8; 5_000]);
    });
    let url = format!("http://127.0.0.1:{port}/unannounced.mp3");
    let run = analyse(&f.dir, &[&url, "speech.wav", "--max-media-size", "4KB"]).expect_code(2);
    assert!(
        run.stderr.contains("over 4000 bytes (--max-media-size)"),
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
        // The container is found, the stream is not: the codec and its problem are named.
        ("header-only.mp3", "no audio in the mp3 stream"),
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

/// `wav` with its `fmt` chunk's sample rate set to `rate`.
fn with_header_rate(wav: &[u8], rate: u32) -> Vec<u8> {
    let mut out = wav.to_vec();
    let fmt = out.windows(4).position(|w| w == b"fmt ").unwrap();
    out[fmt + 12..fmt + 16].copy_from_slice(&rate.to_le_bytes());
    out
}

/// Runs `archivist analyse ARGS` in `dir`, killing it if it has not exited by `deadline`.
fn analyse_within(dir: &Path, args: &[&str], deadline: std::time::Duration) -> Run {
    let mut all = vec!["analyse"];
    all.extend_from_slice(args);
    let child = common::command(dir, &all, &[])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(deadline) {
        Ok(out) => Run::from_output(out.unwrap()),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("analyse {args:?} still running after {deadline:?}");
        }
    }
}

/// Sample rates no audio has, from a WAV header: 0 Hz (symphonia panics on it) fails that clip
/// alone, named, and the other clip is still found; 4,294,967,295 Hz (a resampler table of
/// gigabytes once) as the episode is refused at once. Neither is reported as a bug.
#[test]
fn a_header_sample_rate_outside_audio_fails_that_file_alone_and_fast() {
    let f = files();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let speech = std::fs::read(f.dir.join("speech.wav")).unwrap();
    std::fs::write(d.join("rate0.wav"), with_header_rate(&speech, 0)).unwrap();
    std::fs::write(d.join("ratemax.wav"), with_header_rate(&speech, u32::MAX)).unwrap();
    std::fs::copy(f.dir.join("speech.wav"), d.join("speech.wav")).unwrap();
    std::fs::copy(f.dir.join("episode.wav"), d.join("episode.wav")).unwrap();
    let deadline = std::time::Duration::from_secs(120);

    let run = analyse_within(
        d,
        &["episode.wav", "rate0.wav", "speech.wav", "--json"],
        deadline,
    )
    .expect_code(2);
    let lines = run.json_lines();
    assert_eq!(lines.len(), 2, "one line per clip: {}", run.stdout);
    assert_eq!(lines[0]["clip"], "rate0.wav");
    let words = "sample rate 0 Hz is outside 1000–384000 Hz";
    assert!(
        lines[0]["failure"].as_str().unwrap().contains(words),
        "{}",
        run.stdout
    );
    assert_eq!(lines[1]["clip"], "speech.wav");
    assert_eq!(lines[1]["clip_offsets_ns"].as_array().unwrap().len(), 2);
    assert!(
        run.stderr.contains("rate0.wav") && run.stderr.contains(words),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("internal error"), "{}", run.stderr);
    // The same without --json: a line per clip, the failing one saying why.
    let run =
        analyse_within(d, &["episode.wav", "rate0.wav", "speech.wav"], deadline).expect_code(2);
    assert!(
        run.stdout
            .contains(&format!("rate0.wav: failed: rate0.wav: not audio: {words}")),
        "{}",
        run.stdout
    );

    // A panic inside symphonia (an M4A whose mdhd time scale is 0: `TimeBase::new` asserts
    // while probing) is that clip's failure, with symphonia's words, and no bug report.
    ffmpeg(
        &d.join("speech.wav"),
        &d.join("speech.m4a"),
        &["-c:a", "aac"],
    );
    let mut m4a = std::fs::read(d.join("speech.m4a")).unwrap();
    let mdhd = m4a.windows(4).position(|w| w == b"mdhd").unwrap();
    assert_eq!(m4a[mdhd + 4], 0, "a version 0 mdhd");
    m4a[mdhd + 16..mdhd + 20].copy_from_slice(&0u32.to_be_bytes());
    std::fs::write(d.join("timescale0.m4a"), m4a).unwrap();
    let run = analyse_within(
        d,
        &["episode.wav", "timescale0.m4a", "speech.wav", "--json"],
        deadline,
    )
    .expect_code(2);
    let lines = run.json_lines();
    let failure = lines[0]["failure"].as_str().unwrap();
    assert!(
        failure.contains("timescale0.m4a: undecodable: the format probe failed on malformed input")
            && failure.contains("TimeBase"),
        "{}",
        run.stdout
    );
    assert_eq!(lines[1]["clip_offsets_ns"].as_array().unwrap().len(), 2);
    assert!(!run.stderr.contains("internal error"), "{}", run.stderr);

    let run = analyse_within(d, &["ratemax.wav", "speech.wav"], deadline).expect_code(2);
    assert!(
        run.stderr.contains("ratemax.wav")
            && run
                .stderr
                .contains("sample rate 4294967295 Hz is outside 1000–384000 Hz"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "nothing analysed: {}", run.stdout);
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

/// The environment variable that turns [`helper_runs_one_analyser_and_reports_its_peak_memory`]
/// from a no-op into the measuring wrapper: the working directory, then the arguments, one a
/// line.
const MEASURE_VAR: &str = "ARCHIVIST_TEST_MEASURE_ANALYSE";

/// Not a test of its own: when this test binary is started again with [`MEASURE_VAR`] set, it
/// runs `archivist analyse` as its only child and writes that child's peak resident set (KB,
/// `getrusage(RUSAGE_CHILDREN)` after it is reaped: exact, not sampled) and its outputs to
/// files. A process of its own, so that no other child (ffmpeg, other tests' runs) counts.
#[test]
fn helper_runs_one_analyser_and_reports_its_peak_memory() {
    let Ok(spec) = std::env::var(MEASURE_VAR) else {
        return;
    };
    let mut lines = spec.lines();
    let dir = PathBuf::from(lines.next().unwrap());
    let mut args = vec!["analyse"];
    args.extend(lines);
    let status = common::command(&dir, &args, &[])
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(dir.join("measured.stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("measured.stderr")).unwrap())
        .status()
        .unwrap();
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    // Linux reports ru_maxrss in kilobytes.
    std::fs::write(
        dir.join("measured.result"),
        format!("{} {}", status.code().unwrap_or(-1), usage.max_rss()),
    )
    .unwrap();
}

/// Runs `archivist analyse ARGS` in `dir` through the wrapper above: the run and the
/// analyser's own peak resident memory (MB).
fn analyse_measured(dir: &Path, args: &[&str]) -> (Run, i64) {
    let mut spec = dir.display().to_string();
    for a in args {
        spec.push('\n');
        spec.push_str(a);
    }
    let wrapper = Command::new(std::env::current_exe().unwrap())
        .args([
            "analyse::helper_runs_one_analyser_and_reports_its_peak_memory",
            "--exact",
            "--test-threads=1",
        ])
        .env(MEASURE_VAR, spec)
        .output()
        .unwrap();
    assert!(wrapper.status.success(), "the wrapper failed: {wrapper:?}");
    let result = std::fs::read_to_string(dir.join("measured.result")).unwrap();
    let (code, kb) = result.split_once(' ').unwrap();
    let run = Run {
        code: code.parse().unwrap(),
        stdout: std::fs::read_to_string(dir.join("measured.stdout")).unwrap(),
        stderr: std::fs::read_to_string(dir.join("measured.stderr")).unwrap(),
    };
    (run, kb.parse::<i64>().unwrap() / 1024)
}

/// The analyser's peak resident memory for an hour-long episode must stay below this (MB).
///
/// Holding the episode whole would cost, at the least, the hour at the 8 kHz analysis rate as
/// `f32`: 3,600 s × 8,000 × 4 B = 115 MB (and at the file's 22,050 Hz, 318 MB), on top of the
/// process's own ~15 MB. What the analyser does hold: the index of 10 clips at three speeds
/// (a few MB), the episode's last ~50 s at 8 kHz for refinement (under 2 MB), one MP3 packet,
/// and the binary's runtime (measured: about 25–30 MB in all). 80 MB leaves room for
/// allocator slack and is still 35 MB short of the smallest whole-episode buffer.
const HOUR_PEAK_MB: i64 = 80;

#[test]
fn an_hour_long_episode_is_analysed_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // One minute synthesised and encoded once, then the hour made by concatenation without
    // re-encoding (ffmpeg's concat demuxer, `-c copy`): seconds instead of the minute an
    // hour's synthesis and encoding would take. Each clip then occurs once a minute.
    let rate = 22_050u32;
    let s = u64::from(rate);
    let clips: Vec<Vec<f32>> = (0..10)
        .map(|i| {
            Speech::render(
                100 + i,
                rate,
                Voice::numbered(i as u32),
                5.0 + i as f32 / 2.0,
            )
        })
        .collect();
    let insertions = vec![
        Insertion {
            clip: 0,
            offset: 3 * s + 123,
            gain: 1.0,
            over: false,
        },
        Insertion {
            clip: 3,
            offset: 31 * s + 4_567,
            gain: 0.8,
            over: false,
        },
    ];
    let mut names = Vec::new();
    for (i, c) in clips.iter().enumerate() {
        let name = format!("clip{i}.wav");
        common::audio::write_samples(&d.join(&name), rate, c);
        names.push(name);
    }
    let arcs = clips.into_iter().map(Arc::new).collect();
    let mut minute = EpisodeSynth::new(5, rate, 60.0, 4, arcs, insertions).with_bed(6, 0.03);
    let truth = minute.truth();
    write_wav(&d.join("minute.wav"), rate, &mut |b| minute.fill(b));
    ffmpeg(
        &d.join("minute.wav"),
        &d.join("minute.mp3"),
        &["-c:a", "libmp3lame", "-b:a", "64k"],
    );
    for ext in ["wav", "mp3"] {
        std::fs::write(
            d.join(format!("{ext}.txt")),
            format!("file 'minute.{ext}'\n").repeat(60),
        )
        .unwrap();
        let concat = Command::new("ffmpeg")
            .current_dir(d)
            .args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y"])
            .args(["-f", "concat", "-safe", "0", "-i", &format!("{ext}.txt")])
            .args(["-c", "copy", &format!("hour.{ext}")])
            .status()
            .unwrap();
        assert!(concat.success(), "ffmpeg could not make hour.{ext}");
    }
    // Each copy brings its own encoder delay and padding, whole frames of them: copy k starts
    // k × (its frames × 576 samples, MPEG-2 layer III at 22,050 Hz) into the decoded stream,
    // and the gapless trimming of the first copy's delay shifts every copy alike.
    let probe = Command::new("ffprobe")
        .args(["-v", "error", "-count_packets", "-show_entries"])
        .args(["stream=nb_read_packets", "-of", "csv=p=0"])
        .arg(d.join("minute.mp3"))
        .output()
        .unwrap();
    let frames: u64 = String::from_utf8_lossy(&probe.stdout)
        .trim()
        .parse()
        .unwrap();
    let period_ns = frames * 576 * 1_000_000_000 / s;
    assert!(
        (60_000_000_000..60_200_000_000).contains(&period_ns),
        "{period_ns}"
    );

    // The WAV's minutes follow one another exactly; the MP3's each add their frames' slack.
    for (episode, period_ns) in [("hour.wav", 60_000_000_000), ("hour.mp3", period_ns)] {
        let mut args = vec![episode];
        args.extend(names.iter().map(String::as_str));
        args.push("--json");
        let (run, peak_mb) = analyse_measured(d, &args);
        let run = run.expect_code(0);
        let lines = run.json_lines();
        assert_eq!(lines.len(), 10);
        for (line, t) in lines.iter().zip(&truth) {
            let offsets: Vec<u64> = line["clip_offsets_ns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            let expected: Vec<u64> = t
                .iter()
                .flat_map(|&t| (0..60).map(move |k| k * period_ns + t))
                .collect();
            assert_eq!(offsets.len(), expected.len(), "{episode}: {line}");
            for (o, e) in offsets.iter().zip(&expected) {
                assert!(o.abs_diff(*e) <= TOLERANCE_NS, "{episode}: {o} vs {e}");
            }
        }
        let duration = lines[0]["episode_duration_ns"].as_u64().unwrap();
        assert!(
            duration.abs_diff(60 * period_ns) < 200_000_000,
            "{episode}: {duration}"
        );
        eprintln!("{episode} against 10 clips: peak resident memory {peak_mb} MB");
        assert!(
            peak_mb < HOUR_PEAK_MB,
            "{episode}: the analyser's peak resident memory {peak_mb} MB is not under {HOUR_PEAK_MB} MB"
        );
    }
}

/// A URL typed is fetched as given, loopback included, and so are its redirects when it
/// answered from loopback; a redirect to loopback from a public address (127.0.0.2, taken for
/// public by a test-only setting) is refused, naming the address and the flag.
#[test]
fn a_redirect_to_a_private_address_is_refused_unless_the_url_typed_was_private() {
    let f = files();
    let redirect_to = |target: String| {
        move |stream: &mut std::net::TcpStream| {
            write!(
                stream,
                "HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
        }
    };
    let target = "http://127.0.0.1:9/episode.mp3".to_string();
    let public = TcpListener::bind("127.0.0.2:0").unwrap();
    let public_port = public.local_addr().unwrap().port();
    let answer = redirect_to(target.clone());
    let server = std::thread::spawn(move || {
        let (mut stream, _) = public.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
        }
        answer(&mut stream);
    });
    let url = format!("http://127.0.0.2:{public_port}/hop.mp3");
    let run = Run::from_output(
        common::command(
            &f.dir,
            &["analyse", &url, "speech.wav"],
            &[("ARCHIVIST_TEST_PUBLIC_ADDRESSES", "127.0.0.2")],
        )
        .output()
        .unwrap(),
    )
    .expect_code(2);
    assert!(
        run.stderr.contains("refused to connect to 127.0.0.1")
            && run.stderr.contains("--allow-private-addresses"),
        "{}",
        run.stderr
    );
    server.join().unwrap();
    // Typed on loopback: its redirect to loopback is followed (here to a closed port: a
    // connection error, not a refusal).
    let (port, server) = serve(1, redirect_to(target));
    let url = format!("http://127.0.0.1:{port}/hop.mp3");
    let run = analyse(&f.dir, &[&url, "speech.wav"]).expect_code(2);
    assert!(!run.stderr.contains("refused to connect"), "{}", run.stderr);
    server.join().unwrap();
}
