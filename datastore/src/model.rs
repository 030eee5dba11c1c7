use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Deserializes a time as chrono does (an RFC 3339 string, or the wider forms chrono's
/// `FromStr` takes, with the same errors), trying the strict RFC 3339 parser first: it takes
/// what curators and researchers send in a sixth of the time.
pub fn deserialize_time<'de, D>(deserializer: D) -> Result<DateTime<Utc>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Time;
    impl serde::de::Visitor<'_> for Time {
        type Value = DateTime<Utc>;

        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            // chrono's words.
            formatter.write_str("an RFC 3339 formatted date and time string")
        }

        fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Self::Value, E> {
            DateTime::parse_from_rfc3339(value)
                .or_else(|_| value.parse::<DateTime<chrono::FixedOffset>>())
                .map(|t| t.with_timezone(&Utc))
                .map_err(E::custom)
        }
    }
    deserializer.deserialize_str(Time)
}

/// Serializes a time exactly as chrono does (RFC 3339 in UTC with `Z`, the fraction of a
/// second in 3, 6 or 9 digits as it needs, none when whole), without chrono's formatting
/// machinery for the common case: a tenth of the cost. Years outside 0–9999 and leap seconds
/// go to chrono.
pub fn serialize_time<S>(time: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
{
    use chrono::{Datelike, Timelike};
    let (year, nanos) = (time.year(), time.nanosecond());
    let Ok(year) = u32::try_from(year) else {
        return time.serialize(serializer);
    };
    if year > 9999 || nanos >= 1_000_000_000 {
        return time.serialize(serializer);
    }
    let mut buf = [0u8; 30];
    let mut len = 0;
    let mut digits = |value: u32, width: u32| {
        for i in (0..width).rev() {
            // Each digit is below 10.
            buf[len] = b'0' + (value / 10u32.pow(i) % 10) as u8;
            len += 1;
        }
    };
    digits(year, 4);
    digits(time.month(), 2);
    digits(time.day(), 2);
    digits(time.hour(), 2);
    digits(time.minute(), 2);
    digits(time.second(), 2);
    if nanos == 0 {
    } else if nanos % 1_000_000 == 0 {
        digits(nanos / 1_000_000, 3);
    } else if nanos % 1_000 == 0 {
        digits(nanos / 1_000, 6);
    } else {
        digits(nanos, 9);
    }
    // YYYYMMDDhhmmss[fraction] → YYYY-MM-DDThh:mm:ss[.fraction]Z
    let mut text = [0u8; 36];
    let mut at = 0;
    for (i, &b) in buf[..len].iter().enumerate() {
        let separator = match i {
            4 | 6 => Some(b'-'),
            8 => Some(b'T'),
            10 | 12 => Some(b':'),
            14 => Some(b'.'),
            _ => None,
        };
        if let Some(c) = separator {
            text[at] = c;
            at += 1;
        }
        text[at] = b;
        at += 1;
    }
    text[at] = b'Z';
    at += 1;
    match std::str::from_utf8(&text[..at]) {
        Ok(text) => serializer.serialize_str(text),
        Err(_) => time.serialize(serializer),
    }
}

/// A podcast episode as curators describe it. Identified by (`title`, `date_aired`);
/// `media_uri` is unique among episodes. This is also the `EpisodeInfo` bus message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeInfo {
    /// When a curator first saw the episode. Kept from the first upsert; never updated.
    #[serde(
        serialize_with = "serialize_time",
        deserialize_with = "deserialize_time"
    )]
    pub initial_date_curated: DateTime<Utc>,
    /// When a curator last saw the episode.
    #[serde(
        serialize_with = "serialize_time",
        deserialize_with = "deserialize_time"
    )]
    pub last_date_curated: DateTime<Utc>,
    /// Who curated it.
    pub curator_information: String,
    /// When the episode aired. Part of its identity.
    #[serde(
        serialize_with = "serialize_time",
        deserialize_with = "deserialize_time"
    )]
    pub date_aired: DateTime<Utc>,
    /// The episode's title. Part of its identity.
    pub title: String,
    /// Free text.
    pub description: String,
    /// Where the audio is. Unique among episodes.
    pub media_uri: String,
    /// The audio format, as `mp3`.
    pub media_type: String,
    /// Higher is more urgent.
    pub priority: i32,
}

