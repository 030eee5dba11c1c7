//! The print fuzzer, with no AFL (as `audio-mutate`): deterministic structured mutation of
//! the episode prints in `fuzz/corpus/print/` (each a print and its media, see
//! `print_target.rs`), each read and run as a pass from the print against the corpus's clip.
//! `fuzz/print.sh` runs it under a memory limit and copies what it finds into the repository.
//!
//! ```text
//! print-mutate seed CORPUS             the clip and the seeds: prints the analyser makes
//! print-mutate craft CORPUS            the named forged prints, written beside the seeds
//! print-mutate one FILE…               what the target says of each file
//! print-mutate run CORPUS OUT SECONDS [SEED]
//! ```
//!
//! A print's checksum has no key: a mutated print is signed again (most of the time), so
//! that what is fuzzed is the reader's bounds and the pass, not the checksum. `run` picks a
//! corpus file, mutates the print's fields (found by walking its layout, `print.rs`), writes
//! the result to `OUT/current.pcase` and runs it. An input whose outcome is new is kept in
//! `OUT/kept/` and mutated further; a panic is saved to `OUT/crashes/`; an input still running
//! after `HANG_SECONDS` is saved there and the process exits 3; an allocation over the memory
//! limit aborts the process, and the script keeps `OUT/current.pcase`.

#[path = "../mutate.rs"]
#[allow(dead_code)]
mod mutate;
#[path = "../print_target.rs"]
mod print_target;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use analysis::synth::{Speech, Voice};
use analysis::{Analyser, Params};
use mutate::Rng;
use sha2::{Digest, Sha256};

/// An input still running after this long is a hang (the seeds take milliseconds).
const HANG_SECONDS: u64 = 30;
/// The rate of the seeds' audio: small files.
const RATE: u32 = 8_000;
const EXT: &str = "pcase";

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["seed", corpus] => seed(Path::new(corpus)),
        ["craft", corpus] => craft(Path::new(corpus)),
        ["one", files @ ..] => one(files),
        ["run", corpus, out, seconds, rest @ ..] => match seconds.parse() {
            Ok(s) => run(
                Path::new(corpus),
                Path::new(out),
                s,
                rest.first().and_then(|r| r.parse().ok()).unwrap_or(1),
            ),
            Err(_) => Err("SECONDS: a whole number".into()),
        },
        _ => Err("usage: print-mutate seed CORPUS | craft CORPUS | one FILE… | run CORPUS OUT SECONDS [SEED]".into()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("print-mutate: {e}");
            ExitCode::from(2)
        }
    }
}

fn write(path: &Path, bytes: &[u8]) -> Res<()> {
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn read(path: &Path) -> Res<Vec<u8>> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A mono WAV file of `samples` at [`RATE`]: 16-bit, or 8-bit unsigned.
fn wav(samples: &[f32], bits: u16) -> Vec<u8> {
    let data: Vec<u8> = if bits == 8 {
        samples
            .iter()
            .map(|s| (s.clamp(-1.0, 1.0) * 127.0 + 128.0) as u8)
            .collect()
    } else {
        samples
            .iter()
            .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32_000.0) as i16).to_le_bytes())
            .collect()
    };
    let block = bits / 8;
    let mut out = b"RIFF".to_vec();
    out.extend((36 + data.len() as u32).to_le_bytes());
    out.extend(b"WAVEfmt ");
    out.extend(16u32.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(RATE.to_le_bytes());
    out.extend((RATE * u32::from(block)).to_le_bytes());
    out.extend(block.to_le_bytes());
    out.extend(bits.to_le_bytes());
    out.extend(b"data");
    out.extend((data.len() as u32).to_le_bytes());
    out.extend(data);
    out
}

