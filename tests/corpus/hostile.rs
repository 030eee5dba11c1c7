//! The hostile-input corpus (`tests/corpus/hostile/<queue>.jsonl`): loading its cases, and
//! checking what happened to each against what must happen.
//!
//! One case a line: `case` (its name), `expect` (`stored`, `poison`, or `one_stored`: of the
//! cases sharing its `group`, exactly one is stored and the others are poison), `reason` (a
//! substring of the dead-letter reason), `phase` (0: the base items, sent and ingested before
//! the rest, so that later cases can collide with them deterministically), `send` (`refused`:
//! `archivist send` refuses the line, so on a bus reached through the binary it never gets on
//! a queue). The body is `json` (compacted), `body` (the text as it is) or `body_hex` (bytes);
//! then each `"@@NAME@@"` (quotes included) is replaced by `fill.NAME`, a list of `[text,
//! count]` pieces; then `pad_to` pads with spaces to that many bytes; then `$LEASE_ACTIVE`,
//! `$LEASE_EXPIRED` and `$LEASE_REVOKED` become the ids of leases the harness made.
//!
//! Shared by the in-process test on the memory bus (`tests/suite/hostile_input.rs`) and the one
//! through the binary on the other buses (`bin/tests/e2e/hostile_input_e2e.rs`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Timelike, Utc};
use serde_json::Value;

/// The queues the corpus has cases for, in the order they are sent: curated items first,
/// results for them afterwards.
pub(crate) const QUEUES: [&str; 3] = ["curated_episodes", "curated_clips", "completed_research"];

/// What must happen to a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Stored (acknowledged, not dead-lettered).
    Stored,
    /// Dead-lettered with a reason containing this.
    Poison(String),
    /// Exactly one of the group stored, the others dead-lettered with a reason containing this.
    OneStored { group: String, reason: String },
}

/// One hostile message.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) name: String,
    /// The corpus file's queue (the harness may rename queues).
    pub(crate) queue: &'static str,
    pub(crate) phase: u8,
    pub(crate) expect: Expect,
    /// `archivist send` refuses it: it is not UTF-8 or over the size limit.
    pub(crate) send_refused: bool,
    /// The body, lease placeholders still in it.
    body: Vec<u8>,
}

/// The ids `$LEASE_…` placeholders stand for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Leases {
    pub(crate) active: String,
    pub(crate) expired: String,
    pub(crate) revoked: String,
}

impl Case {
    /// The body to send, with the lease placeholders replaced.
    pub(crate) fn body(&self, leases: &Leases) -> Vec<u8> {
        if !self.body.windows(7).any(|w| w == b"$LEASE_") {
            return self.body.clone();
        }
        let text = String::from_utf8(self.body.clone()).unwrap();
        text.replace("$LEASE_ACTIVE", &leases.active)
            .replace("$LEASE_EXPIRED", &leases.expired)
            .replace("$LEASE_REVOKED", &leases.revoked)
            .into_bytes()
    }

    /// Whether the case is, or may be, dead-lettered.
    pub(crate) fn may_be_poison(&self) -> bool {
        !matches!(self.expect, Expect::Stored)
    }
}

/// The corpus directory.
pub(crate) fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|p| p.join("tests/corpus/hostile").is_dir())
        .unwrap()
        .join("tests/corpus/hostile")
}