/// An audio clip to look for in episodes. Identified by `title`; `media_uri` is unique among
/// clips. This is also the `ClipInfo` bus message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClipInfo {
    /// When a curator first saw the clip. Kept from the first upsert; never updated.
    #[serde(
        serialize_with = "serialize_time",
        deserialize_with = "deserialize_time"
    )]
    pub initial_date_curated: DateTime<Utc>,
    /// When a curator last saw the clip.
    #[serde(
        serialize_with = "serialize_time",
        deserialize_with = "deserialize_time"
    )]
    pub last_date_curated: DateTime<Utc>,
    /// Who curated it.
    pub curator_information: String,
    /// The clip's title: its identity.
    pub title: String,
    /// Free text.
    pub description: String,
    /// Where the audio is. Unique among clips.
    pub media_uri: String,
    /// The audio format, as `mp3`.
    pub media_type: String,
    /// Higher is more urgent.
    pub priority: i32,
}

/// An episode's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EpisodeKey {
    /// The episode's title.
    pub title: String,
    /// When it aired.
    pub date_aired: DateTime<Utc>,
}

impl EpisodeInfo {
    /// The episode's identity.
    pub fn key(&self) -> EpisodeKey {
        EpisodeKey {
            title: self.title.clone(),
            date_aired: self.date_aired,
        }
    }
}

/// What to lease: at most `max_clips` pairs of one episode, for `duration` from `now`.
#[derive(Debug, Clone, Copy)]
pub struct LeaseRequest {
    /// The most clips in the work item. At least 1.
    pub max_clips: u32,
    /// How long the lease lasts without renewal.
    pub duration: chrono::Duration,
    /// The time the lease starts; leases that expire at or before it are free.
    pub now: DateTime<Utc>,
    /// The id the new lease gets, chosen by the caller before the call so that a call whose
    /// outcome is unknown (the connection broke while committing) can be made again with the
    /// same request: if a lease with this id exists, that lease is the answer and nothing
    /// more is leased (or published). A fresh id for each work item.
    pub lease_id: Uuid,
}

/// A lease on research pairs of one episode: the pending-research work item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The lease's id; researchers send it back with each result.
    pub id: Uuid,
    /// When the lease ends unless renewed.
    pub expires_at: DateTime<Utc>,
    /// The episode to research.
    pub episode: EpisodeInfo,
    /// The clips to look for in it, most urgent first. Never empty.
    pub clips: Vec<ClipInfo>,
    /// How many of these pairs were taken over from expired leases.
    pub reclaimed_pairs: u32,
}

/// What to do with a lease when a result arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseUpdate {
    /// Extend the lease to `now` plus the duration it was created with, if it is still
    /// active: a lease keeps its length whoever renews it.
    Renew {
        /// The current time.
        now: DateTime<Utc>,
    },
    /// The researcher sent its last result for the lease: the lease ends once all its
    /// results are in. The bus does not keep order, so results sent before the last one may
    /// still be on their way: a lease that still holds pairs is only marked revoked and keeps
    /// holding them (no renewal extends it any more). It goes away when its last held pair is
    /// recorded, or its pairs come back when it expires, as any lease's do (work the researcher
    /// skipped). A lease that holds no pairs any more is deleted at once. `true` if the lease
    /// existed and was not revoked yet.
    Revoke,
    /// The work item never reached a researcher (it could not be published): end the lease
    /// now and free all its pairs at once. `true` if the lease existed.
    Cancel,
}

/// How findable a clip is: the level above its background (in dB) from which the reference
/// analyser finds it, predicted from the clip alone (`analysis::findability`) by a researcher
/// that looked for it, and kept on the clip (the latest prediction stands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Findability {
    /// The lowest level tried from which the clip is found (12, 6, 0, -6 or -12 dB with
    /// today's analyser); `None` when it is not found even at the loudest level tried.
    pub from_db: Option<i32>,
}

