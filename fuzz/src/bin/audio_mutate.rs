//! The audio fuzzer that needs no AFL (no cargo-afl here, and AFL++ takes long to build on a
//! small machine): deterministic structured mutation of the files in `fuzz/corpus/audio/`,
//! each run through the analyser's whole path (`audio_target.rs`). `fuzz/audio.sh` runs it
//! under a memory limit and copies what it finds into the repository.
//!
//! ```text
//! audio-mutate seed CORPUS             the WAV seeds, synthesised (ffmpeg encodes the others)
//! audio-mutate craft CORPUS            the named header cases, written beside the seeds
//! audio-mutate one FILE…               what the target says of each file
//! audio-mutate run CORPUS OUT SECONDS [SEED]
//! ```
//!
//! `run` picks a corpus file, mutates its header fields and bytes (`mutate.rs`), writes the
//! result to `OUT/current.EXT` and analyses it. An input whose outcome is new (the error's
//! words, numbers taken out) is kept in `OUT/kept/`, and mutated further: without coverage
//! instrumentation, distinct outcomes are the feedback. A panic that escapes the analyser is
//! saved to `OUT/crashes/`; an input still running after `HANG_SECONDS` is saved there and the
//! process exits 3; an allocation over the memory limit aborts the process, and the script
//! keeps `OUT/current.*`.

#[path = "../audio_target.rs"]
mod audio_target;
#[path = "../mutate.rs"]
mod mutate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mutate::{Kind, Rng};

/// An input still being analysed after this long is a hang (the seeds take milliseconds).
const HANG_SECONDS: u64 = 30;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["seed", corpus] => seed(Path::new(corpus)),
        ["one", files @ ..] => {
            audio_target::quiet_for_caught_decoder_panics();
            for f in files {
                println!("{f}: {}", audio_target::analyse_file(Path::new(f)));
            }
            Ok(ExitCode::SUCCESS)
        }
        ["craft", corpus] => craft(Path::new(corpus)),
        ["run", corpus, out, seconds, rest @ ..] => match seconds.parse() {
            Ok(s) => run(
                Path::new(corpus),
                Path::new(out),
                s,
                rest.first().and_then(|r| r.parse().ok()).unwrap_or(1),
            ),
            Err(_) => Err("SECONDS: a whole number".into()),
        },
        _ => Err("usage: audio-mutate seed CORPUS | craft CORPUS | one FILE… | run CORPUS OUT SECONDS [SEED]".into()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("audio-mutate: {e}");
            ExitCode::from(2)
        }
    }
}

type Res<T> = Result<T, String>;

