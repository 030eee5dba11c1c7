//! The demo's curators: a year of a made-up daily show (one episode each weekday of 2025) and
//! a few dozen clips to look for in it (jingles, catchphrases, sponsors' ads), sent to the bus
//! the way curators would: in batches, some clips late, some episodes curated again, and two
//! poison messages that must be set aside.
//!
//! Everything is derived from a fixed seed, so every demo has the same data and results.

use std::sync::Arc;

use anyhow::Context;
use archivist::messages::{encode, ClipInfo, EpisodeInfo};
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc, Weekday};
use messagebus::Sender;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// The show's name and curator.
const SHOW: &str = "The Daily Archive";
const CURATOR: &str = "dailyarchive.example";
const CLIP_CURATOR: &str = "clips.dailyarchive.example";
/// The episode number of the first episode of 2025.
const FIRST_NUMBER: u32 = 3751;

/// What kind of clip, which decides how often and how long it occurs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClipKind {
    Jingle,
    Catchphrase,
    Ad,
}

/// One clip of the data set: its title, kind, and how often it occurs in an episode (percent).
struct ClipSpec {
    title: &'static str,
    kind: ClipKind,
    percent: u32,
    priority: i32,
}

const fn spec(title: &'static str, kind: ClipKind, percent: u32, priority: i32) -> ClipSpec {
    ClipSpec {
        title,
        kind,
        percent,
        priority,
    }
}

/// The clips. Sponsors want their reports first (priority 2), catchphrases are for the fan
/// wiki (1), jingles are bookkeeping (0).
const CLIPS: &[ClipSpec] = &[
    spec("Intro Jingle", ClipKind::Jingle, 96, 0),
    spec("Outro Theme", ClipKind::Jingle, 90, 0),
    spec("News Break Sting", ClipKind::Jingle, 35, 0),
    spec("Weather Bumper", ClipKind::Jingle, 20, 0),
    spec("Mailbag Fanfare", ClipKind::Jingle, 18, 0),
    spec("Voicemail Bed", ClipKind::Jingle, 25, 0),
    spec("Holiday Jingle", ClipKind::Jingle, 0, 0),
    spec("Anniversary Fanfare", ClipKind::Jingle, 1, 0),
    spec("Sweet Lord!", ClipKind::Catchphrase, 40, 1),
    spec("That's the Show", ClipKind::Catchphrase, 30, 1),
    spec("Hello, Hello, Hello", ClipKind::Catchphrase, 25, 1),
    spec("Let's Get Into It", ClipKind::Catchphrase, 35, 1),
    spec("You Can't Make This Up", ClipKind::Catchphrase, 15, 1),
    spec("Back to You, Producer", ClipKind::Catchphrase, 12, 1),
    spec("Absolutely Not", ClipKind::Catchphrase, 20, 1),
    spec("Say It With Me", ClipKind::Catchphrase, 8, 1),
    spec("Mattress Ad: Spring Sale", ClipKind::Ad, 12, 2),
    spec("VPN Sponsor Read", ClipKind::Ad, 15, 2),
    spec("Meal Kit Ad", ClipKind::Ad, 10, 2),
    spec("Car Insurance Ad", ClipKind::Ad, 9, 2),
    spec("Coffee Subscription Ad", ClipKind::Ad, 11, 2),
    spec("Mobile Carrier Ad", ClipKind::Ad, 7, 2),
    spec("Audiobook Service Ad", ClipKind::Ad, 13, 2),
    spec("Corner Bakery Ad", ClipKind::Ad, 6, 2),
    spec("Razor Ad", ClipKind::Ad, 8, 2),
    spec("Web Hosting Ad", ClipKind::Ad, 10, 2),
    spec("Language App Ad", ClipKind::Ad, 9, 2),
    spec("Credit Union Ad", ClipKind::Ad, 5, 2),
    // Curated late: a new clip makes new research pairs of every episode, researched or not.
    spec("Running Shoe Ad", ClipKind::Ad, 8, 3),
    spec("Pet Food Ad", ClipKind::Ad, 7, 3),
    spec("Online Course Ad", ClipKind::Ad, 6, 3),
    spec("Tax Software Ad", ClipKind::Ad, 9, 3),
];

/// The pause between two batches of ten episodes.
const EPISODE_PACE: std::time::Duration = std::time::Duration::from_millis(30);

/// How many of [`CLIPS`], at the end, are curated after the episodes.
const LATE_CLIPS: usize = 4;

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
    /// Every clip, once; the last [`LATE_CLIPS`] are sent after the episodes.
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

    /// Poison messages sent in all.
    pub(crate) fn poison(&self) -> u64 {
        (self.poison_episodes.len() + self.poison_clips.len()) as u64
    }
}

