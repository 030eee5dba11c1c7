//! Episode prints, measured: print size per hour of audio, the first pass's extra CPU with
//! printing (against the same analysis without, in the same run), and a new clip's pass from
//! the print against the same pass in full (CPU, bytes of media read), on each format.
//!
//! ```text
//! cargo bench -p analysis --bench prints -- [--minutes N] [--dir DIR] [--rounds N]
//!     [--corpus DIR] [--only NAME] [--profile NAME N [--absent] [--episode PATH] [--clip PATH]]
//! ```
//!
//! The episode (synthesised speech over a music bed, `--minutes` long, 30 by default, with
//! five first-pass clips and a new clip placed in it) is encoded by ffmpeg into each format
//! once and kept in `DIR` (default `target/print-bench`); a last pass from the print is for a
//! clip the episode does not hold (`abs`: only chance vote clusters to refine). CPU is this
//! process's user +
//! system time (one thread), the best of `--rounds` (3) runs of each measurement.
//!
//! `--corpus DIR` (`scripts/make-analysis-corpus.sh`'s output) measures its MP3 64k, AAC 96k,
//! Ogg q2 and FLAC episodes instead, the first pass against its clips but the last two, the
//! new clip the last, the `abs` one the one before (sorted by name).
//!
//! `ACCURACY_PARAMS=name=value,…` changes the analyser's parameters as in the accuracy
//! benchmark (`benches/shared/tuned.rs`), so that a value's cost from prints is measured
//! without a rebuild.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use analysis::synth::{self, EpisodeSynth, Insertion, Speech, Voice};
use analysis::{Analyser, ClipInput, ClipOutcome, EpisodePrint, EpisodeReport, FileSource};
use nix::sys::resource::{getrusage, UsageWho};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "shared/tuned.rs"]
mod tuned;
use common::{ffmpeg, write_wav};
use tuned::tuned;

const RATE: u32 = 44_100;

fn cpu() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let t = |v: nix::sys::time::TimeVal| {
        Duration::from_secs(v.tv_sec() as u64) + Duration::from_micros(v.tv_usec() as u64)
    };
    t(u.user_time()) + t(u.system_time())
}

/// The least CPU of `rounds` runs of `f`, and its last result.
fn measure<T>(rounds: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..rounds.max(1) {
        let start = cpu();
        let out = f();
        best = best.min(cpu() - start);
        last = Some(out);
    }
    (best, last.unwrap())
}

/// The episode in every format, the first pass's clips, and the new clip (made once).
fn corpus(dir: &Path, minutes: f64) -> (Vec<PathBuf>, Vec<ClipInput>, ClipInput, ClipInput) {
    std::fs::create_dir_all(dir).unwrap();
    let seconds = minutes * 60.0;
    let clips: Vec<Vec<f32>> = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                Speech::render(100 + i, RATE, Voice::numbered(i as u32 + 3), 6.0)
            } else {
                synth::jingle(200 + i, RATE, 4.0)
            }
        })
        .collect();
    let mut paths = Vec::new();
    for (i, c) in clips.iter().enumerate() {
        let p = dir.join(format!("clip{i}.wav"));
        if !p.exists() {
            write_wav(&p, c, RATE);
        }
        paths.push(ClipInput::new(p));
    }
    let wav = dir.join(format!("episode-{minutes}m.wav"));
    if !wav.exists() {
        let insertions = (0..12u64)
            .map(|k| Insertion {
                clip: (k % 6) as usize,
                offset: ((k as f64 + 0.5) * seconds / 12.0) as u64 * u64::from(RATE) + k * 37,
                gain: 0.9,
                over: false,
            })
            .collect();
        let arcs = clips.into_iter().map(Arc::new).collect();
        let (episode, _) = EpisodeSynth::new(7, RATE, seconds, 2, arcs, insertions)
            .with_bed(8, 0.03)
            .render();
        write_wav(&wav, &episode, RATE);
    }
    let mut episodes = Vec::new();
    for (name, args) in [
        (
            "mp3-cbr128.mp3",
            &["-c:a", "libmp3lame", "-b:a", "128k"][..],
        ),
        ("mp3-vbr.mp3", &["-c:a", "libmp3lame", "-q:a", "4"][..]),
        ("aac128.m4a", &["-c:a", "aac", "-b:a", "128k"][..]),
        ("vorbis.ogg", &["-c:a", "libvorbis", "-q:a", "4"][..]),
        ("episode.flac", &["-c:a", "flac"][..]),
    ] {
        let out = dir.join(format!("episode-{minutes}m-{name}"));
        if !out.exists() {
            ffmpeg(&wav, &out, args);
        }
        episodes.push(out);
    }
    episodes.push(wav);
    let new = paths.pop().unwrap();
    let absent = dir.join("absent.wav");
    if !absent.exists() {
        write_wav(
            &absent,
            &Speech::render(999, RATE, Voice::numbered(9), 6.0),
            RATE,
        );
    }
    (episodes, paths, new, ClipInput::new(absent))
}

