//! The reference analyser's benchmark on the evaluation corpus
//! (`scripts/make-analysis-corpus.sh`; its truth file was written by the generator):
//! recall, false matches and offset error per distortion class, speed (× real time per
//! core, decoding included), time per extra clip and peak memory — side by side, in the same
//! run, with a brute-force baseline doing what the original analyser did (time-domain
//! cosine similarity at every sample offset at 22,050 Hz), on a subset, and with the peers
//! a user would pick instead (audio-offset-finder, audalign), on a smaller subset. On the
//! clips placed under speech and music beds, all four (ours, the baseline, the peers) also
//! search the same windows of the MP3 episodes, 5 s either side of each placement and near
//! miss (each placement's window searched for an absent clip of the same kind too);
//! `--overlay-only` runs only those episodes and windows (`--no-baseline`, `--no-peers` still
//! leave systems out).
//!
//! ```text
//! cargo bench -p analysis --bench accuracy -- [--corpus DIR] [--no-baseline] [--no-peers]
//!     [--peers-venv DIR] [--overlay-only [--findability]]
//! cargo bench -p analysis --bench accuracy -- --probe EPISODE CLIP
//! cargo bench -p analysis --bench accuracy -- --print-size EPISODE...
//! cargo bench -p analysis --bench accuracy -- --formats DIR
//! ```
//!
//! `--formats DIR`: the formats-as-published corpus (`scripts/make-formats-corpus.sh`): for
//! each file, the clips found, the largest offset error against the truth and against the
//! plain MP3 (ms), and the speed (× real time, decoding included).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use analysis::decode::Decoder;
use analysis::resample::Resampler;
use analysis::{Analyser, ClipInput, ClipOutcome, Params};
use serde_json::Value;

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "shared/tuned.rs"]
mod tuned;
use common::write_wav;
use tuned::tuned;

/// A reported offset within this of a true one is a hit; anything else is a false match.
const HIT_S: f64 = 0.1;
/// The baseline's subset: the first seconds of each of its episodes.
const BASELINE_SECONDS: f64 = 60.0;
const BASELINE_CLASSES: [&str; 4] = [
    "lossless",
    "mp3_64k",
    "noise10db_mp3_64k",
    "speed1pct_mp3_64k",
];
const PEER_CLASSES: [&str; 2] = ["mp3_64k", "noise10db_mp3_64k"];

struct Episode {
    file: String,
    class: String,
    base: u64,
    duration_s: f64,
    /// Clip file → true offsets (s).
    present: BTreeMap<String, Vec<f64>>,
    /// (clip, offset) → kind of insertion.
    kinds: Vec<(String, f64, String)>,
    /// The corpus's clips placed under a background ("speech", "music"), if this is one of
    /// those episodes.
    background: Option<String>,
    /// Every placement under the background, near misses included.
    items: Vec<Item>,
}

/// A clip placed under speech or music, or a near miss of one (the clip itself absent).
struct Item {
    clip: String,
    /// Where the clip starts (s); `None` for a near miss.
    offset_s: Option<f64>,
    /// Where a near miss starts (s).
    at_s: Option<f64>,
    /// The clip's RMS against the background's over its span (dB).
    ratio_db: i64,
}

struct Corpus {
    dir: PathBuf,
    clips: Vec<(String, f64)>,
    /// Clip file → its kind (phrase, jingle, voicemail, sting, sfx, voice_tag).
    clip_kinds: BTreeMap<String, String>,
    episodes: Vec<Episode>,
    long: String,
}

fn load(dir: &Path) -> Corpus {
    let text = std::fs::read_to_string(dir.join("truth.json")).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: make it with scripts/make-analysis-corpus.sh",
            dir.display()
        )
    });
    let t: Value = serde_json::from_str(&text).unwrap();
    let clips = t["clips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["file"].as_str().unwrap().to_owned(),
                c["duration_s"].as_f64().unwrap(),
            )
        })
        .collect();
    let episodes = t["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| Episode {
            file: e["file"].as_str().unwrap().to_owned(),
            class: e["class"].as_str().unwrap().to_owned(),
            base: e["base"].as_u64().unwrap(),
            duration_s: e["duration_s"].as_f64().unwrap(),
            present: e["present"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_f64().unwrap())
                            .collect(),
                    )
                })
                .collect(),
            kinds: e["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|i| {
                    Some((
                        i["clip"].as_str()?.to_owned(),
                        i["offset_s"].as_f64()?,
                        i["kind"].as_str()?.to_owned(),
                    ))
                })
                .collect(),
            background: e["background"].as_str().map(str::to_owned),
            items: e["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| !i["ratio_db"].is_null())
                .map(|i| Item {
                    clip: i["clip"].as_str().unwrap().to_owned(),
                    offset_s: i["offset_s"].as_f64(),
                    at_s: i["at_s"].as_f64(),
                    ratio_db: i["ratio_db"].as_i64().unwrap(),
                })
                .collect(),
        })
        .collect();
    let clip_kinds = t["clips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["file"].as_str().unwrap().to_owned(),
                c["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    Corpus {
        dir: dir.to_owned(),
        clips,
        clip_kinds,
        episodes,
        long: t["long"].as_str().unwrap_or("long-2h.mp3").to_owned(),
    }
}

/// What one system reported for one episode: clip → offsets (s), and the time taken.
struct Answer {
    episode: usize,
    found: BTreeMap<String, Vec<f64>>,
    /// Truth restricted to the span analysed (the baseline's subset), if not the whole.
    span_s: Option<f64>,
    seconds: f64,
    audio_s: f64,
}

#[derive(Default)]
struct Tally {
    positives: usize,
    hits: usize,
    positives_5s: usize,
    hits_5s: usize,
    errors_ms: Vec<f64>,
    false_matches: usize,
    absent_pairs: usize,
    false_absent_pairs: usize,
    seconds: f64,
    audio_s: f64,
}

