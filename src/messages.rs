//! The bus messages of the contract, their JSON form and their validation.
//!
//! Decoding is strict about what the contract requires and lenient about the rest: unknown
//! fields are ignored so that curators and researchers can add fields without breaking us.
//! Any message that fails [`decode`] is poison: the error says why, for the dead-letter queue.

use chrono::{DateTime, Utc};
use datastore::{EpisodeCompletion, EpisodeKey, ResearchResult};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use datastore::{ClipInfo, ClipMatch, EpisodeInfo, Findability};

/// The largest message body we accept, in bytes: the bus limit.
pub const MAX_BODY_BYTES: usize = messagebus::MAX_BODY_BYTES;
/// The longest title, curator, media URI or media type, in characters.
pub const MAX_SHORT_TEXT: usize = 1024;
/// The longest description, in characters.
pub const MAX_DESCRIPTION: usize = 64 * 1024;
/// The most offsets in one result.
pub const MAX_OFFSETS: usize = 100_000;
/// The most clips in one work item we accept back from the bus.
pub const MAX_CLIPS_PER_ITEM: usize = 10_000;
/// The longest episode or clip, in nanoseconds: 30 days. Anything longer is a researcher's
/// bug (a unit mix-up, an overflow), not audio.
pub const MAX_DURATION_NS: i64 = 30 * 24 * 3600 * 1_000_000_000;
/// The years a time may have: those of RFC 3339's four-digit years (year 0 is not a calendar
/// year), all of which every datastore can keep.
pub const YEARS: std::ops::RangeInclusive<i32> = 1..=9999;

/// A work item for researchers: one lease, one episode, its clips (queue `pending_research`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingResearchItem {
    /// The lease to send back with each result.
    pub lease_id: Uuid,
    /// When the lease ends unless a result renews it.
    #[serde(
        serialize_with = "datastore::serialize_time",
        deserialize_with = "datastore::deserialize_time"
    )]
    pub lease_expires_at: DateTime<Utc>,
    /// The episode to research.
    pub episode: EpisodeInfo,
    /// The clips to look for in it, most urgent first.
    pub clips: Vec<ClipInfo>,
}

/// An episode fully researched: every clip known when its last pair was recorded is
/// researched or failed (queue `researched_episodes`, published only when announcing is
/// configured). A clip curated later reopens the episode, and its completion is announced
/// again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeResearched {
    /// The episode.
    pub episode: EpisodeInfo,
    /// When its last pair was researched.
    #[serde(
        serialize_with = "datastore::serialize_time",
        deserialize_with = "datastore::deserialize_time"
    )]
    pub completed_at: DateTime<Utc>,
    /// Its clips researched (not failed).
    pub clips_researched: u64,
    /// Of those, the clips found in it.
    pub clips_matched: u64,
    /// Its clips whose research failed for a reason that will not pass.
    pub clips_failed: u64,
    /// The clips found, in the order of their first occurrence, with every offset.
    pub matches: Vec<ClipMatch>,
}

impl From<EpisodeCompletion> for EpisodeResearched {
    fn from(c: EpisodeCompletion) -> Self {
        EpisodeResearched {
            episode: c.episode,
            completed_at: c.completed_at,
            clips_researched: c.clips_researched,
            clips_matched: c.clips_matched,
            clips_failed: c.clips_failed,
            matches: c.matches,
        }
    }
}