impl Findability {
    /// The most a level may say (dB either way): more is a researcher's bug, not a level.
    pub const MAX_DB: i32 = 100;
    /// How the datastore keeps "not found even at the loudest level tried".
    pub(crate) const STORED_NOT_FOUND: i32 = 127;

    /// The stored value (`findable_from_db`).
    pub(crate) fn stored(self) -> i32 {
        self.from_db.unwrap_or(Self::STORED_NOT_FOUND)
    }

    /// From the stored value (NULL: not predicted).
    pub(crate) fn from_stored(v: Option<i32>) -> Option<Findability> {
        v.map(|v| Findability {
            from_db: (v != Self::STORED_NOT_FOUND).then_some(v),
        })
    }
}

/// One researched pair, as the researcher reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResearchResult {
    /// The lease the work was done under; unknown or expired leases are fine.
    pub lease_id: Uuid,
    /// The episode researched.
    pub episode: EpisodeKey,
    /// The clip's title.
    pub clip_title: String,
    /// When the research was done.
    pub research_date: DateTime<Utc>,
    /// The episode's length in nanoseconds.
    pub episode_duration_ns: i64,
    /// The researcher's hash of the episode audio.
    pub episode_hash: String,
    /// The clip's length in nanoseconds.
    pub clip_duration_ns: i64,
    /// The researcher's hash of the clip audio.
    pub clip_hash: String,
    /// Where the clip occurs in the episode, in nanoseconds from its start. Empty: nowhere.
    pub clip_offsets_ns: Vec<i64>,
    /// How sure the analyser is of each offset, from 0 to 1, in the order of
    /// `clip_offsets_ns` (as many); `None` when it gave no scores (and on a failure).
    pub clip_match_scores: Option<Vec<f64>>,
    /// How findable the clip is, when the researcher predicted it: kept on the clip.
    pub clip_findability: Option<Findability>,
    /// Set when the pair could not be researched for a reason that will not pass (the media
    /// is gone, it is not audio): why. The pair is recorded as failed, not researched, and is
    /// not leased again until its episode or clip gets another `media_uri` or a person retries
    /// it ([`DataStore::retry_failed`](crate::DataStore::retry_failed)). The offsets are then
    /// empty, and the durations and hashes whatever the researcher knew (0 and `""` if
    /// nothing). A later successful result for the pair replaces the failure.
    pub failure: Option<String>,
}

/// How many failed pairs share one reason (see [`DataStore::failure_reasons`](crate::DataStore::failure_reasons)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReason {
    /// The reason the researcher gave.
    pub reason: String,
    /// Failed pairs with it.
    pub pairs: u64,
}

/// What recording one result did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutcome {
    /// The result was new and is now recorded (a success also when it replaced the pair's
    /// recorded failure).
    Recorded,
    /// The pair already had a result (a success, or a failure and this is one too); nothing
    /// changed.
    Duplicate,
    /// The episode is not in the datastore (the clip may not be either); nothing was
    /// recorded.
    UnknownEpisode,
    /// The episode is known but the clip is not; nothing was recorded.
    UnknownClip,
}

impl RecordOutcome {
    /// Whether the result's pair is not in the datastore: its message is poison.
    pub fn is_unknown(self) -> bool {
        matches!(
            self,
            RecordOutcome::UnknownEpisode | RecordOutcome::UnknownClip
        )
    }
}

/// Counts behind `archivist status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Episodes stored.
    pub episodes: u64,
    /// Clips stored.
    pub clips: u64,
    /// `episodes × clips`: every pair that is to be researched.
    pub research_pairs: u64,
    /// Pairs with a recorded successful result.
    pub researched_pairs: u64,
    /// Pairs whose result has at least one offset.
    pub matched_pairs: u64,
    /// Pairs recorded as failed (see [`ResearchResult::failure`]): not leased until retried.
    #[serde(default)]
    pub failed_pairs: u64,
    /// Leases not yet expired, not revoked, that still hold unresearched pairs: work a
    /// researcher is on.
    pub active_leases: u64,
    /// Revoked leases (the researcher sent its last result) not yet expired that still hold
    /// pairs whose results have not arrived: late results, or clips the researcher skipped
    /// (those come back when the lease expires).
    pub awaiting_late_results: u64,
    /// Leases past their expiry that were neither emptied nor fully taken over yet.
    pub expired_leases: u64,
    /// Pairs under an active lease.
    pub leased_pairs: u64,
}