fn score(
    corpus: &Corpus,
    answers: &[Answer],
    by: &dyn Fn(&Episode, &str, f64) -> String,
) -> BTreeMap<String, Tally> {
    let mut out: BTreeMap<String, Tally> = BTreeMap::new();
    let duration: BTreeMap<&str, f64> =
        corpus.clips.iter().map(|(f, d)| (f.as_str(), *d)).collect();
    for a in answers {
        let ep = &corpus.episodes[a.episode];
        let t = out.entry(by(ep, "", 0.0)).or_default();
        t.seconds += a.seconds;
        t.audio_s += a.audio_s;
        for (clip, reported) in &a.found {
            let truth: Vec<f64> = ep
                .present
                .get(clip)
                .map(|v| {
                    v.iter()
                        .copied()
                        .filter(|&o| a.span_s.is_none_or(|s| o + duration[clip.as_str()] <= s))
                        .collect()
                })
                .unwrap_or_default();
            let mut used = vec![false; reported.len()];
            for &o in &truth {
                let kind = ep
                    .kinds
                    .iter()
                    .find(|k| k.0 == *clip && (k.1 - o).abs() < 1e-3)
                    .map_or("plain", |k| k.2.as_str());
                let t = out
                    .entry(by(ep, kind, duration[clip.as_str()]))
                    .or_default();
                t.positives += 1;
                let long = duration[clip.as_str()] >= 5.0;
                t.positives_5s += usize::from(long);
                let best = reported
                    .iter()
                    .enumerate()
                    .filter(|(i, r)| !used[*i] && (*r - o).abs() <= HIT_S)
                    .min_by(|x, y| (x.1 - o).abs().total_cmp(&(y.1 - o).abs()));
                if let Some((i, r)) = best {
                    if (r - o).abs() > 0.010 && show_misses() {
                        eprintln!(
                            "OFF {:.1} ms: {} {clip} at {o:.3} s ({kind}), answered {r:.4}",
                            (r - o) * 1e3,
                            ep.file
                        );
                    }
                    used[i] = true;
                    t.hits += 1;
                    t.hits_5s += usize::from(long);
                    t.errors_ms.push((r - o).abs() * 1e3);
                }
            }
            let t = out.entry(by(ep, "", 0.0)).or_default();
            t.false_matches += used.iter().filter(|u| !**u).count();
            if show_misses() {
                for (r, _) in reported.iter().zip(&used).filter(|x| !*x.1) {
                    eprintln!("FALSE {} {clip} at {r:.4} s", ep.file);
                }
            }
            if truth.is_empty() && !ep.present.contains_key(clip) {
                t.absent_pairs += 1;
                t.false_absent_pairs += usize::from(!reported.is_empty());
            }
        }
    }
    out
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn table(title: &str, rows: &BTreeMap<String, Tally>, speed: bool) {
    println!("\n{title}\n");
    println!(
        "| class | recall | recall, clips ≥ 5 s | false matches | absent pairs matched | offset error median / p95 / max (ms) |{}",
        if speed { " × real time |" } else { "" }
    );
    println!(
        "|---|---|---|---|---|---|{}",
        if speed { "---|" } else { "" }
    );
    let mut all = Tally::default();
    for (class, t) in rows {
        let mut e = t.errors_ms.clone();
        println!(
            "| {class} | {}/{} = {:.3} | {}/{} = {:.3} | {} | {}/{} | {:.2} / {:.2} / {:.2} |{}",
            t.hits,
            t.positives,
            t.hits as f64 / t.positives.max(1) as f64,
            t.hits_5s,
            t.positives_5s,
            t.hits_5s as f64 / t.positives_5s.max(1) as f64,
            t.false_matches,
            t.false_absent_pairs,
            t.absent_pairs,
            pct(&mut e, 0.5),
            pct(&mut e, 0.95),
            pct(&mut e, 1.0),
            if speed {
                format!(" {:.0} |", t.audio_s / t.seconds.max(1e-9))
            } else {
                String::new()
            }
        );
        all.positives += t.positives;
        all.hits += t.hits;
        all.positives_5s += t.positives_5s;
        all.hits_5s += t.hits_5s;
        all.errors_ms.extend(&t.errors_ms);
        all.false_matches += t.false_matches;
        all.absent_pairs += t.absent_pairs;
        all.false_absent_pairs += t.false_absent_pairs;
        all.seconds += t.seconds;
        all.audio_s += t.audio_s;
    }
    let mut e = all.errors_ms.clone();
    println!(
        "| **all** | {}/{} = {:.3} | {}/{} = {:.3} | {} | {}/{} | {:.2} / {:.2} / {:.2} |{}",
        all.hits,
        all.positives,
        all.hits as f64 / all.positives.max(1) as f64,
        all.hits_5s,
        all.positives_5s,
        all.hits_5s as f64 / all.positives_5s.max(1) as f64,
        all.false_matches,
        all.false_absent_pairs,
        all.absent_pairs,
        pct(&mut e, 0.5),
        pct(&mut e, 0.95),
        pct(&mut e, 1.0),
        if speed {
            format!(" {:.0} |", all.audio_s / all.seconds.max(1e-9))
        } else {
            String::new()
        }
    );
}

fn ours(corpus: &Corpus, analyser: &Analyser, episodes: &[usize], clips: &[String]) -> Vec<Answer> {
    let inputs: Vec<ClipInput> = clips
        .iter()
        .map(|c| ClipInput::new(corpus.dir.join(c)))
        .collect();
    episodes
        .iter()
        .map(|&e| {
            let ep = &corpus.episodes[e];
            if std::env::var_os("RUST_LOG").is_some() {
                // The analyser's log (below) names clips by their index among `clips`.
                eprintln!("EPISODE {}", ep.file);
            }
            let start = Instant::now();
            let report = analyser
                .analyse(&corpus.dir.join(&ep.file), &inputs)
                .unwrap();
            let seconds = start.elapsed().as_secs_f64();
            let found = clips
                .iter()
                .zip(&report.clips)
                .map(|(c, o)| match o {
                    ClipOutcome::Found(r) => (
                        c.clone(),
                        r.matches.iter().map(|m| m.offset_ns as f64 / 1e9).collect(),
                    ),
                    ClipOutcome::Failed(e) => panic!("{c}: {e}"),
                })
                .collect();
            eprintln!("ours: {} in {seconds:.2} s", ep.file);
            Answer {
                episode: e,
                found,
                span_s: None,
                seconds,
                audio_s: ep.duration_s,
            }
        })
        .collect()
}

/// Decodes up to `limit_s` seconds, mono, resampled to `rate`.
fn decode(path: &Path, rate: u32, limit_s: f64) -> Vec<f32> {
    let mut d = Decoder::open(path).unwrap();
    let mut out = Vec::new();
    let mut r: Option<Resampler> = None;
    while d.advance().unwrap() {
        let rs = r.get_or_insert_with(|| Resampler::new(d.sample_rate(), rate, &Params::default()));
        rs.process(d.chunk(), &mut out);
        if out.len() as f64 >= limit_s * f64::from(rate) {
            break;
        }
    }
    if let Some(mut rs) = r {
        rs.finish(&mut out);
    }
    out.truncate((limit_s * f64::from(rate)) as usize);
    out
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + ra.iter().zip(rb).map(|(x, y)| x * y).sum::<f32>()
}

/// The original analyser: at 22,050 Hz, the cosine similarity of the clip's first 0.1 s
/// with the episode at every sample offset (pass 1, threshold 0.6); where it passes, the
/// whole clip's cosine similarity, walked to its local peak sample by sample (pass 2,
/// threshold 0.5); peaks closer than the clip's length merged.
fn brute_force(episode: &[f32], clip: &[f32], rate: u32) -> Vec<f64> {
    let probe = clip.len().min(rate as usize / 10);
    if probe == 0 || episode.len() < probe {
        return Vec::new();
    }
    let p = &clip[..probe];
    let pn = dot(p, p).sqrt();
    let cos_full = |o: usize| {
        let m = clip.len().min(episode.len() - o);
        let e = &episode[o..o + m];
        let c = &clip[..m];
        dot(c, e) / (dot(c, c).sqrt() * dot(e, e).sqrt() + 1e-12)
    };
    let mut energy: f64 = episode[..probe].iter().map(|&x| f64::from(x * x)).sum();
    let mut found: Vec<(usize, f32)> = Vec::new();
    let mut o = 0;
    while o + probe <= episode.len() {
        if o > 0 {
            energy += f64::from(episode[o + probe - 1].powi(2)) - f64::from(episode[o - 1].powi(2));
        }
        let c = dot(p, &episode[o..o + probe]) / (pn * energy.max(0.0).sqrt() as f32 + 1e-12);
        if c >= 0.6 {
            // The local-peak walk on the whole clip's similarity.
            let mut at = o;
            let mut best = cos_full(at);
            loop {
                let next = [at.saturating_sub(1), at + 1]
                    .into_iter()
                    .filter(|&k| k + probe <= episode.len())
                    .map(|k| (k, cos_full(k)))
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                match next {
                    Some((k, v)) if v > best => {
                        at = k;
                        best = v;
                    }
                    _ => break,
                }
            }
            if best >= 0.5 {
                match found.last_mut() {
                    Some(last) if at - last.0.min(at) < clip.len() => {
                        if best > last.1 {
                            *last = (at, best);
                        }
                    }
                    _ => found.push((at, best)),
                }
            }
            // The walk has settled this neighbourhood: go on 10 ms past where it ended.
            o = o.max(at) + rate as usize / 100;
        }
        o += 1;
    }
    found.iter().map(|f| f.0 as f64 / f64::from(rate)).collect()
}

fn baseline(corpus: &Corpus, episodes: &[usize]) -> Vec<Answer> {
    const RATE: u32 = 22_050;
    episodes
        .iter()
        .map(|&e| {
            let ep = &corpus.episodes[e];
            let start = Instant::now();
            let samples = decode(&corpus.dir.join(&ep.file), RATE, BASELINE_SECONDS);
            let clips = subset_clips(corpus, ep, BASELINE_SECONDS);
            let mut found = BTreeMap::new();
            for c in &clips {
                let clip = decode(&corpus.dir.join(c), RATE, 600.0);
                found.insert(c.clone(), brute_force(&samples, &clip, RATE));
            }
            let seconds = start.elapsed().as_secs_f64();
            eprintln!(
                "baseline: {} ({} clips) in {seconds:.1} s",
                ep.file,
                clips.len()
            );
            Answer {
                episode: e,
                found,
                span_s: Some(BASELINE_SECONDS),
                seconds,
                audio_s: BASELINE_SECONDS * clips.len() as f64,
            }
        })
        .collect()
}

/// The clips wholly inside the first `span_s` seconds, and four absent ones.
fn subset_clips(corpus: &Corpus, ep: &Episode, span_s: f64) -> Vec<String> {
    let duration: BTreeMap<&str, f64> =
        corpus.clips.iter().map(|(f, d)| (f.as_str(), *d)).collect();
    let mut clips: Vec<String> = ep
        .present
        .iter()
        .filter(|(c, offs)| offs.iter().any(|o| o + duration[c.as_str()] <= span_s))
        .map(|(c, _)| c.clone())
        .collect();
    clips.extend(
        corpus
            .clips
            .iter()
            .map(|c| c.0.clone())
            .filter(|c| !ep.present.contains_key(c))
            .take(4),
    );
    clips
}

fn peers(corpus: &Corpus, venv: &Path, tool: &str, episodes: &[usize]) -> Vec<Answer> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/analysis/peers.py");
    episodes
        .iter()
        .filter_map(|&e| {
            let ep = &corpus.episodes[e];
            let mut clips: Vec<String> = ep.present.keys().cloned().collect();
            clips.extend(
                corpus
                    .clips
                    .iter()
                    .map(|c| c.0.clone())
                    .filter(|c| !ep.present.contains_key(c))
                    .take(8),
            );
            let out = Command::new(venv.join("bin/python"))
                .arg(&script)
                .arg(tool)
                .arg(&ep.file)
                .args(&clips)
                .current_dir(&corpus.dir)
                .output()
                .ok()?;
            if !out.status.success() {
                eprintln!(
                    "{tool}: {} failed: {}",
                    ep.file,
                    String::from_utf8_lossy(&out.stderr)
                );
                return None;
            }
            let mut found = BTreeMap::new();
            let mut seconds = 0.0;
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                // audalign prints its progress on standard output too: not JSON, skipped.
                let Ok(v) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                if let Some(s) = v["seconds"].as_f64() {
                    seconds = s;
                } else {
                    let offsets = v["offsets_s"].as_array()?.iter().filter_map(Value::as_f64);
                    let scores = v["scores"].as_array()?.iter().filter_map(Value::as_f64);
                    // audalign reports every chance alignment with its confidence; a user
                    // keeps the confident ones (20: above the chance levels seen here).
                    let keep: Vec<f64> = offsets
                        .zip(scores)
                        .filter(|(_, s)| tool != "audalign" || *s >= 20.0)
                        .map(|(o, _)| o)
                        .collect();
                    found.insert(v["clip"].as_str()?.to_owned(), keep);
                }
            }
            eprintln!(
                "{tool}: {} ({} clips) in {seconds:.1} s",
                ep.file,
                clips.len()
            );
            Some(Answer {
                episode: e,
                found,
                span_s: None,
                seconds,
                audio_s: ep.duration_s,
            })
        })
        .collect()
}

