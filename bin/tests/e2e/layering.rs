//! The binary's imports run one way. Every file of `bin/src/` stands on a floor of [`FLOORS`]
//! (the list, in one place), and a file may import only from floors below its own, or from
//! its own folder (the web server's pages, the demo's parts) without a circle; no two files
//! import each other, however long the way round. Between crates cargo itself refuses a
//! circle; this test also checks that no library crate of the workspace depends on the
//! binary's package.
//!
//! An import is any path to a module of the binary: `crate::…`, `super::…`, `self::…`, or a
//! child module's name (`cli::command()` in `main.rs`), in a `use` or in code, `use crate::{…}`
//! groups included; comments, strings and `mod x;` declarations are not imports. A path names
//! the deepest module file it reaches (`crate::values::usage` is `values.rs`, `crate::describe`
//! is `main.rs`).
//!
//! It fails as it should: [`a_back_import_fails`] and [`a_circle_fails`] add an import from a
//! low floor to a high one, and two files of one folder importing each other, to the real
//! sources, and expect the check to name them (and adding `use crate::cli::Cli;` to
//! `values.rs` makes [`imports_run_one_way`] fail the same way).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors of `bin/src/`, top first: a file (`cli.rs`) or a folder (`web/`) each. A file
/// imports from the floors below its own; sideways only inside one folder, and not in
/// [`ALONE`].
const FLOORS: &[&[&str]] = &[
    // Parses the command line, builds the configuration, starts the runtime, picks the exit code.
    &["main.rs"],
    // The top-level command line: `Cli`, the `Command` enum and its dispatch, each
    // subcommand's `--help` options.
    &["cli.rs"],
    // One file per subcommand: its options, help texts and wiring.
    &["commands/"],
    // The demo's curators, researchers, progress and summary.
    &["demo/"],
    // The archivists' and the researcher's wiring, shared by their subcommands and the demo.
    &["archivists.rs", "researcher.rs"],
    // The HTTP server: status page, its API, metrics, health.
    &["web/"],
    // Adapters and running: the datastore and bus, tasks, logs, signals, queue depths.
    &[
        "connect.rs",
        "tasks.rs",
        "logging.rs",
        "signals.rs",
        "depths.rs",
    ],
    // Checked configuration, the panic hook's masking.
    &["config.rs", "panic_hook.rs"],
    // Option values, usage errors, error words: imports nothing of the binary.
    &["values.rs"],
];

/// Folders whose files import none of each other (each subcommand stands alone).
const ALONE: &[&str] = &["commands/"];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file below `dir`, by its path relative to `src/` (with `/`).
fn sources(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(base).unwrap().to_string_lossy();
            out.insert(
                rel.replace('\\', "/"),
                std::fs::read_to_string(&path).unwrap(),
            );
        }
    }
}

/// The module path of a file: `main.rs` is the root, `web/mod.rs` and `web.rs` are `web`.
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") || stem == "main" {
        parts.pop();
    }
    parts
}

/// The code of a Rust file with comments, strings and character literals blanked out.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (next == Some('"') || next == Some('#'))
            && !c
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' {
            // A character literal ('x', '\n', '\u{…}'), not a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Path,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(c[start..i].iter().collect()));
            continue;
        }
        if ch.is_whitespace() {
            i += 1;
            continue;
        }
        if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Token::Path);
            i += 2;
            continue;
        }
        out.push(match ch {
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            ';' => Token::Semi,
            '*' => Token::Star,
            _ => Token::Other,
        });
        i += 1;
    }
    out
}

/// The paths that start at `t[i]` (`a::b`, `a::{b, c::d}`): each as its segments, and the
/// index after them.
fn paths_at(t: &[Token], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let Some(Token::Ident(first)) = t.get(i) else {
        return (Vec::new(), i + 1);
    };
    let mut prefix = vec![first.clone()];
    i += 1;
    while t.get(i) == Some(&Token::Path) {
        match t.get(i + 1) {
            Some(Token::Ident(s)) => {
                prefix.push(s.clone());
                i += 2;
            }
            Some(Token::Open) => {
                let mut all = Vec::new();
                i += 2;
                loop {
                    match t.get(i) {
                        Some(Token::Ident(_)) => {
                            let (inner, next) = paths_at(t, i);
                            for p in inner {
                                let mut full = prefix.clone();
                                // `a::{self, b}`: `self` is `a` itself.
                                full.extend(p.into_iter().filter(|s| s != "self"));
                                all.push(full);
                            }
                            i = next;
                        }
                        Some(Token::Close) => {
                            i += 1;
                            break;
                        }
                        None => break,
                        _ => {
                            if t.get(i) == Some(&Token::Star) {
                                all.push(prefix.clone());
                            }
                            i += 1;
                        }
                    }
                }
                return (all, i);
            }
            Some(Token::Star) => {
                i += 2;
                break;
            }
            _ => break,
        }
    }
    (vec![prefix], i)
}