/// Every case of the corpus, queue by queue, in file order.
pub(crate) fn load() -> Vec<Case> {
    let mut cases = Vec::new();
    for queue in QUEUES {
        let path = dir().join(format!("{queue}.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1));
            cases.push(parse_case(queue, &v).unwrap_or_else(|e| {
                panic!("{}:{}: {e}", path.display(), n + 1);
            }));
        }
    }
    let names: BTreeSet<(&str, &str)> = cases.iter().map(|c| (c.queue, &*c.name)).collect();
    assert_eq!(names.len(), cases.len(), "case names are unique per queue");
    cases
}

fn parse_case(queue: &'static str, v: &Value) -> Result<Case, String> {
    let name = v["case"].as_str().ok_or("no case name")?.to_string();
    let reason = v["reason"].as_str().map(str::to_string);
    let expect = match v["expect"].as_str() {
        Some("stored") => Expect::Stored,
        Some("poison") => Expect::Poison(reason.ok_or("poison without a reason")?),
        Some("one_stored") => Expect::OneStored {
            group: v["group"]
                .as_str()
                .ok_or("one_stored without a group")?
                .into(),
            reason: reason.ok_or("one_stored without a reason")?,
        },
        other => return Err(format!("unknown expect {other:?}")),
    };
    let mut body: Vec<u8> = if let Some(j) = v.get("json") {
        serde_json::to_vec(j).map_err(|e| e.to_string())?
    } else if let Some(b) = v["body"].as_str() {
        b.as_bytes().to_vec()
    } else if let Some(h) = v["body_hex"].as_str() {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?
    } else {
        return Err("no json, body or body_hex".into());
    };
    if let Some(fill) = v["fill"].as_object() {
        for (key, pieces) in fill {
            let mut text = String::new();
            for piece in pieces.as_array().ok_or("fill is a list")? {
                let s = piece[0].as_str().ok_or("piece text")?;
                let count = piece[1].as_u64().ok_or("piece count")?;
                for _ in 0..count {
                    text.push_str(s);
                }
            }
            let placeholder = format!("\"@@{key}@@\"");
            let whole = String::from_utf8(body).map_err(|e| e.to_string())?;
            if !whole.contains(&placeholder) {
                return Err(format!("no {placeholder} to fill"));
            }
            body = whole.replace(&placeholder, &text).into_bytes();
        }
    }
    if let Some(n) = v["pad_to"].as_u64() {
        let n = n as usize;
        if body.len() > n {
            return Err(format!("{} bytes already, past pad_to {n}", body.len()));
        }
        body.resize(n, b' ');
    }
    if body.contains(&b'\n') {
        return Err("a body is one line (send takes one message a line)".into());
    }
    Ok(Case {
        name,
        queue,
        phase: v["phase"].as_u64().unwrap_or(1) as u8,
        expect,
        send_refused: v["send"].as_str() == Some("refused"),
        body,
    })
}

/// Leases for the `$LEASE_…` placeholders: one expired (leased ten hours ago for an hour),
/// one revoked, one active.
pub(crate) async fn make_leases(store: &dyn datastore::DataStore) -> Leases {
    let now = Utc::now();
    let lease = |now| datastore::LeaseRequest {
        max_clips: 1,
        duration: chrono::Duration::hours(1),
        now,
        lease_id: uuid::Uuid::new_v4(),
    };
    let expired = store
        .lease_next(lease(now - chrono::Duration::hours(10)))
        .await
        .unwrap()
        .unwrap();
    let revoked = store.lease_next(lease(now)).await.unwrap().unwrap();
    assert!(store
        .update_lease(revoked.id, datastore::LeaseUpdate::Revoke)
        .await
        .unwrap());
    let active = store.lease_next(lease(now)).await.unwrap().unwrap();
    Leases {
        active: active.id.to_string(),
        expired: expired.id.to_string(),
        revoked: revoked.id.to_string(),
    }
}

/// What happened to a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not in the dead-letter queue, and the queue is empty: stored.
    Stored,
    /// In the dead-letter queue with this reason.
    DeadLettered(String),
    /// `archivist send` refused it (exit 2), naming the line; nothing was sent.
    RefusedAtSend,
}

/// Counts of a corpus run, for the test's output and the README.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) cases: usize,
    pub(crate) stored: usize,
    pub(crate) dead_lettered: usize,
    pub(crate) refused_at_send: usize,
}

/// Matches each dead letter (body, reason) of a queue to the case that sent it; every case of
/// the queue not dead-lettered is stored. Panics on a dead letter no case sent.
pub(crate) fn outcomes(
    cases: &[&Case],
    leases: &Leases,
    dead_letters: Vec<(Vec<u8>, String)>,
    refused: &BTreeSet<String>,
) -> Vec<Outcome> {
    let mut by_body: HashMap<Vec<u8>, Vec<String>> = HashMap::new();
    for (body, reason) in dead_letters {
        by_body.entry(body).or_default().push(reason);
    }
    let out = cases
        .iter()
        .map(|c| {
            if refused.contains(&c.name) {
                return Outcome::RefusedAtSend;
            }
            match by_body.get_mut(&c.body(leases)).and_then(Vec::pop) {
                Some(reason) => Outcome::DeadLettered(reason),
                None => Outcome::Stored,
            }
        })
        .collect();
    let left: Vec<String> = by_body
        .into_iter()
        .filter(|(_, reasons)| !reasons.is_empty())
        .map(|(body, reasons)| {
            let shown: String = String::from_utf8_lossy(&body).chars().take(200).collect();
            format!("{shown} ({reasons:?})")
        })
        .collect();
    assert!(left.is_empty(), "dead letters no case sent: {left:#?}");
    out
}

