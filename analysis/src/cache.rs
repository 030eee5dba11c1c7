//! Clip fingerprints kept between work items: a clip is in every work item, so its
//! fingerprint is computed once per process. Keyed by the file's SHA-256 (the same content
//! under another name or URL is the same clip), bounded in bytes, least recently used out.

use std::collections::HashMap;
use std::sync::Arc;

use crate::clip::ClipPrint;

/// A bounded LRU map from content hash to fingerprint.
pub(crate) struct ClipCache {
    budget: usize,
    bytes: usize,
    tick: u64,
    map: HashMap<String, (Arc<ClipPrint>, u64)>,
}

impl ClipCache {
    /// An empty cache holding at most `budget` bytes of fingerprints.
    pub(crate) fn new(budget: usize) -> ClipCache {
        ClipCache {
            budget,
            bytes: 0,
            tick: 0,
            map: HashMap::new(),
        }
    }

    pub(crate) fn get(&mut self, hash: &str) -> Option<Arc<ClipPrint>> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(hash).map(|(p, used)| {
            *used = tick;
            Arc::clone(p)
        })
    }

    pub(crate) fn insert(&mut self, print: Arc<ClipPrint>) {
        let size = print.bytes();
        if size > self.budget {
            return;
        }
        self.tick += 1;
        if let Some((old, _)) = self.map.insert(print.hash().to_owned(), (print, self.tick)) {
            self.bytes -= old.bytes();
        }
        self.bytes += size;
        while self.bytes > self.budget {
            let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((p, _)) = self.map.remove(&oldest) {
                self.bytes -= p.bytes();
            }
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::params::Params;

    fn print(hash: &str, seconds: usize) -> Arc<ClipPrint> {
        let samples: Vec<f32> = (0..8_000 * seconds)
            .map(|i| ((i as f32) * 0.37).sin() * ((i / 700) as f32).cos())
            .collect();
        Arc::new(ClipPrint::from_samples(
            &samples,
            8_000,
            hash.into(),
            &Params::default(),
        ))
    }

    #[test]
    fn least_recently_used_goes_first_and_the_budget_holds() {
        let a = print("a", 2);
        let size = a.bytes();
        let mut cache = ClipCache::new(size * 2 + size / 2);
        cache.insert(a);
        cache.insert(print("b", 2));
        assert!(cache.get("a").is_some());
        cache.insert(print("c", 2));
        assert!(cache.get("b").is_none(), "b was the least recently used");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert!(cache.bytes() <= size * 2 + size / 2);
        assert_eq!(cache.len(), 2);
    }
}
