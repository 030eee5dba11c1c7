//! A feed's bytes to episodes: feed-rs reads RSS 0.9x/1.0/2.0 (the iTunes namespace
//! included; Podcasting 2.0 elements are ignored, harmlessly) and Atom; this module picks each
//! item's audio enclosure, its publication date, its text, and says why any item is skipped.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use feed_rs::model::{Entry, Feed};
use url::Url;

/// An episode read from a feed: the fields the feed gives (the curator adds the rest).
#[derive(Debug, Clone)]
pub(crate) struct FeedItem {
    /// What identifies the item within its feed across polls: `guid:…`, else `url:…` (the
    /// enclosure without tracking parameters), else `title:…` with the date.
    pub(crate) key: String,
    pub(crate) title: String,
    pub(crate) date_aired: DateTime<Utc>,
    pub(crate) description: String,
    pub(crate) media_uri: String,
    pub(crate) media_type: String,
}

/// An item (or a file) left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// The item as a person finds it: in a feed, its position (1 = first) and title or id;
    /// among clips, the file's path.
    pub item: String,
    /// Why it was left out, in words.
    pub reason: String,
}

/// What a feed gave.
#[derive(Debug, Default)]
pub(crate) struct ParsedFeed {
    /// The feed's own title, if it has one.
    pub(crate) title: Option<String>,
    /// Items in the feed, all of them.
    pub(crate) found: usize,
    /// The audio items to curate, newest first, at most `max_items`.
    pub(crate) items: Vec<FeedItem>,
    pub(crate) skipped: Vec<Skipped>,
    /// The next page of a paged feed (RFC 5005: `<atom:link rel="next" href="…"/>`).
    pub(crate) next_page: Option<Url>,
}

/// The audio formats we know, by file extension, with the `media_type` sent.
const AUDIO_EXTENSIONS: &[(&str, &str)] = &[
    ("mp3", "mp3"),
    ("m4a", "m4a"),
    ("m4b", "m4a"),
    ("mp4a", "m4a"),
    ("aac", "aac"),
    ("ogg", "ogg"),
    ("oga", "ogg"),
    ("flac", "flac"),
    ("wav", "wav"),
];

/// Why Opus is not curated: the symphonia build the analyser uses (the workspace's features:
/// mp3, aac, isomp4, ogg, vorbis, flac, wav, pcm) has no Opus decoder, so every pair of an Opus
/// episode would be failed research. Skipped with this reason instead, so the user sees it at once.
pub(crate) const OPUS_REASON: &str =
    "Opus audio: the reference analyser cannot decode Opus, so it could not be researched \
     (offer an MP3, AAC, Ogg Vorbis, FLAC or WAV enclosure)";

/// Whether an enclosure is Opus, by its MIME type (`audio/opus`, `audio/ogg; codecs=opus`) or
/// its file extension.
fn is_opus(mime: Option<&str>, path: &str) -> bool {
    let by_mime = mime.is_some_and(|m| {
        let m = m.to_ascii_lowercase();
        m.starts_with("audio/opus") || (m.starts_with("audio/ogg") && m.contains("opus"))
    });
    let name = path.rsplit('/').next().unwrap_or(path);
    let by_ext = name
        .rsplit_once('.')
        .is_some_and(|(_, e)| e.eq_ignore_ascii_case("opus"));
    by_mime || by_ext
}

/// What identifies an enclosure: its address without tracking parameters (a feed host that
/// rotates `utm_*` per item still serves one file).
pub(crate) fn enclosure_identity(uri: &str) -> String {
    Url::parse(uri).map_or_else(|_| uri.to_string(), |u| without_tracking(&u))
}

/// The `media_type` of an audio file named `path` (by its extension), if it is one we know.
pub(crate) fn media_type_of_extension(path: &str) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let (_, ext) = name.rsplit_once('.')?;
    let ext = ext.to_ascii_lowercase();
    AUDIO_EXTENSIONS
        .iter()
        .find(|(e, _)| *e == ext)
        .map(|(_, t)| *t)
}

