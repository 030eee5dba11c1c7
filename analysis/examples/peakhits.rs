//! Experiment: single-peak coincidences (±1 frame, ±1 bin) per offset, at the truth and elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use analysis::peaks::Peak;
use analysis::Params;
use std::collections::HashMap;
use std::path::Path;

fn peaks_of(path: &Path, params: &Params) -> (Vec<Peak>, u32) {
    let (samples, rate, _) = analysis::decode::decode_all(path).unwrap();
    let a = analysis::resample::resample_all(&samples, rate, params.sample_rate, params);
    let (_, peaks, n) = analysis::landmarks::fingerprint_with_peaks(&a, params);
    (peaks, n)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let corpus = Path::new(&args[1]);
    let filter = args.get(2).cloned().unwrap_or_default();
    let tol_f: i32 = std::env::var("TOLF")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(corpus.join("truth.json")).unwrap()).unwrap();
    let params = Params::default();
    let mut clips: Vec<(String, Vec<Vec<u32>>, u32, usize)> = Vec::new();
    for c in truth["clips"].as_array().unwrap() {
        let file = c["file"].as_str().unwrap().to_string();
        let (peaks, frames) = peaks_of(&corpus.join(&file), &params);
        let mut bins = vec![Vec::new(); 300];
        for p in &peaks {
            bins[p.f as usize].push(p.t);
        }
        clips.push((file, bins, frames, peaks.len()));
    }
    for e in truth["episodes"].as_array().unwrap() {
        let file = e["file"].as_str().unwrap();
        if !file.contains(&filter) {
            continue;
        }
        let (peaks, frames) = peaks_of(&corpus.join(file), &params);
        let mut present: HashMap<String, Vec<f64>> = HashMap::new();
        if let Some(p) = e["present"].as_object() {
            for (k, v) in p {
                present.insert(
                    k.clone(),
                    v.as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap())
                        .collect(),
                );
            }
        }
        let mut ratio: HashMap<(String, i64), f64> = HashMap::new();
        if let Some(items) = e["items"].as_array() {
            for it in items {
                if let (Some(c), Some(o)) = (it["clip"].as_str(), it["offset_s"].as_f64()) {
                    let r = it["ratio_db"].as_f64().unwrap_or(99.0);
                    ratio.insert((c.to_string(), (o * 1000.0).round() as i64), r);
                }
            }
        }
        let frame_s = params.hop as f64 / params.sample_rate as f64;
        for (cf, bins, cframes, npeaks) in &clips {
            let base = *cframes as i64 + 2;
            let len = frames as i64 + base + 2;
            let mut hist = vec![0u32; len as usize];
            for p in &peaks {
                for df in -tol_f..=tol_f {
                    let b = p.f as i32 + df;
                    if b < 0 || b >= 300 {
                        continue;
                    }
                    for &tc in &bins[b as usize] {
                        let o = p.t as i64 - tc as i64 + base;
                        hist[o as usize] += 1;
                    }
                }
            }
            let s: Vec<u32> = (0..hist.len())
                .map(|i| {
                    hist[i]
                        + if i > 0 { hist[i - 1] } else { 0 }
                        + hist.get(i + 1).copied().unwrap_or(0)
                })
                .collect();
            let mean = s.iter().map(|&x| x as f64).sum::<f64>() / s.len() as f64;
            let truths = present.get(cf).cloned().unwrap_or_default();
            let excl = |i: usize| {
                truths.iter().any(|t| {
                    let o = (t / frame_s).round() as i64 + base;
                    (i as i64 - o).abs() <= *cframes as i64
                })
            };
            let mut other = 0;
            let mut other_at = 0;
            for (i, &v) in s.iter().enumerate() {
                if v > other && !excl(i) {
                    other = v;
                    other_at = i;
                }
            }
            for t in &truths {
                let o = (t / frame_s).round() as i64 + base;
                let at = (o - 1..=o + 1)
                    .filter(|&i| i >= 0 && (i as usize) < s.len())
                    .map(|i| s[i as usize])
                    .max()
                    .unwrap_or(0);
                let r = ratio
                    .get(&(cf.clone(), (t * 1000.0).round() as i64))
                    .copied()
                    .unwrap_or(99.0);
                println!(
                    "P\t{file}\t{cf}\t{t}\t{r}\t{at}\t{other}\t{mean:.2}\t{npeaks}\t{cframes}"
                );
            }
            let ot = (other_at as i64 - base) as f64 * frame_s;
            println!(
                "A\t{file}\t{cf}\t{ot:.3}\t{}\t{other}\t{other}\t{mean:.2}\t{npeaks}\t{cframes}",
                truths.len()
            );
        }
        eprintln!("{file}: {} peaks", peaks.len());
    }
}