/// One researched clip (queue `completed_research`), or one that could not be researched
/// (`failure`, the contract's *Failed research*).
///
/// On the wire, a failed clip carries `"failure": "reason"` in place of `clip_offsets_ns`, and
/// its durations and hashes may be absent (they are 0 and `""` here then); a researched clip
/// must carry its durations and hashes, and `clip_offsets_ns` (absent: `[]`). Giving both
/// `failure` and `clip_offsets_ns` is poison. `clip_match_scores` is optional: one score from 0
/// to 1 per offset, in the order of `clip_offsets_ns`; encoded only when present.
/// `clip_findable_from_db` is optional too: how findable the clip is, the level above its
/// background (dB) from which the reference analyser finds it, predicted from the clip alone
/// (`null`: not found even at the loudest level tried); encoded only when predicted.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "CompletedWire")]
pub struct CompletedResearchItem {
    /// The lease the work was done under.
    pub lease_id: Uuid,
    /// True on the researcher's last item for the lease: the lease ends once all its results
    /// are recorded (items may arrive in any order; see [`datastore::LeaseUpdate::Revoke`]).
    pub revoke_lease: bool,
    /// When the research was done.
    pub research_date: DateTime<Utc>,
    /// The episode researched.
    pub episode: EpisodeInfo,
    /// The clip looked for.
    pub clip: ClipInfo,
    /// The episode's length in nanoseconds.
    pub episode_duration_ns: i64,
    /// The researcher's hash of the episode audio.
    pub episode_hash: String,
    /// The clip's length in nanoseconds.
    pub clip_duration_ns: i64,
    /// The researcher's hash of the clip audio.
    pub clip_hash: String,
    /// Where the clip occurs in the episode; empty when it does not (and on a failure).
    pub clip_offsets_ns: Vec<i64>,
    /// How sure the analyser is of each offset, from 0 to 1, in the order of
    /// `clip_offsets_ns` (as many); `None` when it gave no scores, and always on a failure.
    pub clip_match_scores: Option<Vec<f64>>,
    /// How findable the clip is (`clip_findable_from_db`), when the researcher predicted it;
    /// kept on the clip.
    pub clip_findability: Option<Findability>,
    /// Why the pair could not be researched, for a reason that will not pass; `None` for a
    /// researched pair.
    pub failure: Option<String>,
}

/// [`CompletedResearchItem`] as it travels: which fields are present matters.
#[derive(Deserialize)]
struct CompletedWire {
    lease_id: Uuid,
    #[serde(default)]
    revoke_lease: bool,
    #[serde(deserialize_with = "datastore::deserialize_time")]
    research_date: DateTime<Utc>,
    episode: EpisodeInfo,
    clip: ClipInfo,
    #[serde(default, deserialize_with = "present")]
    episode_duration_ns: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    episode_hash: Option<String>,
    #[serde(default, deserialize_with = "present")]
    clip_duration_ns: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    clip_hash: Option<String>,
    #[serde(default, deserialize_with = "present")]
    clip_offsets_ns: Option<Vec<i64>>,
    #[serde(default, deserialize_with = "present")]
    clip_match_scores: Option<Vec<f64>>,
    /// Absent: not predicted; `null`: not found even at the loudest level tried.
    #[serde(default, deserialize_with = "present")]
    clip_findable_from_db: Option<Option<i32>>,
    #[serde(default, deserialize_with = "present")]
    failure: Option<String>,
}

/// A field that may be absent but, when present, must hold a value of its type (`null` is
/// not "absent": it is poison, as it was before these fields became optional).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

impl TryFrom<CompletedWire> for CompletedResearchItem {
    type Error = String;

    fn try_from(w: CompletedWire) -> Result<Self, String> {
        if w.failure.is_some() && w.clip_offsets_ns.is_some() {
            return Err("give either `clip_offsets_ns` or `failure`, not both".into());
        }
        if w.failure.is_none() {
            for (field, present) in [
                ("episode_duration_ns", w.episode_duration_ns.is_some()),
                ("episode_hash", w.episode_hash.is_some()),
                ("clip_duration_ns", w.clip_duration_ns.is_some()),
                ("clip_hash", w.clip_hash.is_some()),
            ] {
                if !present {
                    return Err(format!(
                        "missing field `{field}` (required unless `failure`)"
                    ));
                }
            }
        }
        Ok(CompletedResearchItem {
            lease_id: w.lease_id,
            revoke_lease: w.revoke_lease,
            research_date: w.research_date,
            episode: w.episode,
            clip: w.clip,
            episode_duration_ns: w.episode_duration_ns.unwrap_or(0),
            episode_hash: w.episode_hash.unwrap_or_default(),
            clip_duration_ns: w.clip_duration_ns.unwrap_or(0),
            clip_hash: w.clip_hash.unwrap_or_default(),
            clip_offsets_ns: w.clip_offsets_ns.unwrap_or_default(),
            clip_match_scores: w.clip_match_scores,
            clip_findability: w
                .clip_findable_from_db
                .map(|from_db| Findability { from_db }),
            failure: w.failure,
        })
    }
}

