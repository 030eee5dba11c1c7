//! The demo researchers' fake analysis: deterministic durations, hashes and offsets derived
//! from a hash of the episode, the clip and the pair, so that every demo finds the same
//! matches.

use archivist::messages::{ClipInfo, EpisodeInfo};

use crate::demo::curators::{clip_profile, ClipKind};

const SECOND: i64 = 1_000_000_000;

/// What researching one pair finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub(crate) episode_duration_ns: i64,
    pub(crate) episode_hash: String,
    pub(crate) clip_duration_ns: i64,
    pub(crate) clip_hash: String,
    pub(crate) clip_offsets_ns: Vec<i64>,
}

/// FNV-1a, 64 bits: stable across runs, platforms and Rust versions (unlike `DefaultHasher`).
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn below(h: u64, n: i64) -> i64 {
    if n <= 0 {
        0
    } else {
        (h % n as u64) as i64
    }
}

/// Researches `clip` in `episode`.
pub(crate) fn research(episode: &EpisodeInfo, clip: &ClipInfo) -> Finding {
    let eh = fnv(&[episode.media_uri.as_bytes()]);
    let ch = fnv(&[clip.media_uri.as_bytes()]);
    let pair = fnv(&[episode.media_uri.as_bytes(), clip.media_uri.as_bytes()]);
    // Episodes run 45 to 75 minutes.
    let episode_duration_ns = 45 * 60 * SECOND + below(eh, 30 * 60 * SECOND);
    let (kind, percent) = clip_profile(&clip.title, episode.date_aired);
    let (clip_duration_ns, most) = match kind {
        ClipKind::Jingle => (3 * SECOND + below(ch, 6 * SECOND), 1),
        ClipKind::Catchphrase => (SECOND + below(ch, 2 * SECOND), 3),
        ClipKind::Ad => (30 * SECOND + below(ch, 31 * SECOND), 2),
    };
    let mut clip_offsets_ns = Vec::new();
    if (pair % 100) < u64::from(percent) {
        let count = 1 + below(pair >> 8, most);
        let room = episode_duration_ns - clip_duration_ns;
        for i in 0..count {
            let at = below(fnv(&[&pair.to_le_bytes(), &i.to_le_bytes()]), room);
            // Offsets to the millisecond, as an audio fingerprinter would report them.
            clip_offsets_ns.push(at / 1_000_000 * 1_000_000);
        }
        clip_offsets_ns.sort_unstable();
        clip_offsets_ns.dedup();
    }
    Finding {
        episode_duration_ns,
        episode_hash: format!("{eh:016x}"),
        clip_duration_ns,
        clip_hash: format!("{ch:016x}"),
        clip_offsets_ns,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::demo::curators::data_set;

    #[test]
    fn deterministic_and_some_pairs_match() {
        let data = data_set();
        let mut matched = 0;
        for e in data.episodes.iter().take(50) {
            for c in &data.clips {
                let f = research(e, c);
                assert_eq!(f, research(e, c));
                assert!(f
                    .clip_offsets_ns
                    .iter()
                    .all(|&o| o >= 0 && o + f.clip_duration_ns <= f.episode_duration_ns));
                matched += usize::from(!f.clip_offsets_ns.is_empty());
            }
        }
        let pairs = 50 * data.clips.len();
        assert!(
            matched > pairs / 10 && matched < pairs / 2,
            "{matched} of {pairs}"
        );
    }
}