/// The analysis corpus's episodes of four classes and its clips.
fn analysis_corpus(dir: &Path) -> (Vec<PathBuf>, Vec<ClipInput>, ClipInput, ClipInput) {
    let list = |sub: &str| {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    };
    let episodes = list("episodes")
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            [
                "-mp3_64k.mp3",
                "-aac_96k.m4a",
                "-ogg_q2.ogg",
                "-lossless.flac",
            ]
            .iter()
            .any(|class| name.ends_with(class))
        })
        .collect();
    let mut clips: Vec<ClipInput> = list("clips")
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .map(ClipInput::new)
        .collect();
    let new = clips.pop().unwrap();
    let absent = clips.pop().unwrap();
    (episodes, clips, new, absent)
}

fn same(a: &EpisodeReport, b: &EpisodeReport) -> bool {
    a.clips.iter().zip(&b.clips).all(|(x, y)| match (x, y) {
        (ClipOutcome::Found(x), ClipOutcome::Found(y)) => {
            x.matches.len() == y.matches.len()
                && x.matches.iter().zip(&y.matches).all(|(m, n)| {
                    m.offset_ns.abs_diff(n.offset_ns) <= 1_000_000
                        && (m.score - n.score).abs() <= 0.01
                })
        }
        _ => false,
    })
}

fn found(r: &EpisodeReport) -> usize {
    r.clips
        .iter()
        .map(|c| match c {
            ClipOutcome::Found(c) => c.matches.len(),
            ClipOutcome::Failed(_) => 0,
        })
        .sum()
}