/// [`CompletedWire`]'s fields, in its order, borrowed from the item: encoding copies nothing.
#[derive(Serialize)]
struct CompletedWireRef<'a> {
    lease_id: &'a Uuid,
    revoke_lease: bool,
    #[serde(serialize_with = "datastore::serialize_time")]
    research_date: DateTime<Utc>,
    episode: &'a EpisodeInfo,
    clip: &'a ClipInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    episode_duration_ns: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    episode_hash: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clip_duration_ns: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clip_hash: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clip_offsets_ns: Option<&'a [i64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clip_match_scores: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clip_findable_from_db: Option<Option<i32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<&'a str>,
}

impl Serialize for CompletedResearchItem {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let failed = self.failure.is_some();
        // A failure says what the researcher knew: nothing of what it did not.
        let known_ns = |ns: i64| (!failed || ns != 0).then_some(ns);
        fn known_hash(failed: bool, h: &str) -> Option<&str> {
            (!failed || !h.is_empty()).then_some(h)
        }
        CompletedWireRef {
            lease_id: &self.lease_id,
            revoke_lease: self.revoke_lease,
            research_date: self.research_date,
            episode: &self.episode,
            clip: &self.clip,
            episode_duration_ns: known_ns(self.episode_duration_ns),
            episode_hash: known_hash(failed, &self.episode_hash),
            clip_duration_ns: known_ns(self.clip_duration_ns),
            clip_hash: known_hash(failed, &self.clip_hash),
            clip_offsets_ns: (!failed).then_some(self.clip_offsets_ns.as_slice()),
            clip_match_scores: self.clip_match_scores.as_deref(),
            clip_findable_from_db: self.clip_findability.map(|f| f.from_db),
            failure: self.failure.as_deref(),
        }
        .serialize(serializer)
    }
}

impl CompletedResearchItem {
    /// The result to record.
    pub fn to_result(&self) -> ResearchResult {
        ResearchResult {
            lease_id: self.lease_id,
            episode: EpisodeKey {
                title: self.episode.title.clone(),
                date_aired: self.episode.date_aired,
            },
            clip_title: self.clip.title.clone(),
            research_date: self.research_date,
            episode_duration_ns: self.episode_duration_ns,
            episode_hash: self.episode_hash.clone(),
            clip_duration_ns: self.clip_duration_ns,
            clip_hash: self.clip_hash.clone(),
            clip_offsets_ns: self.clip_offsets_ns.clone(),
            clip_match_scores: self.clip_match_scores.clone(),
            clip_findability: self.clip_findability,
            failure: self.failure.clone(),
        }
    }
}