/// The clip (2 s of one voice) and the seeds: an episode (another voice, the clip, the
/// other voice again: 3.5 s) as 8-bit WAV (the media, made here, is the 16-bit WAV where
/// ffmpeg is installed: MP3, FLAC and Ogg Vorbis made from it), each with the print the
/// analyser makes of it.
fn seed(corpus: &Path) -> Res<ExitCode> {
    std::fs::create_dir_all(corpus).map_err(|e| e.to_string())?;
    let clip = Speech::render(61, RATE, Voice::numbered(1), 2.0);
    let mut episode = Speech::render(62, RATE, Voice::numbered(2), 1.0);
    episode.extend(clip.iter().map(|s| s * 0.9));
    episode.extend(Speech::render(63, RATE, Voice::numbered(2), 0.5));
    write(&corpus.join("clip.wav"), &wav(&clip, 16))?;
    let tmp = std::env::temp_dir().join(format!("print-mutate-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let wav16 = tmp.join("episode.wav");
    write(&wav16, &wav(&episode, 16))?;
    let wav8 = tmp.join("episode8.wav");
    write(&wav8, &wav(&episode, 8))?;
    let mut media = vec![("wav8", wav8)];
    for (name, ext, args) in [
        ("mp3", "mp3", &["-c:a", "libmp3lame", "-b:a", "24k"][..]),
        ("flac", "flac", &["-c:a", "flac"][..]),
        ("vorbis", "ogg", &["-c:a", "libvorbis", "-q:a", "0"][..]),
    ] {
        let out = tmp.join(format!("episode.{ext}"));
        let made = Command::new("ffmpeg")
            .args(["-nostdin", "-loglevel", "error", "-y", "-i"])
            .arg(&wav16)
            .args(args)
            .args([
                "-map_metadata",
                "-1",
                "-fflags",
                "+bitexact",
                "-flags:a",
                "+bitexact",
            ])
            .arg(&out)
            .status();
        match made {
            Ok(s) if s.success() => media.push((name, out)),
            _ => eprintln!("no {name} seed: ffmpeg could not make it"),
        }
    }
    let analyser = Analyser::new(Params::default());
    for (name, path) in media {
        let (_, print) = analyser
            .analyse_printing(&path, &[], "seed".into(), &mut |_| {})
            .map_err(|e| format!("{name}: {e}"))?;
        let input = print_target::join(&print.to_bytes(), &read(&path)?);
        let out = corpus.join(format!("seed-{name}.{EXT}"));
        write(&out, &input)?;
        println!(
            "{}: {} bytes, {}",
            out.display(),
            input.len(),
            print_target::pass(&input, &corpus.join("clip.wav"))
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(ExitCode::SUCCESS)
}

/// One varint field of a print (or a run of raw bytes), where it lies.
#[derive(Debug, Clone, Copy)]
struct Tok {
    name: &'static str,
    at: usize,
    len: usize,
}

/// Walks a print's layout (`analysis/src/print.rs`), as far as it holds: its fields.
fn fields(print: &[u8]) -> Vec<Tok> {
    struct W<'a> {
        b: &'a [u8],
        at: usize,
        out: Vec<Tok>,
    }
    impl W<'_> {
        fn var(&mut self, name: &'static str) -> Option<u64> {
            let start = self.at;
            let mut v = 0u64;
            for shift in (0..64).step_by(7) {
                let b = *self.b.get(self.at)?;
                self.at += 1;
                v |= u64::from(b & 0x7f) << shift;
                if b & 0x80 == 0 {
                    self.out.push(Tok {
                        name,
                        at: start,
                        len: self.at - start,
                    });
                    return Some(v);
                }
            }
            None
        }
        fn raw(&mut self, name: &'static str, n: usize) -> Option<()> {
            if self.at.checked_add(n)? > self.b.len() {
                return None;
            }
            self.out.push(Tok {
                name,
                at: self.at,
                len: n,
            });
            self.at += n;
            Some(())
        }
        fn slice(&mut self, name: &'static str) -> Option<()> {
            let n = usize::try_from(self.var(name)?).ok()?;
            self.raw("bytes", n)
        }
        fn walk(&mut self) -> Option<()> {
            self.var("duration")?;
            self.slice("hash length")?;
            self.slice("identity length")?;
            for name in ["rate", "frames", "media length"] {
                self.var(name)?;
            }
            let n = self.var("peak count")?.min(1 << 20);
            let wide = *self.b.get(self.at)? != 0;
            self.raw("wide bins", 1)?;
            for _ in 0..n {
                self.var("peak gap")?;
                self.raw("peak bin", if wide { 2 } else { 1 })?;
            }
            for name in [
                "codec",
                "codec rate",
                "channels",
                "bits per sample",
                "bits per coded sample",
                "frames per packet",
                "frames per block",
                "delay",
                "padding",
                "codec frames",
            ] {
                self.var(name)?;
            }
            self.slice("extra data length")?;
            let n = self.var("packet count")?.min(1 << 20);
            for _ in 0..n {
                let code = self.var("packet")? & 7;
                if code >= 6 {
                    self.var("packet move")?;
                }
                if code == 5 || code == 7 {
                    self.var("packet frames")?;
                }
            }
            let n = self.var("extra count")?.min(1 << 20);
            for _ in 0..n {
                for name in ["extra gap", "trim start", "trim end", "drop"] {
                    self.var(name)?;
                }
                let k = self.var("piece count")?.min(1 << 20);
                for _ in 1..k {
                    self.var("piece move")?;
                    self.var("piece length")?;
                }
            }
            Some(())
        }
    }
    let body = &print[..print.len().saturating_sub(32)];
    let mut w = W {
        b: body,
        at: 14.min(body.len()),
        out: Vec::new(),
    };
    let _ = w.walk();
    w.out
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut w = Vec::new();
    while v >= 0x80 {
        w.push((v as u8) | 0x80);
        v >>= 7;
    }
    w.push(v as u8);
    w
}

fn value(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .enumerate()
        .take(10)
        .fold(0, |v, (i, b)| v | u64::from(b & 0x7f) << (7 * i))
}

/// The print with its checksum computed again (the checksum has no key).
fn sign(print: &mut Vec<u8>) {
    if print.len() < 32 {
        return;
    }
    let body = print.len() - 32;
    let digest = Sha256::digest(&print[..body]);
    print[body..].copy_from_slice(&digest);
}

/// `print` with field `tok` set to `v` (and signed again).
fn set(print: &[u8], tok: Tok, v: u64) -> Vec<u8> {
    let (at, end) = (tok.at.min(print.len()), (tok.at + tok.len).min(print.len()));
    let mut out = print[..at].to_vec();
    out.extend(varint(v));
    out.extend_from_slice(&print[end..]);
    sign(&mut out);
    out
}

/// The first field named `name` (the `nth` of them).
fn field(print: &[u8], name: &str, nth: usize) -> Res<Tok> {
    fields(print)
        .into_iter()
        .filter(|t| t.name == name)
        .nth(nth)
        .ok_or_else(|| format!("no field {name:?} #{nth}"))
}

/// The forged prints of issue 46, from the MP3 seed (the 8-bit WAV one for PCM).
fn craft(corpus: &Path) -> Res<ExitCode> {
    let clip = corpus.join("clip.wav");
    let seed = read(&corpus.join(format!("seed-mp3.{EXT}")))?;
    let (print, media) = print_target::split(&seed).ok_or("seed-mp3: not an input")?;
    let peak_gaps: Vec<Tok> = fields(print)
        .into_iter()
        .filter(|t| t.name == "peak gap")
        .collect();
    let last_t: u64 = peak_gaps
        .iter()
        .map(|t| value(&print[t.at..t.at + t.len]))
        .sum();
    let middle = peak_gaps[peak_gaps.len() / 2];
    let first = peak_gaps[0];
    let first_v = value(&print[first.at..first.at + first.len]);
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        // The resampler's tables sized from the rate: 14.7 GB.
        (
            "rate-max",
            set(print, field(print, "rate", 0)?, u64::from(u32::MAX)),
        ),
        // A jump of 4,000,000,000 frames in the middle of the peaks: the votes sized by it.
        ("peak-jump", {
            let v = value(&print[middle.at..middle.at + middle.len]);
            set(print, middle, v + 4_000_000_000)
        }),
        // Every peak moved to the end of the frame range: `anchor + max_dt` overflows.
        (
            "anchor-overflow",
            set(print, first, first_v + (u64::from(u32::MAX) - last_t)),
        ),
    ];
    let seed8 = read(&corpus.join(format!("seed-wav8.{EXT}")))?;
    let (print8, media8) = print_target::split(&seed8).ok_or("seed-wav8: not an input")?;
    // A PCM decoder's buffer sized from the print: 2^40 frames.
    let pcm = set(print8, field(print8, "frames per packet", 0)?, 1 << 40);
    let mut written = Vec::new();
    for (name, p) in cases.drain(..) {
        written.push((name, print_target::join(&p, media)));
    }
    written.push(("pcm-frames-per-packet", print_target::join(&pcm, media8)));
    for (name, input) in written {
        let path = corpus.join(format!("crafted-{name}.{EXT}"));
        write(&path, &input)?;
        println!("{}: {}", path.display(), print_target::pass(&input, &clip));
    }
    Ok(ExitCode::SUCCESS)
}

fn one(files: &[&str]) -> Res<ExitCode> {
    for f in files {
        let path = Path::new(f);
        let clip = path.with_file_name("clip.wav");
        println!("{f}: {}", print_target::pass(&read(path)?, &clip));
    }
    Ok(ExitCode::SUCCESS)
}

/// Values a field is set to: edges of the widths a reader converts to, and near the old one.
fn interesting(old: u64, rng: &mut Rng) -> u64 {
    const EDGES: [u64; 24] = [
        0,
        1,
        2,
        7,
        63,
        64,
        127,
        128,
        255,
        1_152,
        4_096,
        65_535,
        65_536,
        1 << 20,
        1 << 24,
        (1 << 31) - 1,
        1 << 31,
        (1 << 32) - 2,
        (1 << 32) - 1,
        1 << 32,
        1 << 40,
        (1 << 53) + 1,
        i64::MAX as u64,
        u64::MAX,
    ];
    match rng.below(6) {
        0 | 1 => EDGES[rng.below(EDGES.len())],
        2 => old.wrapping_add(1 + rng.below(16) as u64),
        3 => old.saturating_sub(1 + rng.below(16) as u64),
        4 => old.wrapping_mul(2 + rng.below(1_000) as u64),
        _ => old ^ (1 << rng.below(64)),
    }
}

/// Mutates an input: fields of its print set to edge values or moved, bytes changed, runs
/// removed or repeated; the media cut or changed now and then. Signed again 19 times in 20.
fn mutate_input(input: &[u8], rng: &mut Rng) -> (Vec<u8>, Vec<String>) {
    let Some((print, media)) = print_target::split(input) else {
        return (input.to_vec(), vec!["not an input".into()]);
    };
    let (mut print, mut media) = (print.to_vec(), media.to_vec());
    let mut did = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let toks = fields(&print);
        match rng.below(10) {
            0..=5 if !toks.is_empty() => {
                // Header fields more often than the many peaks and packets.
                let tok = if rng.below(2) == 0 {
                    let named: Vec<&Tok> = toks
                        .iter()
                        .filter(|t| !matches!(t.name, "peak gap" | "peak bin" | "bytes" | "packet"))
                        .collect();
                    if named.is_empty() {
                        toks[rng.below(toks.len())]
                    } else {
                        *named[rng.below(named.len())]
                    }
                } else {
                    toks[rng.below(toks.len())]
                };
                let Some(bytes) = print.get(tok.at..tok.at + tok.len) else {
                    continue;
                };
                let old = value(bytes);
                let v = interesting(old, rng);
                did.push(format!("{}={v}", tok.name));
                print = set(&print, tok, v);
            }
            6 if print.len() > 46 => {
                let at = 14 + rng.below(print.len() - 46);
                print[at] ^= 1 << rng.below(8);
                did.push(format!("flip@{at}"));
                sign(&mut print);
            }
            7 if toks.len() > 2 => {
                // A run of fields removed or repeated.
                let a = rng.below(toks.len());
                let b = (a + 1 + rng.below(8)).min(toks.len() - 1);
                let (from, to) = (
                    toks[a].at.min(toks[b].at).min(print.len()),
                    toks[a].at.max(toks[b].at).min(print.len()),
                );
                if rng.below(2) == 0 {
                    print.drain(from..to);
                    did.push(format!("cut {}..{}", toks[a].name, toks[b].name));
                } else {
                    let run = print[from..to].to_vec();
                    print.splice(from..from, run);
                    did.push(format!("repeat {}..{}", toks[a].name, toks[b].name));
                }
                sign(&mut print);
            }
            8 if !media.is_empty() => {
                if rng.below(2) == 0 {
                    let keep = rng.below(media.len());
                    media.truncate(keep);
                    did.push(format!("media cut to {keep}"));
                } else {
                    let at = rng.below(media.len());
                    media[at] = rng.next() as u8;
                    did.push(format!("media byte {at}"));
                }
            }
            _ => {
                // Past the magic, version and parameters' version (refused at once if changed).
                let at = 14 + rng.below(print.len().saturating_sub(14).max(1));
                if at < print.len() {
                    print[at] = rng.next() as u8;
                }
                did.push(format!("byte@{at}"));
                if rng.below(20) != 0 {
                    sign(&mut print);
                }
            }
        }
    }
    (print_target::join(&print, &media), did)
}