/// One system's answer for one (episode, clip) pair: the offsets it reported (s). A system
/// given only a stretch of the episode (an overlay [`Window`]) answers for `window` (s), around
/// the placement `target` (none for a near-miss or absent pair).
struct PairAnswer {
    episode: usize,
    clip: String,
    window: Option<(f64, f64)>,
    target: Option<f64>,
    offsets: Vec<f64>,
}

/// One system's answers on the episodes under speech or music, and the time it took for how
/// much audio (a window or episode counted once per clip searched in it).
struct System {
    name: String,
    answers: Vec<PairAnswer>,
    seconds: f64,
    audio_s: f64,
}

#[derive(Default, Clone)]
struct OTally {
    /// Placements of clips of 2 s or more, and those found.
    pos_long: usize,
    hits_long: usize,
    /// Placements of clips of 1–2 s, and those found.
    pos_short: usize,
    hits_short: usize,
    errors_ms: Vec<f64>,
    false_matches: usize,
    near_pairs: usize,
    near_matched: usize,
    absent_pairs: usize,
    absent_matched: usize,
}

impl OTally {
    fn add(&mut self, o: &OTally) {
        self.pos_long += o.pos_long;
        self.hits_long += o.hits_long;
        self.pos_short += o.pos_short;
        self.hits_short += o.hits_short;
        self.errors_ms.extend(&o.errors_ms);
        self.false_matches += o.false_matches;
        self.near_pairs += o.near_pairs;
        self.near_matched += o.near_matched;
        self.absent_pairs += o.absent_pairs;
        self.absent_matched += o.absent_matched;
    }
}

fn frac(hits: usize, pos: usize) -> String {
    if pos == 0 {
        "–".into()
    } else {
        format!("{hits}/{pos} = {:.3}", hits as f64 / pos as f64)
    }
}

/// Scores answers on the episodes with clips under speech or music: per `key(episode, item)`
/// the placements found; false matches, near-miss and absent pairs in the total.
fn overlay_score(
    corpus: &Corpus,
    answers: &[PairAnswer],
    key: &dyn Fn(&Episode, &Item) -> String,
) -> (BTreeMap<String, OTally>, OTally) {
    let duration: BTreeMap<&str, f64> =
        corpus.clips.iter().map(|(f, d)| (f.as_str(), *d)).collect();
    let mut rows: BTreeMap<String, OTally> = BTreeMap::new();
    let mut total = OTally::default();
    for a in answers {
        let ep = &corpus.episodes[a.episode];
        if ep.background.is_none() {
            continue;
        }
        let d = duration[a.clip.as_str()];
        let inside = |o: f64| {
            a.window
                .is_none_or(|(lo, hi)| o >= lo - 1e-6 && o + d <= hi + 1e-6)
        };
        // Every placement of the clip the searched span holds any of: one cut off by a
        // window's edge is still there, and an answer at it is not a false match (it counts
        // for recall only as its window's target).
        let overlaps = |o: f64| a.window.is_none_or(|(lo, hi)| o < hi && o + d > lo);
        let truths: Vec<&Item> = ep
            .items
            .iter()
            .filter(|i| i.clip == a.clip && i.offset_s.is_some_and(overlaps))
            .collect();
        let mut used = vec![false; a.offsets.len()];
        for t in &truths {
            let o = t.offset_s.unwrap_or_default();
            let counted = a.target.is_none_or(|x| (x - o).abs() < 1e-6);
            let best = a
                .offsets
                .iter()
                .enumerate()
                .filter(|(i, r)| !used[*i] && (*r - o).abs() <= HIT_S)
                .min_by(|x, y| (x.1 - o).abs().total_cmp(&(y.1 - o).abs()));
            if let Some((i, _)) = best {
                used[i] = true;
            }
            if !counted {
                continue;
            }
            let row = rows.entry(key(ep, t)).or_default();
            let long = d >= 2.0;
            if long {
                row.pos_long += 1;
            } else {
                row.pos_short += 1;
            }
            if let Some((_, r)) = best {
                if long {
                    row.hits_long += 1;
                } else {
                    row.hits_short += 1;
                }
                row.errors_ms.push((r - o).abs() * 1e3);
                if (r - o).abs() > 0.010 && show_misses() {
                    eprintln!(
                        "OFF {:.1} ms: {} {} at {o:.3} s ({:+} dB), answered {r:.4}",
                        (r - o) * 1e3,
                        ep.file,
                        a.clip,
                        t.ratio_db
                    );
                }
            } else if show_misses() {
                eprintln!(
                    "MISS {} {} at {o:.3} s ({:+} dB), answered {:?}",
                    ep.file, a.clip, t.ratio_db, a.offsets
                );
            }
        }
        total.false_matches += used.iter().filter(|u| !**u).count();
        if show_misses() {
            for (r, _) in a.offsets.iter().zip(&used).filter(|x| !*x.1) {
                eprintln!("FALSE {} {} at {r:.4} s", ep.file, a.clip);
            }
        }
        if !ep.present.contains_key(&a.clip) {
            let matched = usize::from(!a.offsets.is_empty());
            total.absent_pairs += 1;
            total.absent_matched += matched;
            if ep
                .items
                .iter()
                .any(|i| i.clip == a.clip && i.at_s.is_some_and(inside))
            {
                total.near_pairs += 1;
                total.near_matched += matched;
            }
        }
    }
    for r in rows.values() {
        let mut r = r.clone();
        r.false_matches = 0;
        total.add(&r);
    }
    (rows, total)
}