/// Why a message is poison. The text goes with the message to the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidMessage {
    /// The body is larger than [`MAX_BODY_BYTES`].
    #[error("body of {0} bytes exceeds the limit of {MAX_BODY_BYTES} bytes")]
    TooLarge(usize),
    /// The body is not UTF-8.
    #[error("body is not valid UTF-8: {0}")]
    NotUtf8(String),
    /// The body is not JSON of the expected shape.
    #[error("body is not a valid {kind}: {detail}")]
    Shape {
        /// The message type expected.
        kind: &'static str,
        /// serde's description, with line and column.
        detail: String,
    },
    /// A field breaks a rule.
    #[error("{kind}.{field}: {problem}")]
    Field {
        /// The message type.
        kind: &'static str,
        /// The field, as a dotted path.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// A message type we take off the bus.
pub trait Message: DeserializeOwned + Serialize {
    /// The type's name in error messages.
    const KIND: &'static str;
    /// Checks the rules serde cannot: non-empty fields, lengths, dates in order.
    fn validate(&self) -> Result<(), InvalidMessage>;
}

/// Decodes and validates a message body.
pub fn decode<M: Message>(body: &[u8]) -> Result<M, InvalidMessage> {
    if body.len() > MAX_BODY_BYTES {
        return Err(InvalidMessage::TooLarge(body.len()));
    }
    let text = std::str::from_utf8(body).map_err(|e| InvalidMessage::NotUtf8(e.to_string()))?;
    check_top_level::<M>(text)?;
    // Decoded once without tracking where it is (a third of the cost); only a body that
    // fails is decoded again, by the same rules, to say where.
    let mut json = serde_json::Deserializer::from_str(text);
    if let Ok(message) = M::deserialize(&mut json).and_then(|m| json.end().map(|()| m)) {
        message.validate()?;
        return Ok(message);
    }
    // The path of the field at fault goes with serde's words: "date_aired: input is out of
    // range" tells a curator what to fix, "at line 1 column 155" alone does not.
    let mut json = serde_json::Deserializer::from_str(text);
    let message: M =
        serde_path_to_error::deserialize(&mut json).map_err(|e| InvalidMessage::Shape {
            kind: M::KIND,
            detail: describe_shape_error(&e),
        })?;
    json.end().map_err(|e| InvalidMessage::Shape {
        kind: M::KIND,
        detail: e.to_string(),
    })?;
    message.validate()?;
    Ok(message)
}

/// A message is one JSON object. serde would also take a struct from an array of its fields
/// in order, which no curator or researcher means; and a byte-order mark deserves its name
/// rather than "expected value at line 1 column 1".
fn check_top_level<M: Message>(text: &str) -> Result<(), InvalidMessage> {
    let shape = |detail: String| InvalidMessage::Shape {
        kind: M::KIND,
        detail,
    };
    if text.starts_with('\u{feff}') {
        return Err(shape(
            "starts with a byte-order mark (U+FEFF): send the JSON without one".into(),
        ));
    }
    let found = match text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .chars()
        .next()
    {
        Some('{') => return Ok(()),
        None => "nothing",
        Some('[') => "an array",
        Some('"') => "a string",
        Some('-' | '0'..='9') => "a number",
        Some('n') => "null",
        Some('t' | 'f') => "a boolean",
        Some(_) => "no JSON value",
    };
    Err(shape(format!("expected a JSON object, found {found}")))
}

/// serde's words for what is wrong, after the path of the field at fault, with what a time
/// field expects when the value is not one.
fn describe_shape_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    let inner = e.inner();
    let at = format!("at line {} column {}", inner.line(), inner.column());
    let words = inner.to_string();
    // serde_json appends the position; it is said once, at the end.
    let words = words
        .strip_suffix(&format!(" {at}"))
        .unwrap_or(&words)
        .to_string();
    let is_time = ["date_aired", "date_curated", "research_date", "expires_at"]
        .iter()
        .any(|f| path.ends_with(f));
    let hint = if is_time && !words.starts_with("missing field") {
        " (expected an RFC 3339 time with its zone, such as \"2026-01-02T03:04:05Z\")"
    } else {
        ""
    };
    if path.is_empty() || path == "." {
        format!("{words}{hint} {at}")
    } else {
        format!("{path}: {words}{hint} {at}")
    }
}

/// Encodes a message as its JSON body.
pub fn encode<M: Message>(message: &M) -> Vec<u8> {
    // Serializing these plain structs cannot fail: no maps with non-string keys, no I/O.
    serde_json::to_vec(message).unwrap_or_default()
}

struct Check {
    kind: &'static str,
    prefix: &'static str,
}

impl Check {
    fn new(kind: &'static str, prefix: &'static str) -> Self {
        Check { kind, prefix }
    }

    fn episode(&self, e: &EpisodeInfo) -> Result<(), InvalidMessage> {
        self.time("date_aired", &e.date_aired)?;
        self.time("initial_date_curated", &e.initial_date_curated)?;
        self.time("last_date_curated", &e.last_date_curated)?;
        self.curated(
            &e.curator_information,
            &e.title,
            &e.description,
            &e.media_uri,
            &e.media_type,
        )
    }

    fn clip(&self, c: &ClipInfo) -> Result<(), InvalidMessage> {
        self.time("initial_date_curated", &c.initial_date_curated)?;
        self.time("last_date_curated", &c.last_date_curated)?;
        self.curated(
            &c.curator_information,
            &c.title,
            &c.description,
            &c.media_uri,
            &c.media_type,
        )
    }

    fn fail(&self, field: &str, problem: impl Into<String>) -> InvalidMessage {
        InvalidMessage::Field {
            kind: self.kind,
            field: format!("{}{}", self.prefix, field),
            problem: problem.into(),
        }
    }

    fn text(
        &self,
        field: &str,
        value: &str,
        max: usize,
        required: bool,
    ) -> Result<(), InvalidMessage> {
        if required && value.trim().is_empty() {
            return Err(self.fail(field, "must not be empty"));
        }
        // Postgres text cannot hold it; no curator means it.
        if value.contains('\0') {
            return Err(self.fail(field, "contains a NUL character (U+0000)"));
        }
        let chars = value.chars().count();
        if chars > max {
            return Err(self.fail(field, format!("{chars} characters, at most {max} allowed")));
        }
        Ok(())
    }

