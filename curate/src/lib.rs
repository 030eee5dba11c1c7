//! The curators of archivist: they find podcast episodes and audio clips and put them on
//! the bus, each item once, and again when it changes.
//!
//! - The **feed curator** ([`feeds::FeedCurator`]) reads podcast feeds (RSS 2.0 with the
//!   iTunes and Podcasting 2.0 namespaces, Atom, paged feeds) politely over HTTP and sends
//!   one `EpisodeInfo` per audio item to the episodes queue.
//! - The **clip curator** ([`clips::ClipCurator`]) walks files and folders and sends one
//!   `ClipInfo` per audio file, titled by its tags, to the clips queue.
//!
//! Each remembers what it sent in a small state file ([`state`]), so that an unchanged item
//! is not sent again and a changed one is. Every message is checked with the archivists' own
//! rules (`archivist::messages::decode`) before it is sent: an item that would be poison is
//! skipped with its reason instead. Messages are sent before the state records them: a crash
//! in between sends them again, which the archivists' upserts make harmless.
//!
//! # Starting a curator
//!
//! A curator is built from its settings ([`feeds::FeedSettings`], [`clips::ClipSettings`]),
//! which checks them and reads the state file, and then runs one **pass** at a time:
//! `pass(&sink, &token, on_each)` reads every feed (or path) once, sends to the [`Sink`] (a
//! queue of the bus, or a writer for a dry run), calls `on_each` with each feed's (or
//! path's) report as soon as it is done, and returns the pass's report. One bad feed or path
//! never stops the others: its report carries the reason. A [`CurateError`] is a failure of
//! the curator itself (its settings, its state file, its sink).
//!
//! Why a pass rather than an archivist's handle (a task with an errors channel and a done
//! channel): a pass is short and its output is its reports, which the host presents as they
//! come (text lines, a JSON summary, a page); an archivist's output is its side effects and
//! one report at the end. Repeating passes (`archivist curate feed --every`) is a sleep
//! between them and a decision about a failed pass (end the run, or log it and try at the
//! next), both the host's: a host with its own scheduler calls `pass` from it. The
//! cancellation token stops a pass between two feeds or paths, never within one (a fetch in
//! flight is abandoned, and that feed is reported interrupted and not recorded).
//!
//! A long-running feed curator can keep a [`page::Board`] of what its passes did, served by
//! [`page::router`] as a page and as JSON (`/api/curator`). Metrics go through the `metrics`
//! facade (`archivist_curator_*`, per feed); installing a recorder is the host's business.
//!
//! # Layout
//!
//! - `lib.rs`: this page; texts cut to a length, fingerprints, feed addresses shown masked.
//! - `error.rs`: [`CurateError`], [`SendError`].
//! - `sink.rs`: [`Sink`]: the bus (with its retry policy), or a writer for a dry run.
//! - `feeds.rs`: the feed curator: settings, one pass over the feeds, each feed's report.
//! - `fetch.rs`: HTTP, politely: User-Agent, conditional GET, gzip, 304, 429/503 with
//!   Retry-After, timeouts, a size limit, redirects followed by hand so 301/308 are seen,
//!   addresses checked by [`net::address_policy`].
//! - `parse.rs`: a feed's bytes to episodes (feed-rs), with the reason for each item skipped;
//!   HTML reduced to text; media types.
//! - `state.rs`: what was sent, per feed and per file, and the feeds' validators; written
//!   atomically after each feed or folder, so that a crash loses nothing (it re-sends).
//! - `clips.rs`: the clip curator: the folder walk, titles from tags (`analysis::read_tags`),
//!   content hashes, `file://` and base-URL addresses.
//! - `page.rs`: the feed curator's board and its page (`/`, `/curator`, `/api/curator`).
//!
//! # Example
//!
//! A feed of one episode, served here on a loopback port, curated onto the in-memory bus:
//!
//! ```
//! use std::time::Duration;
//!
//! use archivist::messages::{decode, EpisodeInfo};
//! use archivist::RetryPolicy;
//! use curate::feeds::{FeedCurator, FeedSettings};
//! use curate::Sink;
//! use messagebus::{Bus, MemoryBus};
//! use net::address_policy::AddressPolicy;
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use tokio_util::sync::CancellationToken;
//!
//! const RSS: &str = r#"<?xml version="1.0"?>
//! <rss version="2.0"><channel><title>A show</title>
//!   <item>
//!     <title>Episode 1</title>
//!     <guid>episode-1</guid>
//!     <pubDate>Mon, 01 Jan 2024 06:00:00 GMT</pubDate>
//!     <enclosure url="https://media.example.org/episode-1.mp3" type="audio/mpeg" length="1"/>
//!   </item>
//! </channel></rss>"#;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The feed: one answer to one request.
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let feed = format!("http://{}/feed.xml", listener.local_addr()?);
//! tokio::spawn(async move {
//!     let (mut socket, _) = listener.accept().await?;
//!     let mut request = Vec::new();
//!     let mut buf = [0u8; 1024];
//!     while !request.windows(4).any(|w| w == b"\r\n\r\n") {
//!         let n = socket.read(&mut buf).await?;
//!         if n == 0 {
//!             break;
//!         }
//!         request.extend_from_slice(&buf[..n]);
//!     }
//!     let head = format!(
//!         "HTTP/1.1 200 OK\r\ncontent-type: application/rss+xml\r\n\
//!          content-length: {}\r\nconnection: close\r\n\r\n",
//!         RSS.len()
//!     );
//!     socket.write_all(head.as_bytes()).await?;
//!     socket.write_all(RSS.as_bytes()).await?;
//!     socket.shutdown().await
//! });
//!
//! // The bus and its episodes queue.
//! let bus = MemoryBus::default();
//! bus.create_queue("curated_episodes").await?;
//! let sink = Sink::bus(
//!     bus.sender("curated_episodes").await?,
//!     "curated_episodes",
//!     RetryPolicy::none(),
//! );
//!
//! // One pass over the feed; loopback addresses allowed (the feed is on this machine).
//! let state = tempfile::tempdir()?;
//! let mut settings = FeedSettings::new(vec![feed], state.path().join("feeds.json"));
//! settings.addresses = AddressPolicy::new(true, Vec::new());
//! let mut curator = FeedCurator::new(settings)?;
//! let pass = curator
//!     .pass(&sink, &CancellationToken::new(), |feed| {
//!         assert_eq!(feed.error, None);
//!     })
//!     .await?;
//! assert_eq!((pass.sent, pass.failed), (1, 0));
//!
//! // The episode, as the episodes archivist will receive it.
//! let receiver = bus.receiver("curated_episodes").await?;
//! let delivery = receiver
//!     .receive(1, Duration::from_secs(5))
//!     .await?
//!     .into_iter()
//!     .next()
//!     .ok_or("no episode on the queue")?;
//! let episode: EpisodeInfo = decode(delivery.body())?;
//! assert_eq!(episode.title, "Episode 1");
//! assert_eq!(episode.media_uri, "https://media.example.org/episode-1.mp3");
//! delivery.ack().await?;
//!
//! // The state file remembers it: a second pass would not send it again.
//! assert!(curator.state().feeds.values().any(|f| f.items.contains_key("guid:episode-1")));
//! # Ok(())
//! # }
//! ```