fn main() {
    // RUST_LOG=analysis=debug: what the print path decided for each candidate.
    if let Ok(filter) = std::env::var("RUST_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let minutes: f64 = value("--minutes").map_or(30.0, |v| v.parse().unwrap());
    let rounds: usize = value("--rounds").map_or(3, |v| v.parse().unwrap());
    let dir = value("--dir").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("print-bench")
        },
        PathBuf::from,
    );
    // `--profile NAME N`: only the analysis from the print of the episode whose name
    // contains NAME, N times (for `perf record`).
    let profile = value("--profile");
    let repeat: usize = args
        .iter()
        .position(|a| a == "--profile")
        .and_then(|i| args.get(i + 2))
        .map_or(1, |v| v.parse().unwrap());
    let (episodes, first_clips, new_clip, absent_clip) = match value("--corpus") {
        Some(c) => analysis_corpus(Path::new(&c)),
        None => corpus(&dir, minutes),
    };
    println!(
        "{:<28} {:>9} {:>9} {:>8} | {:>8} {:>8} {:>7} | {:>10} {:>10} {:>7} {:>6} {:>5} | {:>8} {:>9}",
        "episode",
        "plain s",
        "print s",
        "extra",
        "new full",
        "new prt",
        "CPU ×",
        "media B",
        "read B",
        "reads",
        "KB/h",
        "same",
        "abs prt",
        "abs read"
    );
    // `--only NAME`: the episodes whose name contains NAME.
    let episodes: Vec<PathBuf> = match value("--only") {
        Some(only) => episodes
            .into_iter()
            .filter(|e| e.to_string_lossy().contains(&only))
            .collect(),
        None => episodes,
    };
    if let Some(name) = profile {
        // `--episode PATH`: that episode instead (an archive corpus's, say).
        let given = value("--episode").map(PathBuf::from);
        let episode = given.as_ref().unwrap_or_else(|| {
            episodes
                .iter()
                .find(|e| e.to_string_lossy().contains(&name))
                .unwrap()
        });
        let analyser = Analyser::new(tuned());
        // The print is the episode's whatever the clips (one is enough to make it: under
        // `valgrind --tool=callgrind` the first pass is most of the run).
        let (_, print) = analyser
            .analyse_printing(episode, &first_clips[..1], String::new(), &mut |_| {})
            .unwrap();
        let bytes = print.to_bytes();
        // `--clip PATH[,PATH…]`: the clips looked for, each in passes of its own (for
        // callgrind, `--dump-after='*analyse_from_print*'` gives each pass's instructions);
        // `--absent`: the clip the episode does not hold.
        let news: Vec<ClipInput> = match value("--clip") {
            Some(clips) => clips.split(',').map(ClipInput::new).collect(),
            None if args.iter().any(|a| a == "--absent") => vec![absent_clip.clone()],
            None => vec![new_clip.clone()],
        };
        for clip in news {
            let new = [clip];
            analyser.clip(&new[0].path).unwrap();
            // Each pass reads the print from its bytes, as a researcher does.
            let (mut reading, start) = (Duration::ZERO, cpu());
            let mut hits = 0;
            for _ in 0..repeat {
                let read_from = cpu();
                let print = EpisodePrint::from_bytes(&bytes, analyser.params()).unwrap();
                reading += cpu() - read_from;
                let mut media = FileSource::open(episode).unwrap();
                let report = analyser
                    .analyse_from_print(&print, &mut media, &new)
                    .unwrap();
                hits = found(&report);
            }
            let hours = print.duration_ns() as f64 / 3.6e12;
            let each = (cpu() - start).as_secs_f64() / repeat as f64;
            println!(
            "{} against {} from its print: {:.4} s CPU each ({:.4} s an hour; reading the print {:.4} s); \
             found {hits}; print {} bytes, {:.0} an hour",
            episode.display(),
            new[0].path.display(),
            each,
            each / hours,
            reading.as_secs_f64() / repeat as f64,
            bytes.len(),
            bytes.len() as f64 / hours
        );
        }
        return;
    }
    for episode in &episodes {
        // One analyser per measurement, so that the clips' fingerprints are cached alike.
        let analyser = Analyser::new(tuned());
        analyser.analyse(episode, &first_clips).unwrap();
        let (plain_cpu, plain) =
            measure(rounds, || analyser.analyse(episode, &first_clips).unwrap());
        let (print_cpu, (printed, print)) = measure(rounds, || {
            analyser
                .analyse_printing(episode, &first_clips, String::new(), &mut |_| {})
                .unwrap()
        });
        assert!(same(&plain, &printed));
        let bytes = print.to_bytes();
        let print = EpisodePrint::from_bytes(&bytes, analyser.params()).unwrap();
        let new = [new_clip.clone()];
        let (full_cpu, full) = measure(rounds, || analyser.analyse(episode, &new).unwrap());
        let mut read = (0, 0);
        let (from_cpu, from) = measure(rounds, || {
            let mut media = FileSource::open(episode).unwrap();
            let r = analyser
                .analyse_from_print(&print, &mut media, &new)
                .unwrap();
            read = (media.bytes_read(), media.requests());
            r
        });
        // A clip the episode does not hold: only chance vote clusters to refine.
        let absent = [absent_clip.clone()];
        analyser.clip(&absent_clip.path).unwrap();
        let mut absent_read = 0;
        let (absent_cpu, _) = measure(rounds, || {
            let mut media = FileSource::open(episode).unwrap();
            let r = analyser
                .analyse_from_print(&print, &mut media, &absent)
                .unwrap();
            absent_read = media.bytes_read();
            r
        });
        let size = std::fs::metadata(episode).unwrap().len();
        let hours = print.duration_ns() as f64 / 3.6e12;
        println!(
            "{:<28} {:>9.3} {:>9.3} {:>7.1}% | {:>8.3} {:>8.4} {:>7.0} | {:>10} {:>10} {:>7} {:>6.0} {:>5} | {:>8.4} {:>9}",
            episode.file_name().unwrap().to_string_lossy(),
            plain_cpu.as_secs_f64(),
            print_cpu.as_secs_f64(),
            (print_cpu.as_secs_f64() / plain_cpu.as_secs_f64() - 1.0) * 100.0,
            full_cpu.as_secs_f64(),
            from_cpu.as_secs_f64(),
            full_cpu.as_secs_f64() / from_cpu.as_secs_f64().max(1e-6),
            size,
            read.0,
            read.1,
            bytes.len() as f64 / hours / 1e3,
            if same(&full, &from) {
                format!("yes/{}", found(&full))
            } else {
                "NO".to_owned()
            },
            absent_cpu.as_secs_f64(),
            absent_read,
        );
    }
}