    /// A time every datastore can keep and RFC 3339 can write: years 0001 to 9999.
    fn time(&self, field: &str, value: &DateTime<Utc>) -> Result<(), InvalidMessage> {
        use chrono::Datelike;
        let year = value.year();
        if YEARS.contains(&year) {
            Ok(())
        } else {
            Err(self.fail(field, format!("year {year} is out of range (0001 to 9999)")))
        }
    }

    /// The rules shared by episodes and clips. The contract makes `last_date_curated` before
    /// `initial_date_curated` invalid for *new* items only; the datastore enforces that,
    /// since only it knows whether an item is new.
    fn curated(
        &self,
        curator: &str,
        title: &str,
        description: &str,
        media_uri: &str,
        media_type: &str,
    ) -> Result<(), InvalidMessage> {
        self.text("title", title, MAX_SHORT_TEXT, true)?;
        self.text("curator_information", curator, MAX_SHORT_TEXT, true)?;
        self.text("media_uri", media_uri, MAX_SHORT_TEXT, true)?;
        self.text("media_type", media_type, MAX_SHORT_TEXT, true)?;
        self.text("description", description, MAX_DESCRIPTION, false)
    }
}

impl Message for EpisodeInfo {
    const KIND: &'static str = "EpisodeInfo";
    fn validate(&self) -> Result<(), InvalidMessage> {
        Check::new(Self::KIND, "").episode(self)
    }
}

impl Message for ClipInfo {
    const KIND: &'static str = "ClipInfo";
    fn validate(&self) -> Result<(), InvalidMessage> {
        Check::new(Self::KIND, "").clip(self)
    }
}

impl Message for PendingResearchItem {
    const KIND: &'static str = "PendingResearchItem";
    fn validate(&self) -> Result<(), InvalidMessage> {
        Check::new(Self::KIND, "episode.").episode(&self.episode)?;
        let check = Check::new(Self::KIND, "");
        check.time("lease_expires_at", &self.lease_expires_at)?;
        if self.clips.is_empty() {
            return Err(check.fail("clips", "must not be empty"));
        }
        if self.clips.len() > MAX_CLIPS_PER_ITEM {
            return Err(check.fail("clips", format!("at most {MAX_CLIPS_PER_ITEM} allowed")));
        }
        let clip_check = Check::new(Self::KIND, "clips[].");
        self.clips.iter().try_for_each(|c| clip_check.clip(c))
    }
}

impl Message for EpisodeResearched {
    const KIND: &'static str = "EpisodeResearched";
    fn validate(&self) -> Result<(), InvalidMessage> {
        Check::new(Self::KIND, "episode.").episode(&self.episode)?;
        Check::new(Self::KIND, "").time("completed_at", &self.completed_at)?;
        let clip_check = Check::new(Self::KIND, "matches[].clip.");
        self.matches
            .iter()
            .try_for_each(|m| clip_check.clip(&m.clip))
    }
}