/// The `media_type` of a MIME type, if it is audio: `audio/mpeg` is `mp3`, and so on; an
/// audio type we do not know is sent as its subtype.
fn media_type_of_mime(mime: &str) -> Option<String> {
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let sub = essence.strip_prefix("audio/")?;
    let known = match sub {
        "mpeg" | "mp3" | "mpeg3" | "x-mpeg" | "x-mp3" | "mpa" | "x-mpeg-3" => "mp3",
        "mp4" | "x-m4a" | "m4a" | "x-m4b" | "mp4a-latm" => "m4a",
        "aac" | "aacp" | "x-aac" => "aac",
        "ogg" | "vorbis" | "x-vorbis+ogg" | "x-ogg" => "ogg",
        "flac" | "x-flac" => "flac",
        "wav" | "x-wav" | "wave" | "vnd.wave" => "wav",
        other => other,
    };
    Some(known.to_string())
}

/// Parses `bytes` (page `page` of a feed, fetched from `base`; 1 for a feed that is not
/// paged) into at most `max_items` episodes.
pub(crate) fn parse(
    bytes: &[u8],
    base: &Url,
    max_items: usize,
    page: usize,
) -> Result<ParsedFeed, String> {
    if let Some(why) = not_a_feed(bytes) {
        return Err(why);
    }
    // An empty id marks an item without one (feed-rs would otherwise make one up from its
    // link, or a random UUID: not stable across polls).
    let parser = feed_rs::parser::Builder::new()
        .base_uri(Some(base.as_str()))
        .id_generator(|_, _, _| String::new())
        .build();
    let feed = parser.parse(bytes).map_err(|e| match e {
        feed_rs::parser::ParseFeedError::ParseError(kind) => {
            format!("not a feed: {kind} (expected RSS or Atom)")
        }
        other => format!("not a feed: {other}"),
    })?;
    let next_page = feed
        .links
        .iter()
        .find(|l| l.rel.as_deref() == Some("next"))
        .and_then(|l| base.join(l.href.trim()).ok())
        .filter(|u| matches!(u.scheme(), "http" | "https"));
    let mut out = items_of(feed, page);
    out.next_page = next_page;
    cap(&mut out, max_items);
    Ok(out)
}

/// A clear word for content that is plainly not a feed, before feed-rs says "no root".
fn not_a_feed(bytes: &[u8]) -> Option<String> {
    let head: String = String::from_utf8_lossy(&bytes[..bytes.len().min(2048)])
        .trim_start_matches('\u{feff}')
        .trim_start()
        .chars()
        .take(512)
        .collect::<String>()
        .to_ascii_lowercase();
    if head.is_empty() {
        return Some("not a feed: the answer is empty".to_string());
    }
    if head.starts_with("<!doctype html") || head.starts_with("<html") {
        let hint = alternate_link(bytes)
            .map(|href| format!("; the page names a feed at {href}"))
            .unwrap_or_default();
        return Some(format!(
            "not a feed: the address serves an HTML page (give the feed's own address{hint})"
        ));
    }
    if !head.starts_with('<') && !head.starts_with('{') {
        return Some("not a feed: the answer is not XML".to_string());
    }
    None
}

/// The feed an HTML page names in `<link rel="alternate" type="application/rss+xml" href=…>`.
fn alternate_link(bytes: &[u8]) -> Option<String> {
    let page = String::from_utf8_lossy(&bytes[..bytes.len().min(256 * 1024)]);
    for tag in page.split("<link").skip(1) {
        let tag = tag.split('>').next().unwrap_or("");
        let lower = tag.to_ascii_lowercase();
        if lower.contains("alternate")
            && (lower.contains("application/rss+xml") || lower.contains("application/atom+xml"))
        {
            let at = lower.find("href=")?;
            let rest = &tag[at + 5..];
            let quote = rest.chars().next()?;
            let value = if quote == '"' || quote == '\'' {
                rest[1..].split(quote).next()?
            } else {
                rest.split_whitespace().next()?
            };
            return Some(value.to_string());
        }
    }
    None
}