fn at(date: NaiveDate, hour: u32, minute: u32) -> DateTime<Utc> {
    let naive = date.and_hms_opt(hour, minute, 0).unwrap_or_default();
    Utc.from_utc_datetime(&naive)
}

/// Builds the data set from a fixed seed.
pub(crate) fn data_set() -> DataSet {
    let mut rng = StdRng::seed_from_u64(4012);
    let mut episodes = Vec::new();
    let first = NaiveDate::from_ymd_opt(2025, 1, 1).unwrap_or_default();
    let mut number = FIRST_NUMBER;
    let mut day = first;
    while day.year() == 2025 {
        if !matches!(day.weekday(), Weekday::Sat | Weekday::Sun) {
            episodes.push(episode(&mut rng, number, day));
            number += 1;
        }
        day = day.succ_opt().unwrap_or(day + Duration::days(1));
    }
    let clips = CLIPS.iter().enumerate().map(|(i, s)| clip(i, s)).collect();
    let mut recurated: Vec<EpisodeInfo> = episodes.choose_multiple(&mut rng, 20).cloned().collect();
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
        let mut c = clip(CLIPS.len(), &spec("Retired Jingle", ClipKind::Jingle, 0, 0));
        c.last_date_curated = c.initial_date_curated - Duration::days(30);
        encode(&c)
    }];
    DataSet {
        episodes,
        clips,
        recurated,
        poison_episodes,
        poison_clips,
    }
}

fn episode(rng: &mut StdRng, number: u32, aired: NaiveDate) -> EpisodeInfo {
    let special = aired.month() == 12 && aired.day() >= 22;
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
    // The most recent month is wanted first; the year-end specials most of all.
    let priority = if special {
        5
    } else if aired.month() == 12 {
        1
    } else {
        0
    };
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
        media_uri: format!("https://media.dailyarchive.example/episodes/{number}.mp3"),
        media_type: "mp3".to_string(),
        priority,
    }
}

fn clip(index: usize, s: &ClipSpec) -> ClipInfo {
    let slug: String = s
        .title
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' => Some(c),
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            ' ' | '-' | ':' => Some('-'),
            _ => None,
        })
        .collect();
    let folder = match s.kind {
        ClipKind::Jingle => "jingles",
        ClipKind::Catchphrase => "catchphrases",
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
        media_uri: format!("https://media.dailyarchive.example/clips/{folder}/{slug}.wav"),
        media_type: "wav".to_string(),
        priority: s.priority,
    }
}

/// How a clip behaves in the fake analysis: its kind and how often it occurs in `episode`.
pub(crate) fn clip_profile(clip_title: &str, episode_aired: DateTime<Utc>) -> (ClipKind, u32) {
    let Some(s) = CLIPS.iter().find(|s| s.title == clip_title) else {
        return (ClipKind::Jingle, 0);
    };
    let percent = match s.title {
        // Only in December.
        "Holiday Jingle" if episode_aired.month() == 12 => 85,
        _ => s.percent,
    };
    (s.kind, percent)
}

/// What the curators sent.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sent {
    pub(crate) episodes: u64,
    pub(crate) clips: u64,
    pub(crate) poison: u64,
}

/// Sends the data set: most clips, the episodes in batches, the late clips, the re-curated
/// episodes, and the poison messages among them.
pub(crate) async fn curate(
    data: Arc<DataSet>,
    episodes: Arc<dyn Sender>,
    clips: Arc<dyn Sender>,
) -> anyhow::Result<Sent> {
    let mut sent = Sent::default();
    let early = data.clips.len().saturating_sub(LATE_CLIPS);
    let bodies = |items: &[ClipInfo]| items.iter().map(encode).collect::<Vec<_>>();
    clips
        .send_batch(bodies(&data.clips[..early]))
        .await
        .context("curators: sending clips")?;
    sent.clips += early as u64;
    for (i, chunk) in data.episodes.chunks(10).enumerate() {
        episodes
            .send_batch(chunk.iter().map(encode).collect())
            .await
            .context("curators: sending episodes")?;
        sent.episodes += chunk.len() as u64;
        if i == 5 {
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
        .send_batch(bodies(&data.clips[early..]))
        .await
        .context("curators: sending clips")?;
    sent.clips += (data.clips.len() - early) as u64;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use archivist::messages::{decode, Message};

    #[test]
    fn data_set_is_valid_distinct_and_deterministic() {
        let a = data_set();
        let b = data_set();
        assert_eq!(a.episodes, b.episodes);
        assert_eq!(a.episodes.len(), 261);
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
        assert!(decode::<EpisodeInfo>(&a.poison_episodes[0]).is_err());
        let poison: ClipInfo = decode(&a.poison_clips[0]).unwrap();
        assert!(poison.last_date_curated < poison.initial_date_curated);
    }
}