/// The corpus's audio files: `(name, kind, bytes)`, in name order.
fn load(dir: &Path) -> Res<Vec<(String, Kind, Vec<u8>)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(kind) = Kind::of(&name) {
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            out.push((name, kind, bytes));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The WAV seeds, from the analyser's speech synthesiser: 0.4 s mono 16-bit at 16 kHz, and
/// 0.15 s stereo 32-bit float at 22.05 kHz (a WAVE_FORMAT_EXTENSIBLE header, as ffmpeg writes
/// for float). Written by hand: the header is what is fuzzed, so its layout is spelt out.
fn seed(corpus: &Path) -> Res<ExitCode> {
    use analysis::synth::{Speech, Voice};
    let mono = Speech::render(41, 16_000, Voice::numbered(1), 0.4);
    let pcm: Vec<u8> = mono
        .iter()
        .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32_767.0) as i16).to_le_bytes())
        .collect();
    let stereo = Speech::render(42, 22_050, Voice::numbered(2), 0.15);
    let float: Vec<u8> = stereo
        .iter()
        .flat_map(|s| [s.to_le_bytes(), (s * 0.5).to_le_bytes()].concat())
        .collect();
    for (name, bytes) in [
        ("seed-mono16.wav", wav(1, 16_000, 16, 1, &pcm)),
        ("seed-stereo-float.wav", wav(2, 22_050, 32, 3, &float)),
    ] {
        let path = corpus.join(name);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// A RIFF WAVE file: `format` 1 (PCM) with a plain `fmt` chunk, 3 (float) as
/// WAVE_FORMAT_EXTENSIBLE.
fn wav(channels: u16, rate: u32, bits: u16, format: u16, data: &[u8]) -> Vec<u8> {
    let block = channels * bits / 8;
    let mut fmt = Vec::new();
    let tag: u16 = if format == 1 { 1 } else { 0xFFFE };
    fmt.extend(tag.to_le_bytes());
    fmt.extend(channels.to_le_bytes());
    fmt.extend(rate.to_le_bytes());
    fmt.extend((rate * u32::from(block)).to_le_bytes());
    fmt.extend(block.to_le_bytes());
    fmt.extend(bits.to_le_bytes());
    if format != 1 {
        fmt.extend(22u16.to_le_bytes());
        fmt.extend(bits.to_le_bytes());
        fmt.extend(3u32.to_le_bytes()); // front left and right
                                        // KSDATAFORMAT_SUBTYPE_IEEE_FLOAT
        fmt.extend(format.to_le_bytes());
        fmt.extend([
            0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71,
        ]);
    }
    let mut out = b"RIFF".to_vec();
    out.extend((4 + 8 + fmt.len() as u32 + 8 + data.len() as u32).to_le_bytes());
    out.extend(b"WAVEfmt ");
    out.extend((fmt.len() as u32).to_le_bytes());
    out.extend(fmt);
    out.extend(b"data");
    out.extend((data.len() as u32).to_le_bytes());
    out.extend(data);
    out
}

/// The named cases: in each seed, the first sample-rate and channel fields set to 0 and to
/// their largest value (and a WAV with 20 channels, over the analyser's bound but one its
/// decoder accepts).
fn craft(corpus: &Path) -> Res<ExitCode> {
    audio_target::quiet_for_caught_decoder_panics();
    let seeds: Vec<_> = load(corpus)?
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("seed-"))
        .collect();
    let wanted = [
        (
            "rate",
            &[
                "sample rate",
                "rate index",
                "vorbis rate",
                "mp4a sample rate",
                "asc rate index",
            ][..],
        ),
        ("timescale", &["mdhd timescale"]),
        (
            "channels",
            &[
                "channels",
                "channels - 1",
                "channel config",
                "vorbis channels",
                "mp4a channels",
                "asc channels",
            ],
        ),
    ];
    let mut written = 0;
    for (name, kind, bytes) in &seeds {
        let stem = name
            .trim_start_matches("seed-")
            .rsplit_once('.')
            .map_or(name.as_str(), |(s, _)| s);
        let ext = name.rsplit('.').next().unwrap_or("bin");
        let fields = mutate::fields(*kind, bytes);
        for (label, names) in wanted {
            let Some(f) = fields.iter().find(|f| names.contains(&f.name)) else {
                continue;
            };
            let max = if f.width >= 64 {
                u64::MAX
            } else {
                (1 << f.width) - 1
            };
            let mut values = vec![("0", 0), ("max", max)];
            if *kind == Kind::Wav && label == "channels" {
                values.push(("20", 20));
            }
            for (v_label, v) in values {
                let mut data = bytes.clone();
                mutate::set(&mut data, *f, v);
                if *kind == Kind::Ogg {
                    mutate::fix_ogg_crcs(&mut data);
                }
                let path = corpus.join(format!("crafted-{stem}-{label}-{v_label}.{ext}"));
                std::fs::write(&path, &data).map_err(|e| format!("{}: {e}", path.display()))?;
                println!("{}: {}", path.display(), audio_target::analyse_file(&path));
                written += 1;
            }
        }
    }
    println!("{written} crafted files from {} seeds", seeds.len());
    Ok(ExitCode::SUCCESS)
}