impl Message for CompletedResearchItem {
    const KIND: &'static str = "CompletedResearchItem";
    fn validate(&self) -> Result<(), InvalidMessage> {
        Check::new(Self::KIND, "episode.").episode(&self.episode)?;
        Check::new(Self::KIND, "clip.").clip(&self.clip)?;
        let check = Check::new(Self::KIND, "");
        check.time("research_date", &self.research_date)?;
        check.text("episode_hash", &self.episode_hash, MAX_SHORT_TEXT, false)?;
        check.text("clip_hash", &self.clip_hash, MAX_SHORT_TEXT, false)?;
        for (field, ns) in [
            ("episode_duration_ns", self.episode_duration_ns),
            ("clip_duration_ns", self.clip_duration_ns),
        ] {
            if ns < 0 {
                return Err(check.fail(field, "must not be negative"));
            }
            if ns > MAX_DURATION_NS {
                return Err(check.fail(
                    field,
                    format!("{ns} ns is over 30 days: at most {MAX_DURATION_NS} allowed"),
                ));
            }
        }
        if let Some(reason) = &self.failure {
            check.text("failure", reason, MAX_SHORT_TEXT, true)?;
            if !self.clip_offsets_ns.is_empty() {
                return Err(check.fail("clip_offsets_ns", "must be absent with `failure`"));
            }
            if self.clip_match_scores.is_some() {
                return Err(check.fail("clip_match_scores", "must be absent with `failure`"));
            }
        }
        if let Some(scores) = &self.clip_match_scores {
            check_scores(scores, self.clip_offsets_ns.len())
                .map_err(|problem| check.fail("clip_match_scores", problem))?;
        }
        if let Some(db) = self.clip_findability.and_then(|f| f.from_db) {
            check_findable_from_db(db)
                .map_err(|problem| check.fail("clip_findable_from_db", problem))?;
        }
        if self.clip_offsets_ns.len() > MAX_OFFSETS {
            return Err(check.fail(
                "clip_offsets_ns",
                format!("at most {MAX_OFFSETS} offsets allowed"),
            ));
        }
        if let Some(bad) = self.clip_offsets_ns.iter().find(|&&o| o < 0) {
            return Err(check.fail("clip_offsets_ns", format!("offset {bad} is negative")));
        }
        if let Some(bad) = self
            .clip_offsets_ns
            .iter()
            .find(|&&o| o > self.episode_duration_ns)
        {
            return Err(check.fail(
                "clip_offsets_ns",
                format!(
                    "offset {bad} is beyond the episode's length (episode_duration_ns {})",
                    self.episode_duration_ns
                ),
            ));
        }
        Ok(())
    }
}

/// Checks a findability level (`clip_findable_from_db`): within ±[`Findability::MAX_DB`].
/// The error says what is wrong (the analyser protocol checks answer lines with it too).
pub fn check_findable_from_db(db: i32) -> Result<(), String> {
    let max = Findability::MAX_DB;
    if (-max..=max).contains(&db) {
        Ok(())
    } else {
        Err(format!("{db} dB is not a level from -{max} to {max} dB"))
    }
}

