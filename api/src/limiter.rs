//! Token buckets: the gateway's rate limits. Failed authentication is limited per credential
//! (the token that failed, never the address that many clients behind one NAT share), and
//! requests per token.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Token buckets by key: `burst` at once, refilled at `burst / per`. Bounded: past
/// [`MAX_KEYS`] keys, full buckets are forgotten (they hold no debt).
pub(crate) struct Buckets<K> {
    burst: f64,
    per_second: f64,
    buckets: Mutex<HashMap<K, (f64, Instant)>>,
}

/// Keys kept at most before full buckets are forgotten.
const MAX_KEYS: usize = 10_000;

impl<K: Hash + Eq + Clone> Buckets<K> {
    pub(crate) fn new(burst: u32, per: Duration) -> Self {
        let burst = f64::from(burst.max(1));
        Buckets {
            burst,
            per_second: burst / per.as_secs_f64().max(0.001),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn level(&self, entry: (f64, Instant), now: Instant) -> f64 {
        let (tokens, at) = entry;
        (tokens + now.duration_since(at).as_secs_f64() * self.per_second).min(self.burst)
    }

    /// How long until `key`'s bucket holds a whole token again.
    fn wait_for(&self, level: f64) -> Duration {
        Duration::from_secs_f64(((1.0 - level).max(0.0) / self.per_second).min(3600.0))
    }

    /// `Ok` when `key` has a token left, without taking it; else how long until it has.
    pub(crate) fn allows(&self, key: &K) -> Result<(), Duration> {
        let now = Instant::now();
        let Ok(buckets) = self.buckets.lock() else {
            return Ok(());
        };
        match buckets.get(key).map(|&entry| self.level(entry, now)) {
            Some(level) if level < 1.0 => Err(self.wait_for(level)),
            _ => Ok(()),
        }
    }

    /// Takes a token of `key`'s bucket; when there is none left, how long until there is.
    pub(crate) fn take(&self, key: &K) -> Result<(), Duration> {
        let now = Instant::now();
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(key) {
            buckets.retain(|_, entry| self.level(*entry, now) < self.burst);
        }
        let level = buckets
            .get(key)
            .map_or(self.burst, |&entry| self.level(entry, now));
        if level < 1.0 {
            buckets.insert(key.clone(), (level, now));
            return Err(self.wait_for(level));
        }
        buckets.insert(key.clone(), (level - 1.0, now));
        Ok(())
    }
}

/// The rate limits of one gateway.
pub(crate) struct Limiter {
    /// Failed attempts per credential (the SHA-256 of the token that failed).
    pub(crate) failures: Buckets<String>,
    /// Requests per token (by name).
    pub(crate) requests: Buckets<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refuse_past_the_burst_and_say_for_how_long() {
        let buckets = Buckets::new(3, Duration::from_secs(30));
        let key = "a".to_string();
        for _ in 0..3 {
            assert_eq!(buckets.take(&key), Ok(()));
        }
        let wait = buckets.allows(&key).err();
        assert!(wait.is_some_and(|w| w > Duration::from_secs(9) && w <= Duration::from_secs(10)));
        assert!(buckets.take(&key).is_err());
        assert_eq!(buckets.take(&"b".to_string()), Ok(()));
    }
}