/// Which files each file imports, by the rules of the module doc.
fn imports(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeMap<Vec<String>, String> =
        files.keys().map(|f| (module_of(f), f.clone())).collect();
    let mut edges = BTreeMap::new();
    for (file, text) in files {
        let t = tokens(&code_only(text));
        let here = module_of(file);
        // Child modules declared here (`mod x;`), whose names start paths in this file.
        let children: BTreeSet<String> = t
            .windows(3)
            .filter_map(|w| match w {
                [Token::Ident(m), Token::Ident(name), Token::Semi] if m == "mod" => {
                    Some(name.clone())
                }
                _ => None,
            })
            .collect();
        // Inline modules (`mod tests { … }`) open at a brace depth.
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0usize;
        let mut found = BTreeSet::new();
        let mut i = 0;
        while i < t.len() {
            match &t[i] {
                Token::Open => depth += 1,
                Token::Close => {
                    depth = depth.saturating_sub(1);
                    if inline.last().is_some_and(|(_, d)| *d == depth) {
                        inline.pop();
                    }
                }
                Token::Ident(m) if m == "mod" => {
                    if let (Some(Token::Ident(name)), Some(Token::Open)) =
                        (t.get(i + 1), t.get(i + 2))
                    {
                        inline.push((name.clone(), depth));
                    }
                    // The declared name is not an import.
                    i += 2;
                    continue;
                }
                Token::Ident(first) => {
                    let after_path = i > 0 && t[i - 1] == Token::Path;
                    let starts = matches!(first.as_str(), "crate" | "super" | "self")
                        || (children.contains(first) && inline.is_empty());
                    if !after_path && starts && t.get(i + 1) == Some(&Token::Path) {
                        let (paths, next) = paths_at(&t, i);
                        let mut current = here.clone();
                        current.extend(inline.iter().map(|(n, _)| n.clone()));
                        for p in paths {
                            let mut at = match p[0].as_str() {
                                "crate" => Vec::new(),
                                "self" | "super" => current.clone(),
                                child => {
                                    let mut m = here.clone();
                                    m.push(child.to_string());
                                    m
                                }
                            };
                            let mut rest = p[1..].iter().peekable();
                            while rest.peek().is_some_and(|s| *s == "super") {
                                at.pop();
                                rest.next();
                            }
                            if p[0] == "super" {
                                at.pop();
                            }
                            at.extend(rest.cloned());
                            // The deepest module file the path reaches.
                            let target = (0..=at.len())
                                .rev()
                                .find_map(|n| modules.get(&at[..n]))
                                .cloned();
                            if let Some(target) = target {
                                if &target != file {
                                    found.insert(target);
                                }
                            }
                        }
                        i = next;
                        continue;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        edges.insert(file.clone(), found);
    }
    edges
}

/// The floor and the group (`web/`, `cli.rs`) of a file.
fn place(file: &str) -> Option<(usize, &'static str)> {
    FLOORS.iter().enumerate().find_map(|(floor, groups)| {
        groups
            .iter()
            .find(|g| {
                if g.ends_with('/') {
                    file.starts_with(**g)
                } else {
                    file == **g
                }
            })
            .map(|g| (floor, *g))
    })
}

/// Everything wrong with the imports of `files`: a file on no floor, an import up or
/// sideways, a circle.
fn problems(files: &BTreeMap<String, String>) -> Vec<String> {
    let edges = imports(files);
    let mut wrong = Vec::new();
    for (file, targets) in &edges {
        let Some((floor, group)) = place(file) else {
            wrong.push(format!("{file} stands on no floor: add it to FLOORS"));
            continue;
        };
        for target in targets {
            let Some((to_floor, to_group)) = place(target) else {
                continue;
            };
            if to_floor > floor {
                continue;
            }
            if to_group == group && !ALONE.contains(&group) {
                continue;
            }
            let how = if to_floor < floor {
                "up, from a lower floor"
            } else {
                "sideways, on one floor"
            };
            wrong.push(format!("{file} imports {target}: {how}"));
        }
    }
    for groups in FLOORS {
        for g in *groups {
            if !files
                .keys()
                .any(|f| place(f).is_some_and(|(_, fg)| fg == *g))
            {
                wrong.push(format!("FLOORS names {g}, which holds no file"));
            }
        }
    }
    wrong.extend(circles(&edges));
    wrong
}

/// Each circle of imports between files, as the way round.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn visit(
        file: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        way: &mut Vec<String>,
        out: &mut Vec<String>,
    ) {
        state.insert(file.to_string(), 1);
        way.push(file.to_string());
        for next in edges.get(file).into_iter().flatten() {
            match state.get(next).copied().unwrap_or(0) {
                0 => visit(next, edges, state, way, out),
                1 => {
                    let start = way.iter().position(|f| f == next).unwrap_or(0);
                    let mut round = way[start..].to_vec();
                    round.push(next.clone());
                    out.push(format!("a circle: {}", round.join(" → ")));
                }
                _ => {}
            }
        }
        way.pop();
        state.insert(file.to_string(), 2);
    }
    let mut state = BTreeMap::new();
    let mut out = Vec::new();
    for file in edges.keys() {
        if state.get(file).copied().unwrap_or(0) == 0 {
            visit(file, edges, &mut state, &mut Vec::new(), &mut out);
        }
    }
    out
}

fn real_sources() -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    sources(&src(), &src(), &mut files);
    files
}

#[test]
fn imports_run_one_way() {
    let files = real_sources();
    let edges = imports(&files);
    // The check sees imports at all: main starts the command line, which dispatches.
    assert!(
        edges["main.rs"].contains("cli.rs"),
        "{:?}",
        edges["main.rs"]
    );
    assert!(
        edges["cli.rs"].contains("commands/status.rs"),
        "{:?}",
        edges["cli.rs"]
    );
    let wrong = problems(&files);
    assert!(
        wrong.is_empty(),
        "imports that do not run one way:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_back_import_fails() {
    let mut files = real_sources();
    files
        .get_mut("values.rs")
        .unwrap()
        .push_str("\nfn back() { let _ = crate::cli::command(); }\n");
    files
        .get_mut("config.rs")
        .unwrap()
        .push_str("\nuse crate::{connect::{self, Open}, values::usage};\n");
    let wrong = problems(&files);
    assert!(
        wrong.contains(&"values.rs imports cli.rs: up, from a lower floor".to_string()),
        "{wrong:?}"
    );
    assert!(
        wrong.contains(&"config.rs imports connect.rs: up, from a lower floor".to_string()),
        "{wrong:?}"
    );
    // Comments and strings are not imports.
    let mut files = real_sources();
    files
        .get_mut("values.rs")
        .unwrap()
        .push_str("\n// crate::cli::command()\nconst _S: &str = \"crate::cli::command\";\n");
    assert!(problems(&files).is_empty(), "{:?}", problems(&files));
}

#[test]
fn a_circle_fails() {
    let mut files = real_sources();
    // web/mod.rs declares layout.rs and imports it; layout.rs importing web/mod.rs back closes
    // a circle inside one folder.
    files
        .get_mut("web/layout.rs")
        .unwrap()
        .push_str("\nuse super::App;\n");
    let wrong = problems(&files);
    assert!(
        wrong
            .iter()
            .any(|w| w.starts_with("a circle:") && w.contains("web/layout.rs")),
        "{wrong:?}"
    );
    // Two subcommands importing each other, or one the other: sideways.
    let mut files = real_sources();
    files
        .get_mut("commands/queues.rs")
        .unwrap()
        .push_str("\nuse crate::commands::status::EXAMPLES;\n");
    let wrong = problems(&files);
    assert!(
        wrong.contains(
            &"commands/queues.rs imports commands/status.rs: sideways, on one floor".to_string()
        ),
        "{wrong:?}"
    );
}

/// No library crate of the workspace depends on the binary's package: the binary stands on
/// top of them all.
#[test]
fn no_library_depends_on_the_binary() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = workspace
        .split("members")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .unwrap_or_default();
    let members: Vec<&str> = members
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|m| *m != "bin")
        .collect();
    assert!(members.contains(&"."), "{members:?}");
    for m in members {
        let manifest = std::fs::read_to_string(root.join(m).join("Cargo.toml")).unwrap();
        assert!(
            !manifest.contains("archivist-cli"),
            "{m}/Cargo.toml depends on archivist-cli, the binary"
        );
    }
}
