//! `archivist matches`: recorded matches as JSON lines (for scripts), a table (for people) or
//! CSV (for spreadsheets); from the datastore, or with `--server` through the API
//! (`GET /api/v1/matches`, a reader token).

use std::io::{IsTerminal, Write};

use anyhow::Context;
use clap::Args;
use comfy_table::{presets, ContentArrangement, Table};
use datastore::{Match, MatchFilter};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;
use crate::values::{MediaArchiveArgs, RemoteArgs};

/// `matches --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist matches --clip 'Intro Jingle'\n  \
        archivist matches --episode 'Episode 4012: The Archive' --limit 10\n  \
        archivist matches --format table --limit 20             # for reading\n  \
        archivist matches | jq -r '.clip_title' | sort | uniq -c\n  \
        archivist matches --server https://archivist.example --since 2026-01-02   # through the API (ARCHIVIST_TOKEN: a reader token)";

/// Options of `matches`.
#[derive(Debug, Args)]
pub(crate) struct MatchesArgs {
    /// Only matches of the clip with this title
    #[arg(long)]
    pub(crate) clip: Option<String>,
    /// Only matches in episodes with this title
    #[arg(long)]
    pub(crate) episode: Option<String>,
    /// At most this many (latest aired episodes first)
    #[arg(long)]
    pub(crate) limit: Option<u64>,
    /// Only matches researched at or after DATE: RFC 3339 (`2026-01-02T03:04:05Z`) or a day
    /// (`2026-01-02`, from its midnight UTC), for incremental exports
    #[arg(long, value_name = "DATE", value_parser = parse_since)]
    pub(crate) since: Option<chrono::DateTime<chrono::Utc>>,
    /// `json`: one JSON object a line, for scripts; `table`: aligned columns, for people;
    /// `csv`: RFC 4180 with a header row, for spreadsheets
    #[arg(long, value_enum, default_value_t = MatchesFormat::Json)]
    pub(crate) format: MatchesFormat,
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
    /// Each match names the kept copy its offsets were measured on (`episode_media_sha256`,
    /// its SHA-256)
    #[command(flatten)]
    pub(crate) media_archive: MediaArchiveArgs,
}

/// `--since`: an RFC 3339 time, or a day (its midnight UTC).
fn parse_since(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            format!(
                "{text:?} is neither an RFC 3339 time (2026-01-02T03:04:05Z) nor a day \
                 (2026-01-02)"
            )
        })
}

/// How `matches` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MatchesFormat {
    Json,
    Table,
    Csv,
}

/// Prints the matches: one JSON object a line (`episode_title`, `episode_date_aired`,
/// `clip_title`, `clip_offsets_ns`, `clip_match_scores` where the analyser gave them,
/// `research_date`, and with a media archive `episode_media_sha256`), a table with
/// `--format table`, or CSV with `--format csv`.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &MatchesArgs,
) -> anyhow::Result<()> {
    if args.remote.remote()? {
        // The server says which copies it keeps: its lines are printed as they come.
        let matches = remote_matches(args).await?;
        let named = matches.iter().any(|m| m.episode_media_sha256.is_some());
        return print(&matches, args.format, named);
    }
    // Opened to be sure it is the archive meant (a wrong URL is a usage error); the copies'
    // names come from the results themselves.
    let archive = connect::media_archive(&args.media_archive).await?;
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::ReadOnly,
    )
    .await?;
    let mut filter = MatchFilter {
        clip_title: args.clip.clone(),
        episode_title: args.episode.clone(),
        limit: args.limit,
        since: args.since,
    };
    let mut matches = store
        .matches(&filter)
        .await
        .context("cannot read the matches")?;
    if let (true, Some(title)) = (matches.is_empty(), &args.clip) {
        // Nothing for that title: say whether any clip has it, and take the one clip whose
        // title differs only in case.
        if let Some(other) = clip_titled(store.as_ref(), title).await? {
            filter.clip_title = Some(other);
            matches = store
                .matches(&filter)
                .await
                .context("cannot read the matches")?;
        }
    }
    if archive.is_none() {
        for m in &mut matches {
            m.episode_media_sha256 = None;
        }
    }
    print(&matches, args.format, archive.is_some())
}