/// `ACCURACY_MISSES=1`: every placement missed, every match more than 10 ms off and every
/// false match of the overlay classes on stderr.
fn show_misses() -> bool {
    std::env::var_os("ACCURACY_MISSES").is_some()
}

fn errors(e: &[f64]) -> String {
    let mut e = e.to_vec();
    format!(
        "{:.2} / {:.2} / {:.2} | {}",
        pct(&mut e, 0.5),
        pct(&mut e, 0.95),
        pct(&mut e, 1.0),
        e.iter().filter(|&&x| x > 10.0).count()
    )
}

const RATIOS: [i64; 4] = [6, 0, -6, -12];
const OVERLAY_KINDS: [&str; 4] = ["jingle", "sting", "sfx", "voice_tag"];

/// Prints one recall table: a row per key in `keys` (as `key` names the placements, `rows`
/// says what they are), two columns (clips ≥ 2 s, 1–2 s) per system.
fn recall_table(
    corpus: &Corpus,
    heading: &str,
    rows_are: &str,
    systems: &[System],
    keys: &[String],
    key: &dyn Fn(&Episode, &Item) -> String,
) {
    let rows: Vec<BTreeMap<String, OTally>> = systems
        .iter()
        .map(|s| overlay_score(corpus, &s.answers, key).0)
        .collect();
    println!("\n{heading}\n");
    print!("| {rows_are} |");
    for s in systems {
        print!(" {}: ≥ 2 s | 1–2 s |", s.name);
    }
    println!();
    println!("|---|{}", "---|---|".repeat(systems.len()));
    for k in keys {
        print!("| {k} |");
        for r in &rows {
            let t = r.get(k).cloned().unwrap_or_default();
            print!(
                " {} | {} |",
                frac(t.hits_long, t.pos_long),
                frac(t.hits_short, t.pos_short)
            );
        }
        println!();
    }
}

/// The tables comparing `systems` on the clips under speech and music: recall by background
/// and ratio, by clip kind, by clip kind and ratio (clips ≥ 2 s and 1–2 s apart), then false
/// matches, offset errors and speed.
fn overlay_tables(corpus: &Corpus, title: &str, systems: &[System]) {
    let ratio = |r: i64| format!("{r:+} dB");
    let by_ratio: Vec<String> = ["speech", "music"]
        .iter()
        .flat_map(|bg| RATIOS.map(|r| format!("{bg} {}", ratio(r))))
        .collect();
    recall_table(
        corpus,
        &format!("### Clips under speech and music, {title}: recall by clip-to-background ratio"),
        "background, ratio",
        systems,
        &by_ratio,
        &|e, i| {
            format!(
                "{} {}",
                e.background.as_deref().unwrap_or("?"),
                ratio(i.ratio_db)
            )
        },
    );
    let kind = |i: &Item| corpus.clip_kinds[&i.clip].clone();
    let kinds: Vec<String> = OVERLAY_KINDS.map(str::to_owned).to_vec();
    recall_table(
        corpus,
        &format!("### Clips under speech and music, {title}: recall by clip kind"),
        "clip kind",
        systems,
        &kinds,
        &|_, i| kind(i),
    );
    let by_kind_ratio: Vec<String> = OVERLAY_KINDS
        .iter()
        .flat_map(|k| RATIOS.map(|r| format!("{k} {}", ratio(r))))
        .collect();
    recall_table(
        corpus,
        &format!(
            "### Clips under speech and music, {title}: recall by clip kind and ratio (both backgrounds)"
        ),
        "clip kind, ratio",
        systems,
        &by_kind_ratio,
        &|_, i| format!("{} {}", kind(i), ratio(i.ratio_db)),
    );
    println!("\n### Clips under speech and music, {title}: false matches and offset errors\n");
    println!(
        "| system | placements found | false matches | near-miss pairs matched | absent pairs matched | offset error median / p95 / max (ms) | matches > 10 ms off | × real time per clip |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for s in systems {
        let (_, t) = overlay_score(corpus, &s.answers, &|_, _| String::new());
        println!(
            "| {} | {} | {} | {}/{} | {}/{} | {} | {} |",
            s.name,
            frac(t.hits_long + t.hits_short, t.pos_long + t.pos_short),
            t.false_matches,
            t.near_matched,
            t.near_pairs,
            t.absent_matched,
            t.absent_pairs,
            errors(&t.errors_ms),
            if s.seconds > 0.0 {
                format!("{:.0}", s.audio_s / s.seconds)
            } else {
                "–".into()
            }
        );
    }
}

fn overlay_detail(corpus: &Corpus, name: &str, answers: &[PairAnswer]) {
    let (rows, _) = overlay_score(corpus, answers, &|e, i| {
        format!(
            "{} {:+} dB {}",
            e.background.as_deref().unwrap_or("?"),
            i.ratio_db,
            corpus.clip_kinds[&i.clip]
        )
    });
    println!("\n### {name}: clips under speech and music by ratio and clip kind\n");
    println!(
        "| background, ratio, clip kind | recall, clips ≥ 2 s | recall, 1–2 s | offset error median / p95 / max (ms) | matches > 10 ms off |"
    );
    println!("|---|---|---|---|---|");
    let order = |k: &String| {
        let bg = usize::from(!k.starts_with("speech"));
        let r = [" +6 dB", " +0 dB", " -6 dB", " -12 dB"]
            .iter()
            .position(|r| k.contains(r))
            .unwrap_or(9);
        (bg, r, k.clone())
    };
    let mut keys: Vec<&String> = rows.keys().collect();
    keys.sort_by_key(|k| order(k));
    for k in keys {
        let t = &rows[k];
        println!(
            "| {k} | {} | {} | {} |",
            frac(t.hits_long, t.pos_long),
            frac(t.hits_short, t.pos_short),
            errors(&t.errors_ms)
        );
    }
}