/// Checks every outcome against its case (`refusals_allowed`: the bus is reached through
/// `archivist send`, which refuses some bodies before they get on a queue). Collects every
/// mismatch before failing, so that one run names them all.
pub(crate) fn check(
    label: &str,
    cases: &[&Case],
    outcomes: &[Outcome],
    refusals_allowed: bool,
) -> Counts {
    let mut problems = String::new();
    let mut counts = Counts {
        cases: cases.len(),
        ..Counts::default()
    };
    let mut groups: BTreeMap<&str, Vec<&Outcome>> = BTreeMap::new();
    for (case, outcome) in cases.iter().zip(outcomes) {
        match outcome {
            Outcome::Stored => counts.stored += 1,
            Outcome::DeadLettered(_) => counts.dead_lettered += 1,
            Outcome::RefusedAtSend => counts.refused_at_send += 1,
        }
        let ok = match (&case.expect, outcome) {
            (_, Outcome::RefusedAtSend) => refusals_allowed && case.send_refused,
            (Expect::Stored, Outcome::Stored) => true,
            (Expect::Poison(want), Outcome::DeadLettered(reason))
            | (Expect::OneStored { reason: want, .. }, Outcome::DeadLettered(reason)) => {
                reason.contains(want.as_str())
            }
            (Expect::OneStored { .. }, Outcome::Stored) => true,
            _ => false,
        };
        if let Expect::OneStored { group, .. } = &case.expect {
            groups.entry(group).or_default().push(outcome);
        }
        if !ok {
            let _ = writeln!(
                problems,
                "  {}: {:?}, expected {:?}{}",
                case.name,
                outcome,
                case.expect,
                if case.send_refused && refusals_allowed {
                    " (or refused at send)"
                } else {
                    ""
                }
            );
        }
    }
    for (group, outs) in groups {
        let stored = outs.iter().filter(|o| ***o == Outcome::Stored).count();
        if stored != 1 {
            let _ = writeln!(problems, "  group {group}: {stored} stored, expected 1");
        }
    }
    assert!(
        problems.is_empty(),
        "{label}: cases that went wrong:\n{problems}"
    );
    counts
}

/// The fields of a stored case the expected state needs.
#[derive(serde::Deserialize)]
struct Probe {
    title: Option<String>,
    date_aired: Option<String>,
    episode: Option<Box<Probe>>,
    clip: Option<Box<Probe>>,
}

/// An episode's identity as the datastore keeps it (times to the microsecond).
fn episode_key(p: &Probe) -> (String, DateTime<Utc>) {
    let aired: DateTime<Utc> = p.date_aired.as_deref().unwrap().parse().unwrap();
    let micros = aired
        .with_nanosecond(aired.nanosecond() / 1000 * 1000)
        .unwrap();
    (p.title.clone().unwrap(), micros)
}

/// The counts `status` must show once the corpus went through: distinct episodes and clips
/// of the stored curated cases, distinct pairs of the stored results.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) episodes: u64,
    pub(crate) clips: u64,
    pub(crate) researched_pairs: u64,
}

/// [`Stored`] from the outcomes of every case (all queues, in [`load`] order).
pub(crate) fn expected_state(cases: &[&Case], outcomes: &[Outcome], leases: &Leases) -> Stored {
    let mut episodes = BTreeSet::new();
    let mut clips = BTreeSet::new();
    let mut pairs = BTreeSet::new();
    for (case, outcome) in cases.iter().zip(outcomes) {
        if *outcome != Outcome::Stored {
            continue;
        }
        // Unknown fields are skipped by serde_json without recursion, so deep ones parse.
        let p: Probe = serde_json::from_slice(&case.body(leases))
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        match case.queue {
            "curated_episodes" => {
                episodes.insert(episode_key(&p));
            }
            "curated_clips" => {
                clips.insert(p.title.unwrap());
            }
            _ => {
                let clip = p.clip.and_then(|c| c.title).unwrap();
                pairs.insert((episode_key(p.episode.as_deref().unwrap()), clip));
            }
        }
    }
    Stored {
        episodes: episodes.len() as u64,
        clips: clips.len() as u64,
        researched_pairs: pairs.len() as u64,
    }
}