/// `matches --server`: the matches through the API, with the same filters.
async fn remote_matches(args: &MatchesArgs) -> anyhow::Result<Vec<Match>> {
    let reader = messagebus::api::ApiReader::new(&args.remote.api_config("reader")?)
        .map_err(crate::values::remote_error)?;
    let query = messagebus::api::MatchesQuery {
        clip: args.clip.clone(),
        episode: args.episode.clone(),
        limit: args.limit,
        since: args.since,
    };
    reader
        .matches(&query)
        .await
        .map_err(crate::values::remote_error)
}

/// Prints `matches` in `format`; `copies`: with the column `episode_media_sha256` (CSV).
fn print(matches: &[Match], format: MatchesFormat, copies: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        MatchesFormat::Json => {
            for m in matches {
                serde_json::to_writer(&mut out, m)?;
                writeln!(out)?;
            }
        }
        MatchesFormat::Table => writeln!(out, "{}", table(matches))?,
        MatchesFormat::Csv => write_csv(&mut out, matches, copies)?,
    }
    out.flush()?;
    tracing::debug!(count = matches.len(), "matches listed");
    Ok(())
}

/// Rows of the clip listing read at most, looking for a title.
const TITLE_LOOKUP_ROWS: usize = 5_000;

/// For `--clip TITLE` that found nothing: when no clip has that exact title, says so on
/// standard error, with the titles that differ only in case or share its words; returns the
/// one clip title that differs only in case, to be listed instead. Quiet when the clip exists
/// (it has no matches yet) or the datastore offers no listing.
async fn clip_titled(
    store: &dyn datastore::DataStore,
    title: &str,
) -> anyhow::Result<Option<String>> {
    let Some(browse) = store.browse() else {
        return Ok(None);
    };
    let wanted = title.to_lowercase();
    let words = datastore::search_words(Some(title));
    let mut query = datastore::ListQuery {
        search: (!words.is_empty()).then(|| title.to_string()),
        cursor: None,
        limit: datastore::MAX_PAGE,
    };
    let (mut same_case, mut close) = (Vec::new(), Vec::new());
    let mut read = 0usize;
    loop {
        let page = browse
            .list_clips(&query)
            .await
            .context("cannot look for the clip's title")?;
        read += page.items.len();
        for c in page.items {
            if c.clip.title == title {
                return Ok(None);
            }
            if c.clip.title.to_lowercase() == wanted {
                same_case.push(c.clip.title);
            } else if !words.is_empty() && close.len() < 5 {
                close.push(c.clip.title);
            }
        }
        match page.next_cursor {
            Some(next) if read < TITLE_LOOKUP_ROWS => query.cursor = Some(next),
            Some(_) => return Ok(None),
            None => break,
        }
    }
    if let [only] = same_case.as_slice() {
        tracing::warn!("no clip is titled {title:?}; listing the matches of {only:?}");
        return Ok(same_case.pop());
    }
    let mut similar: Vec<&String> = same_case.iter().chain(&close).collect();
    similar.truncate(5);
    if similar.is_empty() {
        tracing::warn!("no clip is titled {title:?} (titles are matched exactly)");
    } else {
        let similar: Vec<String> = similar.iter().map(|t| format!("{t:?}")).collect();
        tracing::warn!(
            "no clip is titled {title:?}; clips with similar titles: {}",
            similar.join(", ")
        );
    }
    Ok(None)
}

/// The header of `--format csv`: the JSON lines' fields, in their order, the scores after
/// them (a column added after the others: readers by position keep theirs), and with a media
/// archive `episode_media_sha256` last.
const CSV_HEADER: [&str; 6] = [
    "episode_title",
    "episode_date_aired",
    "clip_title",
    "clip_offsets_ns",
    "research_date",
    "clip_match_scores",
];

