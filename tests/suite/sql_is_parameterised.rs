//! Every SQL statement the library and the binary run is a constant string with bind
//! parameters: no statement is built with `format!` (or string concatenation) from values.
//! Reads the sources; fails naming each line that builds SQL from a format string. The only
//! exceptions are identifiers that cannot be parameters (a test database's name, made of a
//! UUID), listed here with why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// Statement builders of sqlx whose SQL argument must be constant.
const BUILDERS: &[&str] = &[
    "query(", // sqlx::query and the like
    "query_as(",
    "query_scalar(",
    "raw_sql(",
    "QueryBuilder::new(",
    ">::new(",
    "query.push(",
];

/// (file, fragment): string-built SQL that is allowed, and why.
const ALLOWED: &[(&str, &str)] = &[
    // CREATE/DROP DATABASE take an identifier, never a parameter; the name is our own UUID.
    ("datastore/src/testing_pg.rs", "DATABASE"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_sql_is_built_from_format_strings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "datastore/src", "messagebus/src", "bin/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 20,
        "sources not found under {}",
        root.display()
    );
    let mut offending = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !BUILDERS.iter().any(|b| line.contains(b)) {
                continue;
            }
            // The statement's text starts on this line or the next.
            let window = format!("{line} {}", lines.get(i + 1).copied().unwrap_or(""));
            let built = window.contains("format!(") || window.contains("&format!");
            let allowed = ALLOWED
                .iter()
                .any(|(f, frag)| rel == *f && window.contains(frag));
            if built && !allowed {
                offending.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        offending.is_empty(),
        "SQL built from format strings (bind the values instead):\n{}",
        offending.join("\n")
    );
}
