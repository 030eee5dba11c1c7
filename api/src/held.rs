//! What the gateway keeps in memory for researchers: deliveries of buses without durable
//! receipts, the long polls in flight and the tokens that took items (so that a revoked
//! token's are ended and given back at once), and the researchers seen behind each token
//! (counted at most up to the token's bound). What must outlive the process (which token holds
//! which receipt, and what the item names) is in the datastore ([`datastore::HeldItem`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use messagebus::{Delivery, Receiver};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use archivist::messages::{CompletedResearchItem, PendingResearchItem};

/// A delivery held in this gateway's memory (buses without durable receipts).
pub(crate) struct InMemory {
    pub(crate) delivery: Delivery,
    pub(crate) visible_until: Instant,
}

/// What a work item names, as kept beside its receipt: results sent with the receipt must
/// name the same lease and episode and one of its clips.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Names {
    lease_id: Uuid,
    episode_title: String,
    episode_date_aired: DateTime<Utc>,
    clips: Vec<String>,
}

impl Names {
    pub(crate) fn of(item: &PendingResearchItem) -> Self {
        Names {
            lease_id: item.lease_id,
            episode_title: item.episode.title.clone(),
            episode_date_aired: item.episode.date_aired,
            clips: item.clips.iter().map(|c| c.title.clone()).collect(),
        }
    }

    /// How many results the item takes at most in one request.
    pub(crate) fn clip_count(&self) -> usize {
        self.clips.len()
    }

    /// Why `result` is not one of this item's, if it is not.
    pub(crate) fn refuses(&self, result: &CompletedResearchItem) -> Option<String> {
        if result.lease_id != self.lease_id {
            return Some(format!(
                "lease_id {} is not this receipt's lease",
                result.lease_id
            ));
        }
        if result.episode.title != self.episode_title
            || result.episode.date_aired != self.episode_date_aired
        {
            return Some(format!(
                "episode {:?} is not this receipt's episode",
                result.episode.title
            ));
        }
        if !self.clips.contains(&result.clip.title) {
            return Some(format!(
                "clip {:?} is not one of this receipt's clips",
                result.clip.title
            ));
        }
        None
    }
}

/// The researchers seen behind one token.
#[derive(Default)]
pub(crate) struct Seen {
    /// Each researcher's name (its header, or its address) and when it was last seen.
    pub(crate) who: HashMap<String, Instant>,
    /// When the token's presence was last written, and the count written.
    pub(crate) written: Option<(Instant, u64)>,
}

/// The researchers' side of a gateway in memory.
#[derive(Default)]
pub(crate) struct Work {
    pub(crate) receiver: OnceCell<Arc<dyn Receiver>>,
    /// Deliveries of buses without durable receipts, by the receipt's hash.
    pub(crate) in_memory: Mutex<HashMap<String, InMemory>>,
    /// Long polls in flight per token name: how many, and what ends them.
    pub(crate) polls: Mutex<HashMap<String, (usize, CancellationToken)>>,
    /// Tokens that took items through this gateway: watched for revocation.
    pub(crate) takers: Mutex<HashSet<String>>,
    /// Researchers seen per token name.
    pub(crate) seen: Mutex<HashMap<String, Seen>>,
    /// This gateway's presence row (its own receivers on the work-item queue).
    pub(crate) id: String,
}

impl Work {
    pub(crate) fn new() -> Self {
        Work {
            id: format!("gateway:{}", Uuid::new_v4()),
            ..Work::default()
        }
    }

    /// Whether the gateway's receiver exists (the bus counts it as a consumer).
    pub(crate) fn has_receiver(&self) -> bool {
        self.receiver.initialized()
    }

    /// Registers a long poll of `token`: the returned guard ends it when dropped, and its
    /// [`CancellationToken`] is cancelled when the token is revoked.
    pub(crate) fn poll(self: &Arc<Self>, token: &str) -> PollGuard {
        let cancel = match self.polls.lock() {
            Ok(mut polls) => {
                let entry = polls
                    .entry(token.to_string())
                    .or_insert_with(|| (0, CancellationToken::new()));
                entry.0 += 1;
                entry.1.clone()
            }
            Err(_) => CancellationToken::new(),
        };
        PollGuard {
            work: self.clone(),
            token: token.to_string(),
            cancel,
        }
    }

    /// Ends every poll of `token` in flight; returns how many.
    pub(crate) fn end_polls(&self, token: &str) -> usize {
        let Ok(mut polls) = self.polls.lock() else {
            return 0;
        };
        match polls.remove(token) {
            Some((count, cancel)) => {
                cancel.cancel();
                count
            }
            None => 0,
        }
    }

    /// The tokens with polls in flight or items taken here: those to check for revocation.
    pub(crate) fn watched(&self) -> HashSet<String> {
        let mut names = self.takers.lock().map(|t| t.clone()).unwrap_or_default();
        if let Ok(polls) = self.polls.lock() {
            names.extend(polls.keys().cloned());
        }
        names
    }

    /// Notes that `who` works behind `token`, which counts as at most `max` researchers:
    /// returns the count to write as the token's presence when it should be written now.
    pub(crate) fn seen(
        &self,
        token: &str,
        who: &str,
        max: u32,
        window: Duration,
        every: Duration,
    ) -> Option<u64> {
        let now = Instant::now();
        let mut all = self.seen.lock().ok()?;
        let seen = all.entry(token.to_string()).or_default();
        seen.who.retain(|_, at| now.duration_since(*at) < window);
        if seen.who.contains_key(who) || seen.who.len() < max as usize {
            seen.who.insert(who.to_string(), now);
        }
        let count = seen.who.len() as u64;
        let due = seen
            .written
            .is_none_or(|(at, written)| written != count || now.duration_since(at) >= every);
        if due {
            seen.written = Some((now, count));
            Some(count)
        } else {
            None
        }
    }
}

/// A long poll in flight: counted until dropped.
pub(crate) struct PollGuard {
    work: Arc<Work>,
    token: String,
    pub(crate) cancel: CancellationToken,
}

impl Drop for PollGuard {
    fn drop(&mut self) {
        // A poll ended by revocation was counted under an entry that is gone already.
        if self.cancel.is_cancelled() {
            return;
        }
        if let Ok(mut polls) = self.work.polls.lock() {
            if let Some(entry) = polls.get_mut(&self.token) {
                entry.0 = entry.0.saturating_sub(1);
                if entry.0 == 0 {
                    polls.remove(&self.token);
                }
            }
        }
    }
}
