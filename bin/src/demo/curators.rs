//! The demo's curators: the December of a made-up daily show (one episode each weekday of
//! December 2025, about a minute of audio each) and the clips to look for in it (jingles,
//! catchphrases, a voicemail, sponsors' ads), sent to the bus the way curators would: in
//! batches, some clips late, some episodes curated again, and two poison messages that must be
//! set aside.
//!
//! Everything is derived from a fixed seed, so every demo has the same data, the same audio
//! (`audio.rs` renders it; `clips.rs` lists the clips) and the same truth: where each clip was put in each episode.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use archivist::messages::{encode, ClipInfo, EpisodeInfo};
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc, Weekday};
use messagebus::Sender;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::demo::audio::{self, EpisodePlan};
use crate::demo::clips::{self, spec, ClipKind, ClipSpec, CLIPS, NEW_CLIPS, NEW_CLIP_EPISODES};

/// The show's name and curator.
const SHOW: &str = "The Daily Archive";
const CURATOR: &str = "dailyarchive.example";
const CLIP_CURATOR: &str = "clips.dailyarchive.example";
/// The episode number of the first episode of December 2025.
const FIRST_NUMBER: u32 = 3985;

/// The pause between two batches of episodes.
const EPISODE_PACE: std::time::Duration = std::time::Duration::from_millis(30);
/// Episodes sent in one batch.
const EPISODE_BATCH: usize = 5;

/// How many of [`CLIPS`], at the end, are curated after the episodes.
const LATE_CLIPS: usize = 2;

const ADJECTIVES: &[&str] = &[
    "Unexpected",
    "Lost",
    "Quiet",
    "Great",
    "Accidental",
    "Final",
    "Secret",
    "Second",
    "Midnight",
    "Tiny",
    "Endless",
    "Borrowed",
    "Haunted",
    "Forgotten",
    "Official",
    "Improbable",
    "Last",
    "Local",
    "Tuesday",
    "Unfinished",
];

const NOUNS: &[&str] = &[
    "Archive",
    "Casserole",
    "Ferry",
    "Umbrella",
    "Garage Sale",
    "Time Machine",
    "Library Card",
    "Raccoon",
    "Parking Ticket",
    "Potluck",
    "Voicemail",
    "Lighthouse",
    "Road Trip",
    "Thermostat",
    "Book Club",
    "Spreadsheet",
    "Karaoke Night",
    "Snow Day",
    "Lost and Found",
    "Group Chat",
    "Houseplant",
    "Elevator",
    "Minivan",
    "Pie Contest",
];

/// The data set the demo's curators send.
pub(crate) struct DataSet {
    /// Every episode, once.
    pub(crate) episodes: Vec<EpisodeInfo>,
    /// Each episode's audio: its length and which clips go where (same order as `episodes`).
    pub(crate) plans: Vec<EpisodePlan>,
    /// Every clip, once, in the order of [`CLIPS`]: of the first pass's, the last
    /// [`LATE_CLIPS`] are sent after the episodes; the last [`NEW_CLIPS`] are the new ones,
    /// sent after the first pass ([`curate_new`]).
    pub(crate) clips: Vec<ClipInfo>,
    /// Episodes sent a second time with a later `last_date_curated` (updates, no new pairs).
    pub(crate) recurated: Vec<EpisodeInfo>,
    /// Bodies that must be dead-lettered, per queue.
    pub(crate) poison_episodes: Vec<Vec<u8>>,
    pub(crate) poison_clips: Vec<Vec<u8>>,
}

impl DataSet {
    /// The research pairs the data set makes.
    pub(crate) fn pairs(&self) -> u64 {
        self.episodes.len() as u64 * self.clips.len() as u64
    }

    /// The clips of the first pass (all but the new ones).
    pub(crate) fn first_clips(&self) -> &[ClipInfo] {
        &self.clips[..self.clips.len().saturating_sub(NEW_CLIPS)]
    }

    /// The new clips, curated after the first pass.
    pub(crate) fn new_clips(&self) -> &[ClipInfo] {
        &self.clips[self.first_clips().len()..]
    }

    /// Poison messages sent in all.
    pub(crate) fn poison(&self) -> u64 {
        (self.poison_episodes.len() + self.poison_clips.len()) as u64
    }
}

fn at(date: NaiveDate, hour: u32, minute: u32) -> DateTime<Utc> {
    let naive = date.and_hms_opt(hour, minute, 0).unwrap_or_default();
    Utc.from_utc_datetime(&naive)
}