fn items_of(feed: Feed, page: usize) -> ParsedFeed {
    let mut out = ParsedFeed {
        title: feed
            .title
            .as_ref()
            .map(|t| html_to_text(&t.content))
            .filter(|t| !t.is_empty()),
        found: feed.entries.len(),
        ..ParsedFeed::default()
    };
    // The first of each is kept: feeds list the newest first, and a repeat is a mistake.
    let mut keys: HashMap<String, usize> = HashMap::new();
    let mut uris: HashMap<String, usize> = HashMap::new();
    let mut identities: HashMap<(String, DateTime<Utc>), usize> = HashMap::new();
    for (i, entry) in feed.entries.into_iter().enumerate() {
        let n = i + 1;
        let title = entry
            .title
            .as_ref()
            .map(|t| html_to_text(&t.content))
            .filter(|t| !t.is_empty());
        let at = if page > 1 {
            format!("page {page} item {n}")
        } else {
            format!("item {n}")
        };
        let name = match (&title, entry.id.is_empty()) {
            (Some(t), _) => format!("{at} {:?}", crate::cut(t, 80).0),
            (None, false) => format!("{at} (guid {:?})", entry.id),
            (None, true) => at,
        };
        let mut skip = |reason: String| {
            out.skipped.push(Skipped {
                item: name.clone(),
                reason,
            })
        };
        let Some((media_uri, media_type)) = audio_enclosure(&entry) else {
            skip(no_audio_reason(&entry));
            continue;
        };
        let Some(date_aired) = entry.published.or(entry.updated) else {
            skip("no publication date (pubDate / published missing, or in a format that cannot be read)".into());
            continue;
        };
        let Some(title) = title else {
            skip("no title".into());
            continue;
        };
        let key = if !entry.id.is_empty() {
            format!("guid:{}", entry.id)
        } else if let Ok(u) = Url::parse(&media_uri) {
            format!("url:{}", without_tracking(&u))
        } else {
            format!("title:{title}\u{1f}{}", date_aired.to_rfc3339())
        };
        if let Some(first) = keys.get(&key) {
            let what = if key.starts_with("guid:") {
                "GUID"
            } else {
                "enclosure"
            };
            skip(format!(
                "duplicate {what} (the same as item {first}'s): only the first is curated"
            ));
            continue;
        }
        let enclosure = enclosure_identity(&media_uri);
        if let Some(first) = uris.get(&enclosure) {
            skip(format!(
                "the same enclosure as item {first}: only the first is curated"
            ));
            continue;
        }
        if let Some(first) = identities.get(&(title.clone(), date_aired)) {
            skip(format!(
                "the same title and date as item {first} (episodes are identified by both): only the first is curated"
            ));
            continue;
        }
        keys.insert(key.clone(), n);
        uris.insert(enclosure, n);
        identities.insert((title.clone(), date_aired), n);
        out.items.push(FeedItem {
            key,
            title,
            date_aired,
            description: description(&entry),
            media_uri,
            media_type,
        });
    }
    out
}

/// Keeps the newest `max_items` items, counting the rest as skipped.
pub(crate) fn cap(out: &mut ParsedFeed, max_items: usize) {
    if out.items.len() > max_items {
        // Newest first; a stable sort keeps the feed's order among equal dates.
        out.items.sort_by_key(|i| std::cmp::Reverse(i.date_aired));
        let left_out = out.items.len() - max_items;
        out.items.truncate(max_items);
        out.skipped.push(Skipped {
            item: format!("{left_out} items"),
            reason: format!("older than the newest {max_items} (--max-items)"),
        });
    }
}

/// The item's first audio enclosure: its address and `media_type`. An enclosure counts as
/// audio when its MIME type is `audio/…`, or when it has none (or a generic one) and its
/// file name has an audio extension.
fn audio_enclosure(entry: &Entry) -> Option<(String, String)> {
    let mut candidates: Vec<(String, Option<String>)> = Vec::new();
    for media in &entry.media {
        for content in &media.content {
            if let Some(url) = &content.url {
                candidates.push((
                    url.to_string(),
                    content.content_type.as_ref().map(|m| m.to_string()),
                ));
            }
        }
    }
    // Atom: <link rel="enclosure" type="audio/mpeg" href="…"/>.
    for link in &entry.links {
        if link.rel.as_deref() == Some("enclosure") {
            candidates.push((link.href.clone(), link.media_type.clone()));
        }
    }
    for (uri, mime) in candidates {
        if !(uri.starts_with("http://") || uri.starts_with("https://")) {
            continue;
        }
        let path = Url::parse(&uri)
            .map(|u| u.path().to_string())
            .unwrap_or_default();
        // An Opus alternative is passed over: another enclosure of the item may be one we read.
        if is_opus(mime.as_deref(), &path) {
            continue;
        }
        let by_mime = mime.as_deref().and_then(media_type_of_mime);
        let generic = mime.as_deref().is_none_or(|m| {
            let m = m.to_ascii_lowercase();
            m.starts_with("application/octet-stream") || m.trim().is_empty()
        });
        let by_ext = media_type_of_extension(&path).map(str::to_string);
        match (by_mime, generic, by_ext) {
            // An audio MIME type; the extension names the format better when it is known.
            (Some(m), _, ext) => return Some((uri, ext.unwrap_or(m))),
            (None, true, Some(ext)) => return Some((uri, ext)),
            _ => {}
        }
    }
    None
}

