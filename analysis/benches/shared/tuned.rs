//! The benchmarks' parameters: the defaults with `ACCURACY_PARAMS` applied, for both benches.

use analysis::Params;

/// The analyser's parameters: the defaults, with any of `ACCURACY_PARAMS` (`name=value,…`,
/// for trying a value without a rebuild) applied.
pub(crate) fn tuned() -> Params {
    let mut p = Params::default();
    let Ok(spec) = std::env::var("ACCURACY_PARAMS") else {
        return p;
    };
    for kv in spec.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').expect("name=value");
        let f = || v.parse::<f64>().expect("a number");
        match k {
            "peaks_per_window" => p.peaks_per_window = f() as usize,
            "fanout" => p.fanout = f() as usize,
            "min_votes" => p.min_votes = f() as u32,
            "min_correlation" => p.min_correlation = f() as f32,
            "pre_emphasis" => p.pre_emphasis = f() as f32,
            "min_prominence" => p.min_prominence = f() as f32,
            "contrast_frames" => p.contrast_frames = f() as usize,
            "peak_freq_radius" => p.peak_freq_radius = f() as usize,
            "peak_time_radius" => p.peak_time_radius = f() as usize,
            "refine_windows" => p.refine_windows = f() as usize,
            "refine_window" => p.refine_window = f() as usize,
            "refine_search" => p.refine_search = f() as usize,
            "clip_peaks_per_window" => p.clip_peaks_per_window = f() as usize,
            "clip_fanout" => p.clip_fanout = f() as usize,
            "periodic_margin" => p.periodic_margin = f() as f32,
            "refine_screen" => p.refine_screen = f() as f32,
            "screen_window" => p.screen_window = f() as usize,
            "periodic_search" => p.periodic_search = f() as usize,
            "periodic_lobe" => p.periodic_lobe = f() as usize,
            "vote_agreement" => p.vote_agreement = f() as usize,
            "peak_bands" => p.peak_bands = f() as usize,
            "peak_bands_log" => p.peak_bands_log = f() != 0.0,
            "peak_hit_min" => p.peak_hit_min = f() as u32,
            "peak_hit_fraction" => p.peak_hit_fraction = f() as f32,
            "peak_hit_bins" => p.peak_hit_bins = f() as u16,
            "min_correlation_weak" => p.min_correlation_weak = f() as f32,
            "weak_votes" => p.weak_votes = f() as u32,
            "judge_piece" => p.judge_piece = f() as usize,
            "judge_ratio" => p.judge_ratio = f() as f32,
            "judge_votes" => p.judge_votes = f() as u32,
            _ => panic!("ACCURACY_PARAMS: no parameter {k} here"),
        }
    }
    eprintln!("parameters: {p:?}");
    p
}