/// Checks match scores against the offsets they go with: as many, each finite and from 0 to 1.
/// The error says what is wrong (the analyser protocol checks answer lines with it too).
pub fn check_scores(scores: &[f64], offsets: usize) -> Result<(), String> {
    if scores.len() != offsets {
        return Err(format!(
            "must give one score per offset, in their order (scores: {}, offsets: {offsets})",
            scores.len()
        ));
    }
    match scores.iter().find(|s| !(0.0..=1.0).contains(*s)) {
        Some(bad) => Err(format!("score {bad} is not a number from 0 to 1")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn episode_json() -> serde_json::Value {
        serde_json::json!({
            "initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
            "curator_information": "tbtl.net", "date_aired": "2025-12-31T00:00:00Z",
            "title": "Episode 4012: The Archive", "description": "…", "media_uri": "https://x/4012.mp3",
            "media_type": "mp3", "priority": 0
        })
    }

    #[test]
    fn decodes_the_contract_example_and_ignores_unknown_fields() {
        let mut v = episode_json();
        v["new_field_from_the_future"] = serde_json::json!(42);
        let e: EpisodeInfo = decode(v.to_string().as_bytes())
            .map_err(|e| e.to_string())
            .unwrap();
        assert_eq!(e.title, "Episode 4012: The Archive");
    }

    #[test]
    fn rejects_missing_and_empty_fields() {
        let mut v = episode_json();
        v.as_object_mut().map(|o| o.remove("date_aired"));
        let err = decode::<EpisodeInfo>(v.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("date_aired"), "{err}");

        let mut v = episode_json();
        v["title"] = serde_json::json!("  ");
        let err = decode::<EpisodeInfo>(v.to_string().as_bytes()).unwrap_err();
        assert_eq!(err.to_string(), "EpisodeInfo.title: must not be empty");
    }

    #[test]
    fn rejects_non_utf8_non_json_and_oversized_bodies() {
        assert!(matches!(
            decode::<ClipInfo>(&[0xff, 0xfe]),
            Err(InvalidMessage::NotUtf8(_))
        ));
        assert!(matches!(
            decode::<ClipInfo>(b"{not json"),
            Err(InvalidMessage::Shape { .. })
        ));
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        assert!(matches!(
            decode::<ClipInfo>(&big),
            Err(InvalidMessage::TooLarge(_))
        ));
    }

    #[test]
    fn rejects_bad_dates_and_negative_offsets() {
        let mut v = episode_json();
        v["date_aired"] = serde_json::json!("yesterday");
        assert!(decode::<EpisodeInfo>(v.to_string().as_bytes()).is_err());

        let item = serde_json::json!({
            "lease_id": "7d0c0b7e-4a55-4d4e-9a43-3c7a2f8d9b10", "revoke_lease": false,
            "research_date": "2026-01-03T00:00:00Z", "episode": episode_json(),
            "clip": { "initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
                      "curator_information": "c", "title": "Clip", "description": "", "media_uri": "m", "media_type": "mp3", "priority": 1 },
            "episode_duration_ns": 1, "episode_hash": "h", "clip_duration_ns": 1, "clip_hash": "h",
            "clip_offsets_ns": [5, -1]
        });
        let err = decode::<CompletedResearchItem>(item.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("clip_offsets_ns"), "{err}");
    }

    fn completed_json() -> serde_json::Value {
        serde_json::json!({
            "lease_id": "7d0c0b7e-4a55-4d4e-9a43-3c7a2f8d9b10", "revoke_lease": true,
            "research_date": "2026-01-03T00:00:00Z", "episode": episode_json(),
            "clip": { "initial_date_curated": "2026-01-02T03:04:05Z", "last_date_curated": "2026-01-02T03:04:05Z",
                      "curator_information": "c", "title": "Clip", "description": "", "media_uri": "m", "media_type": "mp3", "priority": 1 },
            "episode_duration_ns": 10, "episode_hash": "h", "clip_duration_ns": 1, "clip_hash": "h",
            "clip_offsets_ns": [5]
        })
    }

    #[test]
    fn failure_in_place_of_offsets() {
        let mut v = completed_json();
        let obj = v.as_object_mut().unwrap();
        for field in [
            "clip_offsets_ns",
            "episode_duration_ns",
            "episode_hash",
            "clip_duration_ns",
            "clip_hash",
        ] {
            obj.remove(field);
        }
        obj.insert("failure".into(), serde_json::json!("media gone: HTTP 404"));
        let failed: CompletedResearchItem = decode(v.to_string().as_bytes()).unwrap();
        assert_eq!(failed.failure.as_deref(), Some("media gone: HTTP 404"));
        assert!(failed.clip_offsets_ns.is_empty());
        assert_eq!(failed.to_result().failure, failed.failure);
        // Encoded as it came: no offsets, no durations or hashes it did not know.
        let text = String::from_utf8(encode(&failed)).unwrap();
        assert!(
            !text.contains("clip_offsets_ns") && !text.contains("clip_hash"),
            "{text}"
        );
        assert_eq!(
            decode::<CompletedResearchItem>(text.as_bytes()).unwrap(),
            failed
        );

        // Both, an empty reason, or a success without its durations: poison.
        let mut both = completed_json();
        both["failure"] = serde_json::json!("gone");
        let err = decode::<CompletedResearchItem>(both.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
        let mut empty = v.clone();
        empty["failure"] = serde_json::json!("  ");
        let err = decode::<CompletedResearchItem>(empty.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("failure"), "{err}");
        let mut long = v.clone();
        long["failure"] = serde_json::json!("x".repeat(MAX_SHORT_TEXT + 1));
        assert!(decode::<CompletedResearchItem>(long.to_string().as_bytes()).is_err());
        let mut bare = completed_json();
        bare.as_object_mut().unwrap().remove("clip_hash");
        let err = decode::<CompletedResearchItem>(bare.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("clip_hash"), "{err}");

        // A success without offsets is still one without a match, as before.
        let mut none = completed_json();
        none.as_object_mut().unwrap().remove("clip_offsets_ns");
        let ok: CompletedResearchItem = decode(none.to_string().as_bytes()).unwrap();
        assert!(ok.clip_offsets_ns.is_empty() && ok.failure.is_none());
    }

    #[test]
    fn findability_is_optional_a_level_or_null() {
        // Absent: not predicted, and not encoded.
        let plain: CompletedResearchItem = decode(completed_json().to_string().as_bytes()).unwrap();
        assert_eq!(plain.clip_findability, None);
        assert!(!String::from_utf8(encode(&plain))
            .unwrap()
            .contains("clip_findable_from_db"));
        // A level, and null ("not found even at the loudest level tried"): kept apart, encoded
        // as given, passed on to the datastore.
        for (given, from_db) in [
            (serde_json::json!(-6), Some(-6)),
            (serde_json::Value::Null, None),
        ] {
            let mut v = completed_json();
            v["clip_findable_from_db"] = given.clone();
            let item: CompletedResearchItem = decode(v.to_string().as_bytes()).unwrap();
            assert_eq!(item.clip_findability, Some(Findability { from_db }));
            assert_eq!(
                item.to_result().clip_findability,
                Some(Findability { from_db })
            );
            let again: serde_json::Value = serde_json::from_slice(&encode(&item)).unwrap();
            assert_eq!(again["clip_findable_from_db"], given);
        }
        // Not a level: poison, naming the field.
        for bad in [
            serde_json::json!(1000),
            serde_json::json!("loud"),
            serde_json::json!(1.5),
        ] {
            let mut v = completed_json();
            v["clip_findable_from_db"] = bad.clone();
            let err = decode::<CompletedResearchItem>(v.to_string().as_bytes()).unwrap_err();
            assert!(
                err.to_string().contains("clip_findable_from_db"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn match_scores_one_per_offset_from_0_to_1() {
        // Absent: none, and none encoded.
        let plain: CompletedResearchItem = decode(completed_json().to_string().as_bytes()).unwrap();
        assert_eq!(plain.clip_match_scores, None);
        assert!(!String::from_utf8(encode(&plain))
            .unwrap()
            .contains("clip_match_scores"));

        // Present: kept, encoded, and passed on to the datastore.
        let mut v = completed_json();
        v["clip_offsets_ns"] = serde_json::json!([5, 7]);
        v["clip_match_scores"] = serde_json::json!([0.97, 0]);
        let scored: CompletedResearchItem = decode(v.to_string().as_bytes()).unwrap();
        assert_eq!(scored.clip_match_scores, Some(vec![0.97, 0.0]));
        assert_eq!(scored.to_result().clip_match_scores, Some(vec![0.97, 0.0]));
        let text = String::from_utf8(encode(&scored)).unwrap();
        assert!(text.contains(r#""clip_match_scores":[0.97,0.0]"#), "{text}");
        assert_eq!(
            decode::<CompletedResearchItem>(text.as_bytes()).unwrap(),
            scored
        );

        // Poison: out of range, not one per offset, null, not numbers, beside a failure.
        for (scores, reason) in [
            (
                serde_json::json!([1.01, 0.5]),
                "score 1.01 is not a number from 0 to 1",
            ),
            (
                serde_json::json!([0.5, -0.5]),
                "score -0.5 is not a number from 0 to 1",
            ),
            (serde_json::json!([0.5]), "(scores: 1, offsets: 2)"),
            (
                serde_json::json!([0.5, 0.5, 0.5]),
                "(scores: 3, offsets: 2)",
            ),
            (serde_json::json!(null), "invalid type: null"),
            (serde_json::json!(["high", 1]), "invalid type: string"),
        ] {
            let mut bad = v.clone();
            bad["clip_match_scores"] = scores;
            let err = decode::<CompletedResearchItem>(bad.to_string().as_bytes())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("clip_match_scores") && err.contains(reason),
                "{reason}: {err}"
            );
        }
        let mut failed = completed_json();
        failed.as_object_mut().unwrap().remove("clip_offsets_ns");
        failed["failure"] = serde_json::json!("gone");
        failed["clip_match_scores"] = serde_json::json!([]);
        let err = decode::<CompletedResearchItem>(failed.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CompletedResearchItem.clip_match_scores: must be absent with `failure`"
        );

        // Built in code, a score that is not a number is caught too.
        let mut nan = scored.clone();
        nan.clip_match_scores = Some(vec![f64::NAN, 1.0]);
        assert!(nan.validate().is_err());
        let mut inf = scored;
        inf.clip_match_scores = Some(vec![f64::INFINITY, 1.0]);
        assert!(inf.validate().is_err());
    }

    #[test]
    fn round_trips() {
        let e: EpisodeInfo = serde_json::from_value(episode_json()).unwrap();
        let back: EpisodeInfo = decode(&encode(&e)).unwrap();
        assert_eq!(back, e);
    }
}