/// Why an item has no audio enclosure, naming what it has instead.
fn no_audio_reason(entry: &Entry) -> String {
    let opus = entry
        .media
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|c| {
            let url = c.url.as_ref()?;
            Some((
                c.content_type.as_ref().map(|t| t.to_string()),
                url.path().to_string(),
            ))
        })
        .chain(
            entry
                .links
                .iter()
                .filter(|l| l.rel.as_deref() == Some("enclosure"))
                .map(|l| {
                    let path = Url::parse(&l.href).map(|u| u.path().to_string());
                    (
                        l.media_type.clone(),
                        path.unwrap_or_else(|_| l.href.clone()),
                    )
                }),
        )
        .any(|(mime, path)| is_opus(mime.as_deref(), &path));
    if opus {
        return OPUS_REASON.to_string();
    }
    // An enclosure the researchers are not to fetch (file://, ftp://…): its scheme says why,
    // not its type.
    let schemes: BTreeSet<String> = entry
        .media
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|c| c.url.as_ref().map(|u| u.scheme().to_string()))
        .chain(
            entry
                .links
                .iter()
                .filter(|l| l.rel.as_deref() == Some("enclosure"))
                .map(|l| match Url::parse(l.href.trim()) {
                    Ok(u) => u.scheme().to_string(),
                    Err(_) => String::new(),
                }),
        )
        .filter(|s| s != "http" && s != "https")
        .collect();
    if !schemes.is_empty() {
        let named: Vec<String> = schemes
            .iter()
            .map(|s| {
                if s.is_empty() {
                    "not a URL".to_string()
                } else {
                    format!("{s}://")
                }
            })
            .collect();
        return format!(
            "no audio enclosure: its address is not http(s) ({})",
            named.join(", ")
        );
    }
    let types: Vec<String> = entry
        .media
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|c| c.content_type.as_ref().map(|t| t.to_string()))
        .chain(
            entry
                .links
                .iter()
                .filter(|l| l.rel.as_deref() == Some("enclosure"))
                .filter_map(|l| l.media_type.clone()),
        )
        .collect();
    if types.is_empty() {
        "no enclosure".to_string()
    } else {
        format!("no audio enclosure (only {})", types.join(", "))
    }
}

/// The item's description as text: its summary (RSS description), else its content
/// (content:encoded), else its iTunes summary.
fn description(entry: &Entry) -> String {
    let html = entry
        .summary
        .as_ref()
        .map(|t| t.content.clone())
        .filter(|t| !t.trim().is_empty())
        .or_else(|| entry.content.as_ref().and_then(|c| c.body.clone()))
        .filter(|t| !t.trim().is_empty())
        .or_else(|| {
            entry
                .media
                .iter()
                .find_map(|m| m.description.as_ref().map(|d| d.content.clone()))
        })
        .unwrap_or_default();
    html_to_text(&html)
}

/// Query parameters that only count listeners; an enclosure's address without them
/// identifies the episode across polls even when a feed host rotates them.
fn is_tracking_parameter(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with("utm_")
        || matches!(
            n.as_str(),
            "fbclid"
                | "gclid"
                | "mc_cid"
                | "mc_eid"
                | "ref"
                | "source"
                | "src"
                | "from"
                | "aid"
                | "awcollectionid"
                | "awepisodeid"
                | "updated"
                | "_"
        )
}

/// `url` without tracking parameters and fragment.
pub(crate) fn without_tracking(url: &Url) -> String {
    let mut u = url.clone();
    u.set_fragment(None);
    let kept: Vec<(String, String)> = u
        .query_pairs()
        .filter(|(k, _)| !is_tracking_parameter(k))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if kept.is_empty() {
        u.set_query(None);
    } else {
        u.query_pairs_mut().clear().extend_pairs(kept);
    }
    u.to_string()
}