/// The matches as CSV (RFC 4180: fields quoted where needed, quotes doubled, CRLF line ends)
/// with a header row, also when there is no match. Titles are written exactly as stored, so
/// that the file reads back to the same values; `clip_offsets_ns` holds the offsets separated
/// by spaces, `clip_match_scores` their scores in the same order (empty when the analyser gave
/// none); times are RFC 3339 in UTC. With `copies`, a last column `episode_media_sha256`
/// (empty where the result named no copy).
fn write_csv(out: &mut impl Write, matches: &[Match], copies: bool) -> anyhow::Result<()> {
    let mut csv = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(out);
    let mut header = CSV_HEADER.to_vec();
    if copies {
        header.push("episode_media_sha256");
    }
    csv.write_record(&header)?;
    for m in matches {
        let offsets = m
            .clip_offsets_ns
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        let scores = m
            .clip_match_scores
            .iter()
            .flatten()
            .map(f64::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        let (aired, researched) = (rfc3339(m.episode_date_aired), rfc3339(m.research_date));
        let mut record = vec![
            m.episode_title.as_str(),
            &aired,
            m.clip_title.as_str(),
            &offsets,
            &researched,
            &scores,
        ];
        if copies {
            record.push(m.episode_media_sha256.as_deref().unwrap_or(""));
        }
        csv.write_record(&record)?;
    }
    csv.flush()?;
    Ok(())
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// The matches as a table: aired date, episode, clip, and where the clip occurs (each offset
/// with its score, where the analyser gave one).
fn table(matches: &[Match]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(presets::ASCII_BORDERS_ONLY_CONDENSED)
        .set_header(["aired", "episode", "clip", "at"]);
    // Wrapped to the terminal's width when there is one; a pipe gets whole lines.
    if std::io::stdout().is_terminal() {
        table.set_content_arrangement(ContentArrangement::Dynamic);
    }
    for m in matches {
        table.add_row([
            m.episode_date_aired.format("%Y-%m-%d").to_string(),
            printable(&m.episode_title),
            printable(&m.clip_title),
            occurrences(&m.clip_offsets_ns, m.clip_match_scores.as_deref()),
        ]);
    }
    table
}

/// A title as it can be shown on a terminal: control characters (which curators may send, and
/// which could move the cursor or change colours) and the explicit direction overrides (which
/// could reorder the rest of the line) are written as escapes; right-to-left script stays.
fn printable(title: &str) -> String {
    title
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Offsets as `H:MM:SS.mmm`, each followed by its score when there are scores (one per offset:
/// `0:01:02.345 (0.97)`), separated by commas.
fn occurrences(offsets_ns: &[i64], scores: Option<&[f64]>) -> String {
    let scores = scores.filter(|s| s.len() == offsets_ns.len());
    offsets_ns
        .iter()
        .enumerate()
        .map(|(i, &ns)| match scores.and_then(|s| s.get(i)) {
            Some(&s) => format!("{} ({})", offset(ns), score(s)),
            None => offset(ns),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A score as people read it: two decimals.
pub(crate) fn score(s: f64) -> String {
    format!("{s:.2}")
}

/// An offset in nanoseconds as `H:MM:SS.mmm`.
fn offset(ns: i64) -> String {
    let ms = ns.max(0) / 1_000_000;
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, ms) = (rest / 1000, rest % 1000);
    format!("{h}:{m:02}:{s:02}.{ms:03}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_read_as_hours_minutes_seconds() {
        assert_eq!(offset(0), "0:00:00.000");
        assert_eq!(offset(61_500_000_000), "0:01:01.500");
        assert_eq!(offset(3_723_004_000_000), "1:02:03.004");
    }

    #[test]
    fn scores_follow_their_offsets() {
        let at = [1_000_000_000, 62_345_000_000];
        assert_eq!(occurrences(&at, None), "0:00:01.000, 0:01:02.345");
        assert_eq!(
            occurrences(&at, Some(&[0.5, 0.971])),
            "0:00:01.000 (0.50), 0:01:02.345 (0.97)"
        );
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(printable("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
        assert_eq!(
            printable("Épisode \u{2067}عربي\u{2069} 🎙"),
            "Épisode \\u{2067}عربي\\u{2069} 🎙"
        );
    }
}