/// Builds the data set from a fixed seed; its media are (to be) files under `media_dir`, an
/// absolute path (`audio::render` writes them).
pub(crate) fn data_set(media_dir: &Path) -> DataSet {
    let mut rng = StdRng::seed_from_u64(4012);
    let mut episodes = Vec::new();
    let mut plans = Vec::new();
    let first = NaiveDate::from_ymd_opt(2025, 12, 1).unwrap_or_default();
    let mut number = FIRST_NUMBER;
    let mut day = first;
    while day.month() == 12 {
        if !matches!(day.weekday(), Weekday::Sat | Weekday::Sun) {
            episodes.push(episode(&mut rng, number, day, media_dir));
            plans.push(audio::plan(u64::from(number), |clip| {
                occurrences(&mut rng, clip, number, day)
            }));
            number += 1;
        }
        day = day.succ_opt().unwrap_or(day + Duration::days(1));
    }
    let clips = CLIPS
        .iter()
        .enumerate()
        .map(|(i, s)| clip(i, s, media_dir))
        .collect();
    let mut recurated: Vec<EpisodeInfo> = episodes.choose_multiple(&mut rng, 4).cloned().collect();
    for e in &mut recurated {
        e.last_date_curated += Duration::days(rng.gen_range(7..60));
        e.description.push_str(" (Show notes corrected.)");
    }
    let poison_episodes = vec![
        // Cut off mid-message: not JSON.
        br#"{"title": "Episode 4012: The Archive", "date_aired": "2025-12-31T00:00:0"#.to_vec(),
    ];
    let poison_clips = vec![{
        // A new clip last curated before it was first curated: invalid, says the contract.
        let retired = spec("Retired Jingle", ClipKind::Jingle, 3.0, 0, 1, 0);
        let mut c = clip(CLIPS.len(), &retired, media_dir);
        c.last_date_curated = c.initial_date_curated - Duration::days(30);
        encode(&c)
    }];
    DataSet {
        episodes,
        plans,
        clips,
        recurated,
        poison_episodes,
        poison_clips,
    }
}

/// How many times clip `clip` (an index into [`CLIPS`]) occurs in episode `number`, aired on
/// `day`. The new clip's places are fixed, drawing nothing: the rest of the data set is the
/// same as before it was added.
fn occurrences(rng: &mut StdRng, clip: usize, number: u32, day: NaiveDate) -> u32 {
    if clips::is_new(clip) {
        return u32::from(NEW_CLIP_EPISODES.contains(&number));
    }
    let Some(s) = CLIPS.get(clip) else { return 0 };
    let percent = match s.title {
        "Holiday Jingle" if day.day() >= 15 => 85,
        _ => s.percent,
    };
    if rng.gen_range(0..100) < percent {
        rng.gen_range(1..=s.most)
    } else {
        0
    }
}

fn episode(rng: &mut StdRng, number: u32, aired: NaiveDate, media_dir: &Path) -> EpisodeInfo {
    let special = aired.day() >= 22;
    let title = if special {
        format!("Episode {number}: Best of 2025, {}", aired.format("%B %-d"))
    } else {
        let adjective = ADJECTIVES.choose(rng).copied().unwrap_or("Great");
        let noun = NOUNS.choose(rng).copied().unwrap_or("Archive");
        format!("Episode {number}: The {adjective} {noun}")
    };
    let date_aired = at(aired, 0, 0);
    // Curated the morning after airing; about one in ten curated again weeks later.
    let initial = at(aired, 0, 0) + Duration::hours(27) + Duration::minutes(rng.gen_range(0..180));
    let last = if rng.gen_ratio(1, 10) {
        initial + Duration::days(rng.gen_range(1..30))
    } else {
        initial
    };
    // The year-end specials are wanted first.
    let priority = if special { 5 } else { 0 };
    EpisodeInfo {
        initial_date_curated: initial,
        last_date_curated: last,
        curator_information: CURATOR.to_string(),
        date_aired,
        description: format!(
            "{SHOW}, {}. Listener calls, the mailbag, and whatever the producer brought in.",
            aired.format("%A, %B %-d, %Y")
        ),
        title,
        media_uri: file_url(&audio::episode_path(media_dir, u64::from(number))),
        media_type: "wav".to_string(),
        priority,
    }
}

fn clip(index: usize, s: &ClipSpec, media_dir: &Path) -> ClipInfo {
    let folder = match s.kind {
        ClipKind::Intro | ClipKind::Outro | ClipKind::Jingle => "jingles",
        ClipKind::Catchphrase => "catchphrases",
        ClipKind::Voicemail => "voicemails",
        ClipKind::Ad => "ads",
    };
    let curated = at(
        NaiveDate::from_ymd_opt(2026, 1, 5).unwrap_or_default(),
        9,
        0,
    ) + Duration::minutes(index as i64 * 7);
    ClipInfo {
        initial_date_curated: curated,
        last_date_curated: curated,
        curator_information: CLIP_CURATOR.to_string(),
        title: s.title.to_string(),
        description: format!("{SHOW} {folder}: {}", s.title),
        media_uri: file_url(&audio::clip_path(media_dir, s.title)),
        media_type: "wav".to_string(),
        priority: s.priority,
    }
}