/// A recorded match: a clip found in an episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Match {
    /// The episode's title.
    pub episode_title: String,
    /// When the episode aired.
    pub episode_date_aired: DateTime<Utc>,
    /// The clip's title.
    pub clip_title: String,
    /// Where the clip occurs, in nanoseconds from the episode's start. Never empty.
    pub clip_offsets_ns: Vec<i64>,
    /// How sure the analyser was of each offset, from 0 to 1, in the order of
    /// `clip_offsets_ns`; absent when it gave no scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_match_scores: Option<Vec<f64>>,
    /// When the research was done.
    pub research_date: DateTime<Utc>,
    /// The SHA-256 of the episode's media the offsets were measured on (the result's
    /// `episode_hash`), where the result named one (64 lowercase hexadecimal digits). With a
    /// media archive it names the kept copy, which `matches` shows; without one, readers
    /// leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode_media_sha256: Option<String>,
}

/// `hash` if it is a SHA-256 as researchers write one (64 lowercase hexadecimal digits), else
/// `None` (a result of an analyser that named no file, or named it otherwise).
pub(crate) fn media_sha256(hash: String) -> Option<String> {
    let ok = hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then_some(hash)
}

/// Where a lease stands, judged at a given time (the states [`Status`] counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    /// Not expired, not revoked: a researcher is on it.
    Active,
    /// Revoked, not expired, still holding pairs whose results have not arrived.
    AwaitingLateResults,
    /// Past its expiry, still holding pairs not yet taken over.
    Expired,
}

impl LeaseState {
    /// Where a lease that holds pairs stands at `now`, as [`Status`] counts it.
    pub(crate) fn at(expires_at: DateTime<Utc>, revoked: bool, now: DateTime<Utc>) -> Self {
        if expires_at <= now {
            LeaseState::Expired
        } else if revoked {
            LeaseState::AwaitingLateResults
        } else {
            LeaseState::Active
        }
    }
}

/// A lease that holds pairs, as the status page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseSummary {
    /// The lease's id (the work item's `lease_id`).
    pub id: Uuid,
    /// The title of the leased episode.
    pub episode_title: String,
    /// When the leased episode aired.
    pub episode_date_aired: DateTime<Utc>,
    /// When the lease was taken.
    pub created_at: DateTime<Utc>,
    /// When it expires (or expired) unless renewed.
    pub expires_at: DateTime<Utc>,
    /// Pairs it still holds.
    pub held_pairs: u64,
    /// Where it stands at the time asked.
    pub state: LeaseState,
}

/// Which matches to list. Empty filters match everything.
#[derive(Debug, Clone, Default)]
pub struct MatchFilter {
    /// Only matches of the clip with this title.
    pub clip_title: Option<String>,
    /// Only matches in episodes with this title.
    pub episode_title: Option<String>,
    /// At most this many, ordered by episode (latest aired first), then clip title.
    pub limit: Option<u64>,
    /// Only matches researched at or after this time (incremental exports).
    pub since: Option<DateTime<Utc>>,
}

/// An episode whose research completed — every clip known at that moment researched or failed
/// — and whose completion has not been announced yet (the contract's `EpisodeResearched`).
///
/// Completions are kept by the transaction that records an episode's last pair, one per
/// episode: an episode reopened by a new clip and completed again before its announcement
/// went out is announced once, as it stands.
/// [`DataStore::completions_announced`](crate::DataStore::completions_announced) lets go of
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodeCompletion {
    /// Which completion this is, to hand back once it is announced.
    pub id: CompletionId,
    /// The episode.
    pub episode: EpisodeInfo,
    /// When its last pair was researched: the latest `research_date` of the batch that
    /// completed it.
    pub completed_at: DateTime<Utc>,
    /// Its pairs with a successful result.
    pub clips_researched: u64,
    /// Of those, the pairs whose clip occurs in it.
    pub clips_matched: u64,
    /// Its pairs recorded as failed.
    pub clips_failed: u64,
    /// Every clip found in it, in the order of its first occurrence.
    pub matches: Vec<ClipMatch>,
}