fn load(dir: &Path) -> Res<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|x| x == EXT) {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.push((name, read(&path)?));
        }
    }
    out.sort();
    Ok(out)
}

fn run(corpus: &Path, out: &Path, seconds: u64, seed: u64) -> Res<ExitCode> {
    quiet_for_caught_decoder_panics();
    let clip = corpus.join("clip.wav");
    let mut pool = load(corpus)?;
    if pool.is_empty() {
        return Err(format!("no prints in {}", corpus.display()));
    }
    for dir in ["kept", "crashes"] {
        std::fs::create_dir_all(out.join(dir)).map_err(|e| e.to_string())?;
    }
    let mut classes: BTreeMap<String, String> = BTreeMap::new();
    for (name, bytes) in &pool {
        let class = guarded(bytes, &clip).unwrap_or_else(|p| format!("panic: {p}"));
        println!("{name}: {class}");
        classes.entry(class).or_insert(name.clone());
    }
    let started = Arc::new(AtomicU64::new(0));
    let current = out.join(format!("current.{EXT}"));
    let t0 = Instant::now();
    watchdog(Arc::clone(&started), current.clone(), out.to_owned(), t0);
    let mut rng = Rng::new(seed);
    let (mut execs, mut crashes, mut read_ok) = (0u64, 0u64, 0u64);
    let mut slowest = (Duration::ZERO, String::new());
    while t0.elapsed() < Duration::from_secs(seconds) {
        let (name, bytes) = &pool[rng.below(pool.len())];
        let name = name.clone();
        let (data, did) = mutate_input(bytes, &mut rng);
        // One input at a time: after an abort, it is the input that caused it.
        std::fs::write(&current, &data).map_err(|e| e.to_string())?;
        let begun = t0.elapsed();
        started.store(begun.as_millis() as u64 + 1, Ordering::SeqCst);
        let outcome = guarded(&data, &clip);
        started.store(0, Ordering::SeqCst);
        let took = t0.elapsed() - begun;
        execs += 1;
        if took > slowest.0 {
            slowest = (took, format!("{name} {did:?}"));
        }
        let class = match outcome {
            Ok(class) => class,
            Err(panic) => {
                crashes += 1;
                let saved = out.join("crashes").join(format!("crash-{execs}.{EXT}"));
                std::fs::write(&saved, &data).map_err(|e| e.to_string())?;
                eprintln!("CRASH {}: {panic} (from {name}, {did:?})", saved.display());
                format!("panic: {panic}")
            }
        };
        if !class.starts_with("refused") {
            read_ok += 1;
        }
        if !classes.contains_key(&class) {
            let kept = format!("found-{:03}.{EXT}", classes.len());
            std::fs::write(out.join("kept").join(&kept), &data).map_err(|e| e.to_string())?;
            println!("new outcome [{kept}] from {name} {did:?}: {class}");
            classes.insert(class, kept.clone());
            pool.push((kept, data));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "execs {execs} ({:.0}/s), read and passed or failed {read_ok}, outcomes {}, crashes \
         {crashes}, slowest {:.2} s ({}), peak memory {}",
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
fn guarded(input: &[u8], clip: &Path) -> Result<String, String> {
    std::panic::catch_unwind(|| print_target::pass(input, clip)).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

/// A panic hook quiet for the panics the analyser catches (inside its decoding library).
fn quiet_for_caught_decoder_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !analysis::catching_decoder_panic() {
            default(info);
        }
    }));
}

/// Saves the input and ends the process if one input runs longer than `HANG_SECONDS`.
fn watchdog(started: Arc<AtomicU64>, current: PathBuf, out: PathBuf, t0: Instant) {
    let current = Mutex::new(current);
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let at = started.load(Ordering::SeqCst);
        if at > 0 && (t0.elapsed().as_millis() as u64).saturating_sub(at) > HANG_SECONDS * 1000 {
            let path = current.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let saved = out.join("crashes").join(format!("hang-{}.{EXT}", at));
            let _ = std::fs::copy(&path, &saved);
            eprintln!("HANG: {} kept as {}", path.display(), saved.display());
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