/// HTML reduced to text: tags dropped (script and style with their content), block ends as
/// line breaks, entities decoded, runs of blanks collapsed. Text without markup comes back
/// trimmed but otherwise as it was.
pub(crate) fn html_to_text(html: &str) -> String {
    let mut text = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        text.push_str(&rest[..lt]);
        let after = &rest[lt + 1..];
        // A '<' that starts no tag ("a < b", "<3") is text.
        let starts_tag = after
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '!' || c == '?');
        if !starts_tag {
            text.push('<');
            rest = after;
            continue;
        }
        if let Some(comment) = after.strip_prefix("!--") {
            rest = comment.find("-->").map_or("", |end| &comment[end + 3..]);
            continue;
        }
        let Some(gt) = after.find('>') else {
            // An unclosed tag: the rest is not text anyone wrote for reading.
            rest = "";
            break;
        };
        let tag = &after[..gt];
        rest = &after[gt + 1..];
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if (name == "script" || name == "style") && !tag.starts_with('/') {
            let close = format!("</{name}");
            let lower = rest.to_ascii_lowercase();
            rest = lower
                .find(&close)
                .and_then(|at| rest[at..].find('>').map(|gt| &rest[at + gt + 1..]))
                .unwrap_or("");
            continue;
        }
        match name.as_str() {
            "br" | "p" | "div" | "li" | "ul" | "ol" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6"
            | "tr" | "blockquote" | "section" | "article" | "hr" | "table" => text.push('\n'),
            "td" | "th" => text.push(' '),
            _ => {}
        }
    }
    text.push_str(rest);
    let decoded = decode_entities(&text);
    // Blanks collapsed within lines; at most one empty line between paragraphs.
    let mut out = String::with_capacity(decoded.len());
    let mut empty_run = 0;
    for line in decoded.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            empty_run += 1;
            if empty_run == 1 && !out.is_empty() {
                out.push('\n');
            }
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        empty_run = 0;
        out.push_str(&line);
    }
    out.trim().to_string()
}