/// A clip found in an episode, with where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClipMatch {
    /// The clip.
    pub clip: ClipInfo,
    /// Where it occurs, in nanoseconds from the episode's start, ascending. Never empty.
    pub clip_offsets_ns: Vec<i64>,
}

/// Names one [`EpisodeCompletion`] as it was read: announcing it lets go of it unless the
/// episode completed again since (then the newer completion stays to be announced). The
/// default names no completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CompletionId {
    pub(crate) episode_id: i64,
    pub(crate) completions: i64,
}

/// Sorts `offsets` ascending, and `scores` (one per offset, when given) with them.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn sort_scored(offsets: &mut Vec<i64>, scores: &mut Option<Vec<f64>>) {
    match scores {
        Some(s) if s.len() == offsets.len() => {
            if offsets.windows(2).all(|w| w[0] <= w[1]) {
                return;
            }
            let mut pairs: Vec<(i64, f64)> =
                offsets.iter().copied().zip(s.iter().copied()).collect();
            pairs.sort_by_key(|p| p.0);
            (*offsets, *s) = pairs.into_iter().unzip();
        }
        // Scores that do not pair with the offsets (never recorded so) are not shown.
        Some(_) => {
            *scores = None;
            offsets.sort_unstable();
        }
        None => offsets.sort_unstable(),
    }
}

/// Orders completions' matches as they occur: by first offset, then clip title.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn sort_matches(matches: &mut [ClipMatch]) {
    for m in matches.iter_mut() {
        m.clip_offsets_ns.sort_unstable();
    }
    matches.sort_by(|a, b| {
        (a.clip_offsets_ns.first(), &a.clip.title).cmp(&(b.clip_offsets_ns.first(), &b.clip.title))
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use chrono::{DateTime, Duration, TimeZone, Utc};

    use super::{deserialize_time, serialize_time};

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Fast(
        #[serde(
            serialize_with = "serialize_time",
            deserialize_with = "deserialize_time"
        )]
        DateTime<Utc>,
    );

    /// Byte for byte what chrono writes, and what chrono reads, across fractions, years and
    /// the edges of the range the fast path takes.
    #[test]
    fn times_are_written_and_read_as_chrono_does() {
        let mut times = vec![
            Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
            Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(0, 6, 15, 12, 30, 0).unwrap(),
            Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 1, 1, 0, 0, 0).unwrap(),
            DateTime::<Utc>::MIN_UTC,
            DateTime::<Utc>::MAX_UTC,
        ];
        let base = times[0];
        for nanos in [
            1,
            999,
            1_000,
            120_000,
            123_456,
            1_000_000,
            7_000_000,
            123_456_789,
            999_999_999,
        ] {
            times.push(base + Duration::nanoseconds(nanos));
        }
        // A leap second, as chrono keeps it.
        let leap = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_500_000_000)
            .unwrap()
            .and_utc();
        times.push(leap);
        for t in times {
            let ours = serde_json::to_string(&Fast(t)).unwrap();
            assert_eq!(ours, serde_json::to_string(&t).unwrap(), "{t:?}");
            let back: Fast = serde_json::from_str(&ours).unwrap();
            assert_eq!(
                back.0,
                serde_json::from_str::<DateTime<Utc>>(&ours).unwrap()
            );
        }
        for text in [
            "\"2026-01-02T03:04:05Z\"",
            "\"2026-01-02t03:04:05.5z\"",
            "\"2026-01-02 03:04:05+01:00\"",
            "\"2026-01-02T03:04:05.123456789-09:30\"",
            "\"+12026-01-02T03:04:05Z\"",
            "\"2026-01-02T03:04:05\"",
            "\"2026-13-02T03:04:05Z\"",
            "\"yesterday\"",
            "\"\"",
            "5",
            "null",
        ] {
            let ours = serde_json::from_str::<Fast>(text)
                .map(|f| f.0)
                .map_err(|e| e.to_string());
            let chrono = serde_json::from_str::<DateTime<Utc>>(text).map_err(|e| e.to_string());
            assert_eq!(ours, chrono, "{text}");
        }
    }
}