/// Each clip placed under speech and music: its findability predicted from the clip alone
/// (`analysis::findability`) beside its recall at each ratio on the whole episodes (both
/// codecs, both backgrounds), and whether the prediction was right: found (recall at least
/// one half) at the ratios at or above the level predicted, missed (below one half) under it.
/// Then, per clip kind, how often it was right, and what a prediction costs beside
/// fingerprinting the clip.
fn findability_report(corpus: &Corpus, params: &Params, answers: &[PairAnswer]) {
    use analysis::findability::{self, signed_db};
    let (rows, _) = overlay_score(corpus, answers, &|_, i| {
        format!("{}|{}", i.clip, i.ratio_db)
    });
    let mut clips: Vec<&String> = corpus
        .clip_kinds
        .iter()
        .filter(|(_, k)| OVERLAY_KINDS.contains(&k.as_str()))
        .map(|(c, _)| c)
        .collect();
    clips.sort_by_key(|c| {
        (
            OVERLAY_KINDS
                .iter()
                .position(|k| **k == corpus.clip_kinds[*c]),
            *c,
        )
    });
    let duration: BTreeMap<&str, f64> =
        corpus.clips.iter().map(|(f, d)| (f.as_str(), *d)).collect();
    println!(
        "\n### Findability: predicted from the clip alone, beside recall on the whole episodes (MP3 64k and AAC 96k, speech and music)\n"
    );
    println!("| clip | kind | s | landmarks/s | steadiness | in band | predicted findable from | +6 dB | 0 dB | −6 dB | −12 dB | right |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    // Per kind: (cells right, cells), (clips right at every ratio, clips).
    let mut per_kind: BTreeMap<&str, (usize, usize, usize, usize)> = BTreeMap::new();
    let (mut predict_s, mut print_s) = (Vec::new(), Vec::new());
    for clip in clips {
        if !RATIOS
            .iter()
            .any(|r| rows.contains_key(&format!("{clip}|{r}")))
        {
            // Not placed under speech or music (a jingle of the older classes).
            continue;
        }
        let path = corpus.dir.join(clip);
        let t = Instant::now();
        let _ = analysis::ClipPrint::from_file(&path, params).unwrap();
        print_s.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let f = findability::of_file(&path, params).unwrap();
        predict_s.push(t.elapsed().as_secs_f64());
        let kind = corpus.clip_kinds[clip].as_str();
        let entry = per_kind.entry(kind).or_default();
        let mut cells = String::new();
        let mut all_right = true;
        let mut right = 0;
        let mut counted = 0;
        for r in RATIOS {
            let t = rows
                .get(&format!("{clip}|{r}"))
                .cloned()
                .unwrap_or_default();
            let (hits, pos) = (t.hits_long + t.hits_short, t.pos_long + t.pos_short);
            if pos == 0 {
                cells.push_str(" – |");
                continue;
            }
            let found = 2 * hits >= pos;
            let predicted = f.from_db.is_some_and(|db| r >= i64::from(db));
            let ok = found == predicted;
            counted += 1;
            right += usize::from(ok);
            all_right &= ok;
            cells.push_str(&format!(" {hits}/{pos}{} |", if ok { "" } else { " ✗" }));
        }
        entry.0 += right;
        entry.1 += counted;
        entry.2 += usize::from(all_right);
        entry.3 += 1;
        let from = f
            .from_db
            .map_or_else(|| "not at +12 dB".to_owned(), signed_db);
        println!(
            "| {} | {kind} | {:.1} | {:.0} | {:.2} | {:.2} | {from} |{cells} {right}/{counted} |",
            clip.trim_start_matches("clips/"),
            duration[clip.as_str()],
            f.landmarks_per_s,
            f.steadiness,
            f.in_band,
        );
    }
    println!("\n| clip kind | ratios predicted right | clips predicted right at every ratio |");
    println!("|---|---|---|");
    let mut total = (0, 0, 0, 0);
    for k in OVERLAY_KINDS {
        let (a, b, c, d) = per_kind.get(k).copied().unwrap_or_default();
        total = (total.0 + a, total.1 + b, total.2 + c, total.3 + d);
        println!("| {k} | {} | {} |", frac(a, b), frac(c, d));
    }
    println!(
        "| all | {} | {} |",
        frac(total.0, total.1),
        frac(total.2, total.3)
    );
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    let mut ratios: Vec<f64> = predict_s.iter().zip(&print_s).map(|(p, f)| p / f).collect();
    println!(
        "\nA prediction's cost: {:.0} ms a clip on average (max {:.0} ms), {:.1}× fingerprinting the same clip in the same run (median {:.1}×, max {:.1}×).",
        1e3 * sum(&predict_s) / predict_s.len().max(1) as f64,
        1e3 * predict_s.iter().copied().fold(0.0, f64::max),
        sum(&predict_s) / sum(&print_s).max(1e-9),
        pct(&mut ratios, 0.5),
        pct(&mut ratios, 1.0),
    );
}

/// The sample rate of the overlay windows' WAV files, the baseline's rate.
const WINDOW_RATE: u32 = 22_050;
/// How far an overlay window reaches either side of its placement or near miss (s).
const WINDOW_MARGIN_S: f64 = 5.0;

/// A stretch of an MP3 episode under speech or music, `WINDOW_MARGIN_S` either side of a
/// placement or a near miss, written once as a WAV file that every system searches: for the
/// clip placed there (its true offset the target) or near-missed there (no target), and, for
/// a placement, also for a clip of the same kind that the episode neither contains nor
/// near-misses (an absent pair, over the same audio).
struct Window {
    episode: usize,
    /// The span of the episode the file holds (s).
    lo: f64,
    hi: f64,
    wav: PathBuf,
    /// The clips searched in it, each with its true offset if it is placed there.
    pairs: Vec<(String, Option<f64>)>,
}

/// The overlay windows, and the temporary directory holding their files.
struct Windows {
    list: Vec<Window>,
    dir: tempfile::TempDir,
}

impl Windows {
    /// What the systems search: each window's length once per clip searched in it (s).
    fn audio_s(&self) -> f64 {
        self.list
            .iter()
            .map(|w| (w.hi - w.lo) * w.pairs.len() as f64)
            .sum()
    }
}

/// Every placement and near miss of the MP3 episodes under speech or music, as windows.
fn overlay_windows(corpus: &Corpus) -> Windows {
    let duration: BTreeMap<&str, f64> =
        corpus.clips.iter().map(|(f, d)| (f.as_str(), *d)).collect();
    // The clips placed or near-missed under a background, by kind: the absent pairs' pool.
    let mut pool: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for ep in corpus.episodes.iter().filter(|e| e.background.is_some()) {
        for i in &ep.items {
            let v = pool.entry(corpus.clip_kinds[&i.clip].as_str()).or_default();
            if !v.contains(&i.clip.as_str()) {
                v.push(&i.clip);
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut list = Vec::new();
    for (e, ep) in corpus.episodes.iter().enumerate() {
        if ep.background.is_none() || !ep.class.ends_with("mp3_64k") {
            continue;
        }
        let samples = decode(&corpus.dir.join(&ep.file), WINDOW_RATE, 1e9);
        let rate = f64::from(WINDOW_RATE);
        let absent: BTreeMap<&str, Vec<&str>> = pool
            .iter()
            .map(|(k, v)| {
                let v = v
                    .iter()
                    .copied()
                    .filter(|c| ep.items.iter().all(|i| i.clip != *c))
                    .collect();
                (*k, v)
            })
            .collect();
        for (k, i) in ep.items.iter().enumerate() {
            let start = i.offset_s.or(i.at_s).unwrap_or_default();
            let d = duration[i.clip.as_str()];
            let a = (((start - WINDOW_MARGIN_S).max(0.0) * rate) as usize).min(samples.len());
            let b = (((start + d + WINDOW_MARGIN_S) * rate) as usize).min(samples.len());
            let wav = dir.path().join(format!("w{}.wav", list.len()));
            write_wav(&wav, &samples[a..b], WINDOW_RATE);
            let mut pairs = vec![(i.clip.clone(), i.offset_s)];
            let others = &absent[corpus.clip_kinds[&i.clip].as_str()];
            if i.offset_s.is_some() && !others.is_empty() {
                pairs.push((others[k % others.len()].to_owned(), None));
            }
            list.push(Window {
                episode: e,
                lo: a as f64 / rate,
                hi: b as f64 / rate,
                wav,
                pairs,
            });
        }
    }
    eprintln!(
        "{} windows under speech and music, {} pairs",
        list.len(),
        list.iter().map(|w| w.pairs.len()).sum::<usize>()
    );
    Windows { list, dir }
}

/// Ours on the overlay windows' files (the clip cache warm, as in a researcher).
fn overlay_ours(corpus: &Corpus, analyser: &Analyser, windows: &Windows) -> System {
    let mut answers = Vec::new();
    let mut seconds = 0.0;
    for w in &windows.list {
        let inputs: Vec<ClipInput> = w
            .pairs
            .iter()
            .map(|(c, _)| ClipInput::new(corpus.dir.join(c)))
            .collect();
        let start = Instant::now();
        let report = analyser.analyse(&w.wav, &inputs).unwrap();
        seconds += start.elapsed().as_secs_f64();
        for ((clip, target), outcome) in w.pairs.iter().zip(&report.clips) {
            let offsets = match outcome {
                ClipOutcome::Found(r) => r
                    .matches
                    .iter()
                    .map(|m| w.lo + m.offset_ns as f64 / 1e9)
                    .collect(),
                ClipOutcome::Failed(e) => panic!("{clip}: {e}"),
            };
            answers.push(PairAnswer {
                episode: w.episode,
                clip: clip.clone(),
                window: Some((w.lo, w.hi)),
                target: *target,
                offsets,
            });
        }
    }
    eprintln!("ours: {} windows in {seconds:.1} s", windows.list.len());
    System {
        name: "ours".into(),
        answers,
        seconds,
        audio_s: windows.audio_s(),
    }
}

/// The brute-force baseline on the overlay windows' files (each clip decoded once).
fn overlay_baseline(corpus: &Corpus, windows: &Windows) -> System {
    let mut clips: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    let mut answers = Vec::new();
    let mut seconds = 0.0;
    for w in &windows.list {
        let start = Instant::now();
        let samples = decode(&w.wav, WINDOW_RATE, 1e9);
        for (clip, target) in &w.pairs {
            let c = clips
                .entry(clip.clone())
                .or_insert_with(|| decode(&corpus.dir.join(clip), WINDOW_RATE, 600.0));
            let offsets = brute_force(&samples, c, WINDOW_RATE)
                .into_iter()
                .map(|o| o + w.lo)
                .collect();
            answers.push(PairAnswer {
                episode: w.episode,
                clip: clip.clone(),
                window: Some((w.lo, w.hi)),
                target: *target,
                offsets,
            });
        }
        seconds += start.elapsed().as_secs_f64();
    }
    eprintln!("baseline: {} windows in {seconds:.1} s", windows.list.len());
    System {
        name: "brute-force baseline".into(),
        answers,
        seconds,
        audio_s: windows.audio_s(),
    }
}

/// A peer on the overlay windows' files, in one run of `peers.py --pairs`; nothing (said on
/// stderr) if it fails. For audio-offset-finder also its best lag whatever its score (a second
/// system, which answers every pair), to tell its threshold from its method.
fn overlay_peers(corpus: &Corpus, venv: &Path, tool: &str, windows: &Windows) -> Vec<System> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/analysis/peers.py");
    let clip_path = |c: &str| corpus.dir.join(c).display().to_string();
    let mut jobs = String::new();
    // (window file, clip file) as the script names them → (window, pair).
    let mut keys: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    for (k, w) in windows.list.iter().enumerate() {
        let wav = w.wav.display().to_string();
        let clips: Vec<String> = w.pairs.iter().map(|(c, _)| clip_path(c)).collect();
        for (p, c) in clips.iter().enumerate() {
            keys.insert((wav.clone(), c.clone()), (k, p));
        }
        jobs.push_str(&serde_json::json!({"episode": wav, "clips": clips}).to_string());
        jobs.push('\n');
    }
    let list = windows.dir.path().join(format!("pairs-{tool}.jsonl"));
    std::fs::write(&list, jobs).unwrap();
    let out = Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg(tool)
        .arg("--pairs")
        .arg(&list)
        .output()
        .unwrap();
    if !out.status.success() {
        eprintln!(
            "{tool}: windows under speech and music failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return Vec::new();
    }
    let mut answers = Vec::new();
    let mut best = Vec::new();
    let mut seconds = 0.0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // audalign prints its progress on standard output too: not JSON, skipped.
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(s) = v["seconds"].as_f64() {
            seconds = s;
            continue;
        }
        let (Some(ep), Some(clip)) = (v["episode"].as_str(), v["clip"].as_str()) else {
            continue;
        };
        let Some(&(k, p)) = keys.get(&(ep.to_owned(), clip.to_owned())) else {
            continue;
        };
        let w = &windows.list[k];
        let offsets = v["offsets_s"].as_array().cloned().unwrap_or_default();
        let scores = v["scores"].as_array().cloned().unwrap_or_default();
        // audalign reports every chance alignment with its confidence; a user keeps the
        // confident ones (20, as on the whole episodes).
        let offsets = offsets
            .iter()
            .zip(&scores)
            .filter(|(_, s)| tool != "audalign" || s.as_f64().unwrap_or(0.0) >= 20.0)
            .filter_map(|(o, _)| o.as_f64())
            .map(|o| o + w.lo)
            .collect();
        let answer = |offsets| PairAnswer {
            episode: w.episode,
            clip: w.pairs[p].0.clone(),
            window: Some((w.lo, w.hi)),
            target: w.pairs[p].1,
            offsets,
        };
        if let Some(o) = v["best_s"].as_f64() {
            best.push(answer(vec![o + w.lo]));
        }
        answers.push(answer(offsets));
    }
    eprintln!(
        "{tool}: {} of {} pairs answered in {seconds:.1} s",
        answers.len(),
        keys.len()
    );
    let name = if tool == "aof" {
        "audio-offset-finder 0.5.5"
    } else {
        "audalign 1.3.1"
    };
    let system = |name: String, answers| System {
        name,
        answers,
        seconds,
        audio_s: windows.audio_s(),
    };
    let mut out = vec![system(name.into(), answers)];
    if !best.is_empty() {
        out.push(system(format!("{name}, best lag at any score"), best));
    }
    out
}

/// The clips under speech and music: ours on the whole episodes (`answers`, from `ours`), by
/// codec, and by ratio and clip kind; then ours, the baseline and the peers (with `venv`) on
/// the same windows of the MP3 episodes.
fn overlay_report(
    corpus: &Corpus,
    analyser: &Analyser,
    answers: &[Answer],
    baseline: bool,
    venv: Option<&Path>,
) {
    let pairs = |codec: &str| -> Vec<PairAnswer> {
        answers
            .iter()
            .filter(|a| {
                let ep = &corpus.episodes[a.episode];
                ep.background.is_some() && ep.class.ends_with(codec)
            })
            .flat_map(|a| {
                a.found.iter().map(move |(c, o)| PairAnswer {
                    episode: a.episode,
                    clip: c.clone(),
                    window: None,
                    target: None,
                    offsets: o.clone(),
                })
            })
            .collect()
    };
    overlay_detail(corpus, "Ours (MP3 64k and AAC 96k)", &pairs(""));
    findability_report(corpus, analyser.params(), &pairs(""));
    let whole: Vec<System> = [("ours, MP3 64k", "mp3_64k"), ("ours, AAC 96k", "aac_96k")]
        .into_iter()
        .map(|(name, codec)| {
            let timed: Vec<&Answer> = answers
                .iter()
                .filter(|a| corpus.episodes[a.episode].class.ends_with(codec))
                .filter(|a| corpus.episodes[a.episode].background.is_some())
                .collect();
            System {
                name: name.into(),
                answers: pairs(codec),
                seconds: timed.iter().map(|a| a.seconds).sum(),
                audio_s: timed.iter().map(|a| a.audio_s * a.found.len() as f64).sum(),
            }
        })
        .collect();
    overlay_tables(corpus, "whole episodes", &whole);

    let windows = overlay_windows(corpus);
    let windows = &windows;
    // The peers take the longest: each runs in a process of its own while ours and the
    // baseline run here (their × real time is therefore taken beside them).
    let systems = std::thread::scope(|s| {
        let peers: Vec<_> = venv
            .into_iter()
            .flat_map(|v| ["aof", "audalign"].map(|t| (v, t)))
            .map(|(v, tool)| s.spawn(move || overlay_peers(corpus, v, tool, windows)))
            .collect();
        let mut systems = vec![overlay_ours(corpus, analyser, windows)];
        if baseline {
            systems.push(overlay_baseline(corpus, windows));
        }
        systems.extend(peers.into_iter().flat_map(|p| p.join().unwrap()));
        systems
    });
    overlay_tables(corpus, "MP3 64k, ±5 s windows", &systems);
}

fn child(args: &[String]) {
    let analyser = Analyser::new(tuned());
    let clips: Vec<ClipInput> = args[1..].iter().map(ClipInput::new).collect();
    let start = Instant::now();
    let report = analyser.analyse(Path::new(&args[0]), &clips).unwrap();
    println!(
        "{} {}",
        start.elapsed().as_secs_f64(),
        report.duration_ns as f64 / 1e9
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    // --print-size EPISODE...: each episode's print (no clips), its peaks and bytes an hour.
    if args.first().map(String::as_str) == Some("--print-size") {
        let analyser = Analyser::new(tuned());
        for episode in &args[1..] {
            let (_, print) = analyser
                .analyse_printing(Path::new(episode), &[], String::new(), &mut |_| {})
                .unwrap();
            let hours = print.duration_ns() as f64 / 3.6e12;
            let bytes = print.to_bytes().len();
            println!(
                "{episode}: {} peaks ({:.1} a second), {bytes} bytes, {:.0} bytes an hour",
                print.peak_count(),
                print.peak_count() as f64 / (hours * 3600.0),
                bytes as f64 / hours
            );
        }
        return;
    }
    // --probe EPISODE CLIP: one pair, every candidate refined (the analyser's debug log).
    if args.first().map(String::as_str) == Some("--probe") {
        tracing_subscriber::fmt()
            .with_env_filter("analysis=debug")
            .with_writer(std::io::stderr)
            .init();
        let params = tuned();
        let clip = analysis::ClipPrint::from_file(Path::new(&args[2]), &params).unwrap();
        eprintln!(
            "clip: {} landmarks a second",
            clip.landmark_count() as f64 / (clip.duration_ns() as f64 / 1e9)
        );
        let analyser = Analyser::new(params);
        let report = analyser
            .analyse(Path::new(&args[1]), &[ClipInput::new(&args[2])])
            .unwrap();
        for c in &report.clips {
            if let ClipOutcome::Found(r) = c {
                for m in &r.matches {
                    println!("{m:?}");
                }
            }
        }
        return;
    }
    // --peaks EPISODE CLIP AT_S: which of the clip's own peaks the episode has where the
    // clip was placed (the same bin ± 1, the same frame ± 1), and whose peaks those frames
    // kept instead.
    if args.first().map(String::as_str) == Some("--peaks") {
        return peaks_at(
            Path::new(&args[1]),
            Path::new(&args[2]),
            args[3].parse().unwrap(),
        );
    }
    if args.first().map(String::as_str) == Some("--formats") {
        let dir = args
            .get(1)
            .map_or_else(|| PathBuf::from("target/formats-corpus"), PathBuf::from);
        return formats(&dir);
    }
    // RUST_LOG=analysis=debug: the analyser's log of every candidate, episode by episode.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    let flag = |f: &str| args.iter().any(|a| a == f);
    let value = |f: &str| {
        args.iter()
            .position(|a| a == f)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let dir = PathBuf::from(value("--corpus").unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/analysis-corpus")
            .display()
            .to_string()
    }));
    let corpus = load(&dir);
    let all_clips: Vec<String> = corpus.clips.iter().map(|c| c.0.clone()).collect();
    let minutes: f64 = corpus.episodes.iter().map(|e| e.duration_s).sum::<f64>() / 60.0;
    println!(
        "corpus {}: {} episode files ({minutes:.0} min), {} clips; every episode against every clip",
        dir.display(),
        corpus.episodes.len(),
        corpus.clips.len()
    );

    // Ours, on everything: one analyser (the clip cache warm after the first episode, as in a
    // researcher), one thread.
    let analyser = Analyser::new(tuned());
    // ACCURACY_EPISODES=TEXT: only the episode files whose name contains TEXT (a probe).
    let only = std::env::var("ACCURACY_EPISODES").unwrap_or_default();
    let every: Vec<usize> = (0..corpus.episodes.len())
        .filter(|&e| corpus.episodes[e].file.contains(&only))
        .collect();
    // The peers' virtualenv, unless --no-peers (or it is missing, which is said).
    let venv = (!flag("--no-peers"))
        .then(|| {
            PathBuf::from(value("--peers-venv").unwrap_or_else(|| {
                format!(
                    "{}/.cache/archivist/analysis-peers-venv",
                    std::env::var("HOME").unwrap_or_default()
                )
            }))
        })
        .filter(|v| {
            let there = v.join("bin/python").exists();
            if !there {
                println!(
                    "\n(peers skipped: no virtualenv at {}; see the README)",
                    v.display()
                );
            }
            there
        });
    // --overlay-only: ours on the episodes under speech and music alone, then ours, the
    // baseline and the peers on windows of them; their tables only.
    if flag("--overlay-only") {
        let some: Vec<usize> = every
            .iter()
            .copied()
            .filter(|&e| corpus.episodes[e].background.is_some())
            .collect();
        let answers = ours(&corpus, &analyser, &some, &all_clips);
        // --findability: the prediction beside the recall alone.
        if flag("--findability") {
            let pairs: Vec<PairAnswer> = answers
                .iter()
                .flat_map(|a| {
                    a.found.iter().map(move |(c, o)| PairAnswer {
                        episode: a.episode,
                        clip: c.clone(),
                        window: None,
                        target: None,
                        offsets: o.clone(),
                    })
                })
                .collect();
            findability_report(&corpus, analyser.params(), &pairs);
            return;
        }
        overlay_report(
            &corpus,
            &analyser,
            &answers,
            !flag("--no-baseline"),
            venv.as_deref(),
        );
        return;
    }
    let answers = ours(&corpus, &analyser, &every, &all_clips);
    table(
        "### Ours, by distortion class (every episode × every clip)",
        &score(&corpus, &answers, &|e, _, _| e.class.clone()),
        true,
    );
    table(
        "### Ours, by placement (all classes)",
        &score(&corpus, &answers, &|_, kind, _| {
            if kind.is_empty() {
                "(absent)".into()
            } else {
                kind.into()
            }
        }),
        false,
    );

    // Speed: the longest episode (MP3 64k) against 1 and 50 clips, warm and cold cache.
    let longest = every
        .iter()
        .copied()
        .filter(|&e| corpus.episodes[e].class == "mp3_64k")
        .max_by(|a, b| {
            corpus.episodes[*a]
                .duration_s
                .total_cmp(&corpus.episodes[*b].duration_s)
        })
        .unwrap();
    let ep = &corpus.episodes[longest];
    let time = |a: &Analyser, n: usize| {
        let inputs: Vec<ClipInput> = all_clips[..n]
            .iter()
            .map(|c| ClipInput::new(corpus.dir.join(c)))
            .collect();
        let start = Instant::now();
        a.analyse(&corpus.dir.join(&ep.file), &inputs).unwrap();
        start.elapsed().as_secs_f64()
    };
    let n = all_clips.len();
    let warm1 = time(&analyser, 1);
    let warm_n = time(&analyser, n);
    let cold1 = time(&Analyser::new(tuned()), 1);
    let cold_n = time(&Analyser::new(tuned()), n);
    println!("\n### Speed and memory (one thread)\n");
    println!("| measure | value |\n|---|---|");
    println!(
        "| {} ({:.1} min) against {n} clips, clip fingerprints cached | {warm_n:.2} s = {:.0}× real time |",
        ep.file,
        ep.duration_s / 60.0,
        ep.duration_s / warm_n
    );
    println!(
        "| the same, clips fingerprinted first (cold cache) | {cold_n:.2} s = {:.0}× real time |",
        ep.duration_s / cold_n
    );
    println!(
        "| each extra clip, cached | {:.1} ms |",
        (warm_n - warm1) / (n - 1) as f64 * 1e3
    );
    println!(
        "| each extra clip, fingerprinted too | {:.1} ms |",
        (cold_n - cold1) / (n - 1) as f64 * 1e3
    );
    let long = corpus.dir.join(&corpus.long);
    if long.exists() {
        let out = Command::new(std::env::current_exe().unwrap())
            .arg("--child")
            .arg(&long)
            .args(all_clips.iter().map(|c| corpus.dir.join(c)))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text
            .split_whitespace()
            .map(|x| x.parse::<f64>().unwrap_or(f64::NAN));
        let (secs, dur) = (
            parts.next().unwrap_or(f64::NAN),
            parts.next().unwrap_or(f64::NAN),
        );
        let rss = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
            .unwrap()
            .max_rss();
        println!(
            "| 2-hour MP3 against {n} clips, a process of its own, cold | {secs:.1} s = {:.0}× real time |",
            dur / secs
        );
        println!(
            "| its peak resident memory | {:.0} MB |",
            rss as f64 / 1024.0
        );
    }

    // The baseline, on its subset; ours on the same subset for comparison.
    if !flag("--no-baseline") {
        let subset: Vec<usize> = every
            .iter()
            .copied()
            .filter(|&e| BASELINE_CLASSES.contains(&corpus.episodes[e].class.as_str()))
            .collect();
        let base = baseline(&corpus, &subset);
        table(
            &format!(
                "### Brute-force baseline (the original analyser), first {BASELINE_SECONDS:.0} s of {} episode files, the clips inside plus 4 absent; × real time per clip",
                subset.len()
            ),
            &score(&corpus, &base, &|e, _, _| e.class.clone()),
            true,
        );
    }

    // The peers, on a smaller subset: one episode's files, its clips plus 8 absent.
    if let Some(venv) = &venv {
        let subset: Vec<usize> = every
            .iter()
            .copied()
            .filter(|&e| {
                corpus.episodes[e].base == 0
                    && PEER_CLASSES.contains(&corpus.episodes[e].class.as_str())
            })
            .collect();
        let mine: Vec<Answer> = subset
            .iter()
            .map(|&e| {
                let ep = &corpus.episodes[e];
                let mut clips: Vec<String> = ep.present.keys().cloned().collect();
                clips.extend(
                    corpus
                        .clips
                        .iter()
                        .map(|c| c.0.clone())
                        .filter(|c| !ep.present.contains_key(c))
                        .take(8),
                );
                ours(&corpus, &Analyser::new(tuned()), &[e], &clips).remove(0)
            })
            .collect();
        let label = |e: &Episode, _: &str, _: f64| e.class.clone();
        table(
            "### Peer subset: ours (cold cache)",
            &score(&corpus, &mine, &label),
            true,
        );
        for tool in ["aof", "audalign"] {
            let answers = peers(&corpus, venv, tool, &subset);
            let name = if tool == "aof" {
                "audio-offset-finder 0.5.5"
            } else {
                "audalign 1.3.1 (fingerprint)"
            };
            table(
                &format!("### Peer subset: {name}"),
                &score(&corpus, &answers, &label),
                true,
            );
        }
    }
    overlay_report(
        &corpus,
        &analyser,
        &answers,
        !flag("--no-baseline"),
        venv.as_deref(),
    );
}

/// The peaks of `samples` (at the analysis rate) with `params`.
fn peaks_of(samples: &[f32], params: &Params) -> Vec<analysis::peaks::Peak> {
    let mut spectrogram = analysis::spectrum::Spectrogram::new(params);
    let mut picker = analysis::peaks::PeakPicker::new(params);
    let mut out = Vec::new();
    let mut frames: Vec<(u32, Vec<f32>)> = Vec::new();
    spectrogram.push(samples, &mut |t, power| frames.push((t, power.to_vec())));
    spectrogram.finish(&mut |t, power| frames.push((t, power.to_vec())));
    for (t, power) in frames {
        picker.push_frame(t, &power, &mut out);
    }
    picker.finish(&mut out);
    out
}

fn peaks_at(episode: &Path, clip: &Path, at_s: f64) {
    let params = tuned();
    let rate = params.sample_rate;
    let ep = decode(episode, rate, at_s + 60.0);
    let clip_samples = decode(clip, rate, 600.0);
    let dense = Params {
        peaks_per_window: params.clip_peaks_per_window,
        ..params.clone()
    };
    let own = peaks_of(&clip_samples, &dense);
    // The episode's peaks over the clip's span, with 2 s of context either side.
    let hop = params.hop as f64;
    let from = ((at_s - 2.0) * f64::from(rate)).max(0.0) as usize;
    let to = (from + clip_samples.len() + 4 * rate as usize).min(ep.len());
    let theirs = peaks_of(&ep[from..to], &params);
    let shift = (at_s * f64::from(rate) - from as f64) / hop;
    let frames = clip_samples.len() as f64 / hop;
    let inside: Vec<_> = theirs
        .iter()
        .filter(|p| f64::from(p.t) >= shift && f64::from(p.t) < shift + frames)
        .collect();
    let kept = own
        .iter()
        .filter(|c| {
            inside.iter().any(|p| {
                (f64::from(p.t) - shift - f64::from(c.t)).abs() <= 1.5 && p.f.abs_diff(c.f) <= 1
            })
        })
        .count();
    println!(
        "clip: {} peaks over {:.2} s ({:.0} a second); the episode over that span: {} peaks; \
         the clip's found there: {kept}",
        own.len(),
        frames * hop / f64::from(rate),
        own.len() as f64 / (frames * hop / f64::from(rate)),
        inside.len()
    );
    let hist = |ps: &[&analysis::peaks::Peak]| {
        let mut h = [0usize; 8];
        for p in ps {
            h[(usize::from(p.f) * 8 / 257).min(7)] += 1;
        }
        h
    };
    if std::env::var_os("ACCURACY_LIST").is_some() {
        for p in &own {
            println!("clip {:4} {:4} {:.2}", p.t, p.f, p.prominence);
        }
        for p in &inside {
            println!(
                "mix  {:4.0} {:4} {:.2}",
                f64::from(p.t) - shift,
                p.f,
                p.prominence
            );
        }
    }
    let own_refs: Vec<_> = own.iter().collect();
    println!("bins by eighth of 0-4 kHz, clip:    {:?}", hist(&own_refs));
    println!("bins by eighth of 0-4 kHz, episode: {:?}", hist(&inside));
    let prom = |ps: &[&analysis::peaks::Peak]| {
        let mut v: Vec<f32> = ps.iter().map(|p| p.prominence).collect();
        v.sort_by(f32::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    println!(
        "median prominence: clip {:.2}, episode {:.2}",
        prom(&own_refs),
        prom(&inside)
    );
}

/// `--formats DIR`: see the module's documentation.
fn formats(dir: &Path) {
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("truth.json"))
            .expect("truth.json: run scripts/make-formats-corpus.sh first"),
    )
    .unwrap();
    let clips: Vec<ClipInput> = truth["clips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| ClipInput::new(dir.join(c.as_str().unwrap())))
        .collect();
    // Clip index → true offsets (s) on the episode's own timeline.
    let present: Vec<Vec<f64>> = (0..clips.len())
        .map(|c| {
            truth["present"][c.to_string()]
                .as_array()
                .map(|v| v.iter().map(|x| x.as_f64().unwrap()).collect())
                .unwrap_or_default()
        })
        .collect();
    let duration_s = truth["duration_s"].as_f64().unwrap();
    let analyser = Analyser::new(tuned());
    let episodes = truth["episodes"].as_array().unwrap();
    let found = |path: &Path| -> (Vec<Vec<f64>>, f64) {
        let t = Instant::now();
        let report = analyser
            .analyse(path, &clips)
            .unwrap_or_else(|e| panic!("{e}"));
        let seconds = t.elapsed().as_secs_f64();
        let offsets = report
            .clips
            .iter()
            .map(|c| match c {
                ClipOutcome::Found(r) => r.offsets_ns().iter().map(|&o| o as f64 / 1e9).collect(),
                ClipOutcome::Failed(e) => panic!("{e}"),
            })
            .collect();
        (offsets, seconds)
    };
    let reference = episodes
        .iter()
        .find(|e| e["reference"].as_bool() == Some(true))
        .expect("a reference file");
    // Once before timing: the clips' fingerprints are made (and cached) here.
    let (plain, _) = found(&dir.join(reference["file"].as_str().unwrap()));
    println!(
        "| format | file | clips found | offset error vs truth (ms) | vs the plain MP3 (ms) | × real time |"
    );
    println!("|---|---|---|---|---|---|");
    let total: usize = present.iter().map(Vec::len).sum();
    for e in episodes {
        let file = e["file"].as_str().unwrap();
        let path = dir.join(file);
        let ad_at = e["ad_at_s"].as_f64();
        let ad_s = e["ad_s"].as_f64().unwrap_or(0.0);
        let shift = |t: f64| match ad_at {
            Some(a) if t >= a => t + ad_s,
            _ => t,
        };
        let (offsets, seconds) = found(&path);
        let (mut hits, mut vs_truth, mut vs_plain, mut extra) = (0usize, 0f64, 0f64, 0usize);
        for (c, true_offsets) in present.iter().enumerate() {
            extra += offsets[c].len().saturating_sub(true_offsets.len());
            for (k, &t) in true_offsets.iter().enumerate() {
                let expected = shift(t);
                let Some(&o) = offsets[c]
                    .iter()
                    .min_by(|a, b| (*a - expected).abs().total_cmp(&(*b - expected).abs()))
                else {
                    continue;
                };
                if (o - expected).abs() > HIT_S {
                    continue;
                }
                hits += 1;
                vs_truth = vs_truth.max((o - expected).abs() * 1e3);
                if let Some(&p) = plain[c].get(k) {
                    vs_plain = vs_plain.max((o - shift(p)).abs() * 1e3);
                }
            }
        }
        let media_s = duration_s + if ad_at.is_some() { ad_s } else { 0.0 };
        println!(
            "| {} | {} | {hits}/{total}{} | {vs_truth:.1} | {vs_plain:.1} | {:.0} |",
            e["format"].as_str().unwrap(),
            file.trim_start_matches("episodes/"),
            if extra > 0 {
                format!(" (+{extra} false)")
            } else {
                String::new()
            },
            media_s / seconds
        );
    }
}