/// Decodes the HTML entities descriptions use: numeric ones and the common named ones.
fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let end = after.find(';').filter(|&e| e <= 10);
        let decoded = end.and_then(|e| {
            let name = &after[..e];
            let c = if let Some(num) = name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
                u32::from_str_radix(num, 16).ok().and_then(char::from_u32)
            } else if let Some(num) = name.strip_prefix('#') {
                num.parse::<u32>().ok().and_then(char::from_u32)
            } else {
                Some(match name {
                    "amp" => '&',
                    "lt" => '<',
                    "gt" => '>',
                    "quot" => '"',
                    "apos" => '\'',
                    "nbsp" => ' ',
                    "hellip" => '…',
                    "mdash" => '—',
                    "ndash" => '–',
                    "lsquo" => '‘',
                    "rsquo" => '’',
                    "ldquo" => '“',
                    "rdquo" => '”',
                    "copy" => '©',
                    "reg" => '®',
                    "trade" => '™',
                    "eacute" => 'é',
                    "egrave" => 'è',
                    "uuml" => 'ü',
                    "ouml" => 'ö',
                    "auml" => 'ä',
                    _ => return None,
                })
            };
            c.filter(|c| *c != '\0').map(|c| (c, e))
        });
        match decoded {
            Some((c, e)) => {
                out.push(c);
                rest = &after[e + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn html_becomes_text() {
        assert_eq!(
            html_to_text(
                "<p>Hello <b>world</b> &amp; friends</p><p>Second&nbsp;line<br/>third</p>"
            ),
            "Hello world & friends\n\nSecond line\nthird"
        );
        assert_eq!(html_to_text("a < b and <3"), "a < b and <3");
        assert_eq!(
            html_to_text("x<script>alert('<p>')</script>y<!-- c -->z"),
            "xyz"
        );
        assert_eq!(html_to_text("caf&#233; &#x2019; &bogus;"), "café ’ &bogus;");
        assert_eq!(html_to_text("  plain text  "), "plain text");
    }

    #[test]
    fn media_types() {
        assert_eq!(media_type_of_mime("audio/mpeg").as_deref(), Some("mp3"));
        assert_eq!(media_type_of_mime("audio/x-m4a").as_deref(), Some("m4a"));
        assert_eq!(media_type_of_mime("video/mp4"), None);
        assert_eq!(media_type_of_extension("/a/b/ep.MP3"), Some("mp3"));
        assert_eq!(media_type_of_extension("/a/b/ep.oga"), Some("ogg"));
        assert_eq!(media_type_of_extension("/a/b/ep"), None);
    }

    #[test]
    fn tracking_parameters_go() {
        let u =
            Url::parse("https://cdn.example/ep1.mp3?utm_source=rss&id=7&updated=123#t=5").unwrap();
        assert_eq!(without_tracking(&u), "https://cdn.example/ep1.mp3?id=7");
    }

    #[test]
    fn audio_enclosures_by_type_or_extension() {
        let rss = r#"<?xml version="1.0"?><rss version="2.0"><channel><title>T</title>
<item><title>a</title><guid>a</guid><pubDate>Mon, 01 Jan 2024 00:00:00 GMT</pubDate><enclosure url="https://x/a.mp3" type="application/octet-stream"/></item>
<item><title>b</title><guid>b</guid><pubDate>Mon, 01 Jan 2024 00:00:00 GMT</pubDate><enclosure url="https://x/b.m4a"/></item>
<item><title>c</title><guid>c</guid><pubDate>Mon, 01 Jan 2024 00:00:00 GMT</pubDate><enclosure url="https://x/get.php?id=3" type="audio/mpeg"/></item>
<item><title>d</title><guid>d</guid><pubDate>Mon, 01 Jan 2024 00:00:00 GMT</pubDate><enclosure url="https://x/d.mp4" type="video/mp4"/></item>
<item><title>e</title><guid>e</guid><pubDate>not a date at all</pubDate><enclosure url="https://x/e.mp3" type="audio/mpeg"/></item>
<item><title>f</title><pubDate>Mon, 01 Jan 2024 00:00:00 GMT</pubDate><enclosure url="https://x/f.mp3?utm_medium=rss" type="audio/mpeg"/></item>
</channel></rss>"#;
        let p = parse(
            rss.as_bytes(),
            &Url::parse("https://x/feed").unwrap(),
            100,
            1,
        )
        .unwrap();
        let got: Vec<(&str, &str, &str)> = p
            .items
            .iter()
            .map(|i| (i.title.as_str(), i.media_type.as_str(), i.key.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("a", "mp3", "guid:a"),
                ("b", "m4a", "guid:b"),
                ("c", "mp3", "guid:c"),
                ("f", "mp3", "url:https://x/f.mp3"),
            ]
        );
        let reasons: Vec<&str> = p.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert!(reasons[0].contains("only video/mp4"), "{reasons:?}");
        assert!(reasons[1].contains("no publication date"), "{reasons:?}");
    }

    /// An enclosure that is not http(s) is skipped for its scheme, not for its type.
    #[test]
    fn a_file_enclosure_is_skipped_for_its_scheme() {
        let rss = r#"<?xml version="1.0"?><rss version="2.0"><channel><title>T</title>
<item><title>p</title><guid>p</guid><pubDate>Mon, 01 Jan 2024 00:00:00 GMT</pubDate><enclosure url="file:///etc/passwd" type="audio/mpeg"/></item>
</channel></rss>"#;
        let p = parse(
            rss.as_bytes(),
            &Url::parse("https://x/feed").unwrap(),
            100,
            1,
        )
        .unwrap();
        assert!(p.items.is_empty());
        let reason = &p.skipped[0].reason;
        assert!(
            reason.contains("not http(s)") && reason.contains("file://"),
            "{reason}"
        );
        assert!(!reason.contains("only audio/mpeg"), "{reason}");
    }

    #[test]
    fn a_latin_1_feed_is_read_as_it_declares() {
        let mut rss = b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><rss version=\"2.0\"><channel><title>Caf".to_vec();
        rss.push(0xe9); // é in Latin-1
        rss.extend_from_slice(b"</title><item><title>Na");
        rss.push(0xef); // ï
        rss.extend_from_slice(b"ve</title><guid>n</guid><pubDate>Mon, 01 Jan 2024 00:00:00 GMT</pubDate><enclosure url=\"https://x/n.mp3\" type=\"audio/mpeg\"/></item></channel></rss>");
        let p = parse(&rss, &Url::parse("https://x/feed").unwrap(), 100, 1).unwrap();
        assert_eq!(p.title.as_deref(), Some("Café"));
        assert_eq!(p.items[0].title, "Naïve");
    }

    #[test]
    fn html_page_is_named() {
        let page = br#"<!DOCTYPE html><html><head><link rel="alternate" type="application/rss+xml" href="https://x/feed.xml"></head></html>"#;
        let e = parse(page, &Url::parse("https://x/").unwrap(), 10, 1).unwrap_err();
        assert!(
            e.contains("HTML page") && e.contains("https://x/feed.xml"),
            "{e}"
        );
        let e = parse(b"hello", &Url::parse("https://x/").unwrap(), 10, 1).unwrap_err();
        assert!(e.contains("not XML"), "{e}");
    }
}