/// `path` (absolute) as a `file://` URL, its characters percent-encoded where URLs need it.
fn file_url(path: &Path) -> String {
    match url::Url::from_file_path(path) {
        Ok(u) => u.to_string(),
        Err(()) => format!("file://{}", path.display()),
    }
}

/// What the curators sent.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sent {
    pub(crate) episodes: u64,
    pub(crate) clips: u64,
    pub(crate) poison: u64,
}

/// Sends the first pass's data set: most clips, the episodes in batches, the late clips, the
/// re-curated episodes, and the poison messages among them. The new clips wait
/// ([`curate_new`]).
pub(crate) async fn curate(
    data: Arc<DataSet>,
    episodes: Arc<dyn Sender>,
    clips: Arc<dyn Sender>,
) -> anyhow::Result<Sent> {
    let mut sent = Sent::default();
    let first = data.first_clips();
    let early = first.len().saturating_sub(LATE_CLIPS);
    let bodies = |items: &[ClipInfo]| items.iter().map(encode).collect::<Vec<_>>();
    clips
        .send_batch(bodies(&first[..early]))
        .await
        .context("curators: sending clips")?;
    sent.clips += early as u64;
    for (i, chunk) in data.episodes.chunks(EPISODE_BATCH).enumerate() {
        episodes
            .send_batch(chunk.iter().map(encode).collect())
            .await
            .context("curators: sending episodes")?;
        sent.episodes += chunk.len() as u64;
        if i == 2 {
            episodes
                .send_batch(data.poison_episodes.clone())
                .await
                .context("curators: sending episodes")?;
            sent.poison += data.poison_episodes.len() as u64;
        }
        // Curators find episodes over time, not all at once: research starts on the first
        // while the rest arrive, and the late clips then add pairs to researched episodes.
        tokio::time::sleep(EPISODE_PACE).await;
    }
    clips
        .send_batch(bodies(&first[early..]))
        .await
        .context("curators: sending clips")?;
    sent.clips += (first.len() - early) as u64;
    clips
        .send_batch(data.poison_clips.clone())
        .await
        .context("curators: sending clips")?;
    sent.poison += data.poison_clips.len() as u64;
    episodes
        .send_batch(data.recurated.iter().map(encode).collect())
        .await
        .context("curators: sending episodes")?;
    sent.episodes += data.recurated.len() as u64;
    tracing::info!(
        episodes = sent.episodes,
        clips = sent.clips,
        poison = sent.poison,
        "curators done"
    );
    Ok(sent)
}

/// Sends the new clips: a curator adds them once the archive is researched.
pub(crate) async fn curate_new(data: &DataSet, clips: &dyn Sender) -> anyhow::Result<()> {
    clips
        .send_batch(data.new_clips().iter().map(encode).collect())
        .await
        .context("curators: sending the new clip")?;
    tracing::info!(
        clips = data.new_clips().len(),
        "curators: a new clip, after every pair of the others was researched"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use archivist::messages::{decode, Message};

    #[test]
    fn data_set_is_valid_distinct_and_deterministic() {
        let dir = std::path::Path::new("/tmp/demo-media");
        let a = data_set(dir);
        let b = data_set(dir);
        assert_eq!(a.episodes, b.episodes);
        assert_eq!(a.plans, b.plans);
        assert_eq!(a.episodes.len(), 23);
        assert_eq!(a.plans.len(), a.episodes.len());
        assert_eq!(a.clips.len(), CLIPS.len());
        let mut keys: Vec<_> = a.episodes.iter().map(|e| e.key()).collect();
        keys.sort_by(|x, y| (&x.title, x.date_aired).cmp(&(&y.title, y.date_aired)));
        keys.dedup();
        assert_eq!(keys.len(), a.episodes.len());
        let mut uris: Vec<_> = a.clips.iter().map(|c| &c.media_uri).collect();
        uris.sort();
        uris.dedup();
        assert_eq!(uris.len(), a.clips.len());
        for e in &a.episodes {
            e.validate().unwrap();
            assert!(e.last_date_curated >= e.initial_date_curated);
        }
        for c in &a.clips {
            c.validate().unwrap();
        }
        // The new clip is in the episodes named for it, once each, and in no other.
        assert_eq!(a.new_clips().len(), NEW_CLIPS);
        assert_eq!(a.first_clips().len() + NEW_CLIPS, a.clips.len());
        let new = a.clips.len() - 1;
        for plan in &a.plans {
            let want = usize::from(NEW_CLIP_EPISODES.contains(&(plan.number as u32)));
            assert_eq!(plan.truth()[new].len(), want, "episode {}", plan.number);
        }
        assert!(decode::<EpisodeInfo>(&a.poison_episodes[0]).is_err());
        let poison: ClipInfo = decode(&a.poison_clips[0]).unwrap();
        assert!(poison.last_date_curated < poison.initial_date_curated);
    }
}