pub mod clips;
mod error;
pub mod feeds;
mod fetch;
pub mod page;
mod parse;
mod sink;
pub mod state;

pub use error::{CurateError, SendError};
pub use parse::Skipped;
pub use sink::Sink;

/// `text` cut to at most `max` characters, with an ellipsis as its last when cut; whether it
/// was cut.
pub(crate) fn cut(text: &str, max: usize) -> (String, bool) {
    if text.chars().count() <= max {
        return (text.to_string(), false);
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('…');
    (out, true)
}

/// A fingerprint of what was sent (every field but the curation dates), to tell a changed
/// item from an unchanged one: 64 bits of SHA-256, as hex.
pub(crate) fn fingerprint(parts: &[&str]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    let digest = h.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Query parameters whose value is a secret, by a part of their name.
const SECRET_PARAMETERS: &[&str] = &[
    "token",
    "key",
    "auth",
    "secret",
    "pass",
    "sig",
    "session",
    "credential",
    "private",
];

/// A feed's address as shown (logs, reports, metrics, `curator_information`): the password
/// and the values of query parameters that look like keys masked. Private feeds (a
/// subscriber's own address) carry their key in the URL; only the state file keeps it.
pub(crate) fn shown_url(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url.trim()) else {
        return messagebus::redact_url(url);
    };
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    }
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let lower = k.to_ascii_lowercase();
                let secret = SECRET_PARAMETERS.iter().any(|s| lower.contains(s));
                (
                    k.into_owned(),
                    if secret {
                        "***".to_string()
                    } else {
                        v.into_owned()
                    },
                )
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn secrets_in_feed_addresses_are_masked() {
        assert_eq!(
            shown_url("https://me:pw@x.example/feed?token=abc&id=3&API_KEY=k"),
            "https://me:***@x.example/feed?token=***&id=3&API_KEY=***"
        );
        assert_eq!(
            shown_url("https://x.example/feed.xml"),
            "https://x.example/feed.xml"
        );
    }

    #[test]
    fn cutting() {
        assert_eq!(cut("abc", 3), ("abc".to_string(), false));
        let (c, was) = cut("abcdef", 4);
        assert!(was);
        assert_eq!(c.chars().count(), 4);
        assert!(c.ends_with('…'));
    }
}
