//! The book (`docs/`, mdBook) and the README hold together: every chapter is in the summary and
//! every summary entry is a chapter; every relative link of the README and the chapters names a
//! file that exists, and an anchor (`#…`) a heading of that file. `mdbook build docs` (run by
//! the test command) renders it; this test needs no mdBook.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// GitHub's and mdBook's heading anchors: lower case, letters, digits, `-` and `_` kept, spaces
/// to `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines of a Markdown file outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

fn anchors(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    prose(&text)
        .into_iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| slug(line.trim_start_matches('#')))
        .collect()
}

/// Every `](target)` of a file's prose, without inline code spans.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        // Drop inline code: a `](x)` inside backticks is not a link.
        let mut plain = String::new();
        let mut in_code = false;
        for c in rest.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        rest = &plain;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            found.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    found
}

fn check_links(file: &Path, problems: &mut Vec<String>) {
    let text = std::fs::read_to_string(file).unwrap();
    for link in links(&text) {
        if link.starts_with("http://")
            || link.starts_with("https://")
            || link.starts_with("mailto:")
        {
            continue;
        }
        let (path, anchor) = match link.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (link.as_str(), None),
        };
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap().join(path)
        };
        if !target.exists() {
            problems.push(format!("{}: {link}: no such file", file.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            if !anchors(&target).contains(anchor) {
                problems.push(format!("{}: {link}: no such heading", file.display()));
            }
        }
    }
}

#[test]
fn every_chapter_is_in_the_summary_and_every_link_resolves() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let chapters: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "SUMMARY.md")
        .collect();
    assert_eq!(
        listed, chapters,
        "docs/src/SUMMARY.md against the chapters in docs/src"
    );

    let mut problems = Vec::new();
    check_links(&root().join("README.md"), &mut problems);
    for chapter in &chapters {
        check_links(&src.join(chapter), &mut problems);
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_readme_is_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 320,
        "README.md has {lines} lines: the rest belongs in the book (docs/)"
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug(" Your own show"), "your-own-show");
    assert_eq!(slug("Postgres over TLS"), "postgres-over-tls");
    assert_eq!(
        slug("Ours, by distortion class (every episode × every clip)"),
        "ours-by-distortion-class-every-episode--every-clip"
    );
}