fn run(corpus: &Path, out: &Path, seconds: u64, seed: u64) -> Res<ExitCode> {
    audio_target::quiet_for_caught_decoder_panics();
    let mut pool = load(corpus)?;
    if pool.is_empty() {
        return Err(format!("no audio files in {}", corpus.display()));
    }
    for dir in ["kept", "crashes"] {
        std::fs::create_dir_all(out.join(dir)).map_err(|e| e.to_string())?;
    }
    // The classes the corpus itself gives: only new ones are kept.
    let mut classes: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for (name, _, _) in &pool {
        let class = guarded(&corpus.join(name)).unwrap_or_else(|p| format!("panic: {p}"));
        classes.entry(class).or_insert((0, name.clone()));
    }
    let started = Arc::new(AtomicU64::new(0));
    let current: Arc<Mutex<PathBuf>> = Arc::new(Mutex::new(PathBuf::new()));
    let t0 = Instant::now();
    watchdog(
        Arc::clone(&started),
        Arc::clone(&current),
        out.to_owned(),
        t0,
    );
    let mut rng = Rng::new(seed);
    let (mut execs, mut crashes) = (0u64, 0u64);
    let mut slowest = (Duration::ZERO, String::new());
    let mut per_kind: BTreeMap<String, u64> = BTreeMap::new();
    while t0.elapsed() < Duration::from_secs(seconds) {
        let (name, kind, bytes) = &pool[rng.below(pool.len())];
        let (name, kind) = (name.clone(), *kind);
        let mut data = bytes.clone();
        let did = mutate::mutate(kind, &mut data, &mut rng);
        let ext = name.rsplit('.').next().unwrap_or("bin").to_owned();
        // One `current.*` at a time: after an abort, it is the input that caused it.
        let path = out.join(format!("current.{ext}"));
        let previous = current.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if previous != path && previous.exists() {
            std::fs::remove_file(&previous).map_err(|e| e.to_string())?;
        }
        std::fs::write(&path, &data).map_err(|e| e.to_string())?;
        *current.lock().unwrap_or_else(|p| p.into_inner()) = path.clone();
        let begun = t0.elapsed();
        started.store(begun.as_millis() as u64 + 1, Ordering::SeqCst);
        let outcome = guarded(&path);
        started.store(0, Ordering::SeqCst);
        let took = t0.elapsed() - begun;
        execs += 1;
        *per_kind.entry(format!("{kind:?}")).or_default() += 1;
        if took > slowest.0 {
            slowest = (took, format!("{name} {did:?}"));
        }
        let class = match outcome {
            Ok(class) => class,
            Err(panic) => {
                crashes += 1;
                let saved = out.join("crashes").join(format!("crash-{execs}.{ext}"));
                std::fs::write(&saved, &data).map_err(|e| e.to_string())?;
                eprintln!("CRASH {}: {panic} (from {name}, {did:?})", saved.display());
                format!("panic: {panic}")
            }
        };
        if !classes.contains_key(&class) {
            let kept = format!(
                "found-{:03}-{}.{ext}",
                classes.len(),
                format!("{kind:?}").to_lowercase()
            );
            std::fs::write(out.join("kept").join(&kept), &data).map_err(|e| e.to_string())?;
            println!("new outcome [{kept}] from {name} {did:?}: {class}");
            classes.insert(class, (execs as usize, kept.clone()));
            pool.push((kept, kind, data));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "execs {execs} ({:.0}/s), per container {per_kind:?}, outcomes {}, crashes {crashes}, \
         slowest {:.2} s ({}), peak memory {}",
        execs as f64 / secs,
        classes.len(),
        slowest.0.as_secs_f64(),
        slowest.1,
        peak_memory()
    );
    Ok(if crashes > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The target, with a panic that escapes it returned as its message.
fn guarded(path: &Path) -> Result<String, String> {
    std::panic::catch_unwind(|| audio_target::analyse_file(path)).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

/// Saves the input and ends the process if one input runs longer than `HANG_SECONDS`.
fn watchdog(started: Arc<AtomicU64>, current: Arc<Mutex<PathBuf>>, out: PathBuf, t0: Instant) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let at = started.load(Ordering::SeqCst);
        if at > 0 && (t0.elapsed().as_millis() as u64).saturating_sub(at) > HANG_SECONDS * 1000 {
            let path = current.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let saved = out.join("crashes").join(format!("hang-{name}"));
            let _ = std::fs::copy(&path, &saved);
            eprintln!(
                "HANG {}: still running after {HANG_SECONDS} s",
                saved.display()
            );
            std::process::exit(3);
        }
    });
}

/// The process's peak resident memory, as Linux reports it.
fn peak_memory() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l[6..].trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}
