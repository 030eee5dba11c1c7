//! `archivist prints` end to end, through the built binary: listing, checking and removing
//! the prints of a directory store (the default one under the user's cache directory, and one
//! named by `--print-store`), JSON output, and usage errors (exit 2).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use crate::common::archivist;
use prints::{print_key, DirStore, PrintStore};

/// Puts `print` for `uri` in the directory store at `dir`.
fn put(dir: &Path, uri: &str, print: &[u8]) -> String {
    let key = print_key(uri);
    let store = DirStore::new(dir, u64::MAX).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(store.put(&key, print))
        .unwrap();
    key
}

#[test]
fn an_empty_default_store_lists_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = archivist(dir.path(), &["prints", "list"], &[]).expect_code(0);
    assert!(run.stdout.starts_with("no prints in "), "{}", run.stdout);
    // The default store: under the user's (here the test's) cache directory, not the media
    // cache.
    assert!(
        run.stdout.contains(".cache/archivist/prints"),
        "{}",
        run.stdout
    );
    assert!(dir.path().join(".cache/archivist/prints").is_dir());
    let run = archivist(dir.path(), &["prints", "list", "--json"], &[]).expect_code(0);
    assert_eq!(run.stdout, "");
}

#[test]
fn list_check_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let good = put(&store, "https://example.com/1.mp3", &[1u8; 500]);
    let bad = put(&store, "https://example.com/2.mp3", &[2u8; 700]);
    let third = put(&store, "/media/3.wav", b"three");
    let given = store.display().to_string();
    let env = [("ARCHIVIST_PRINT_STORE", given.as_str())];

    let listed = archivist(dir.path(), &["prints", "list", "--json"], &env)
        .expect_code(0)
        .json_lines();
    assert_eq!(listed.len(), 3);
    let of = |lines: &[serde_json::Value], key: &str| {
        lines
            .iter()
            .find(|l| l["key"] == key)
            .unwrap_or_else(|| panic!("{key} not in {lines:?}"))
            .clone()
    };
    assert_eq!(
        of(&listed, &good)["size"],
        500 + prints::envelope::HEADER as u64
    );
    assert!(of(&listed, &good)["used"].is_string());
    let table = archivist(dir.path(), &["prints", "list"], &env).expect_code(0);
    assert!(table.stdout.contains(&good) && table.stdout.contains("size"));

    // One print cut short: `check` names it, and only it.
    let path = DirStore::new(&store, u64::MAX)
        .unwrap()
        .path_of(&bad)
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let check = archivist(dir.path(), &["prints", "check", "--json"], &env).expect_code(0);
    let checked = check.json_lines();
    assert!(of(&checked, &good)["damage"].is_null());
    assert!(of(&checked, &bad)["damage"]
        .as_str()
        .unwrap()
        .contains("truncated"));
    assert!(
        check.stderr.contains("2 whole, 1 damaged"),
        "{}",
        check.stderr
    );
    archivist(
        dir.path(),
        &[
            "prints",
            "--print-store",
            &given,
            "check",
            "--remove-damaged",
        ],
        &[],
    )
    .expect_code(0);
    assert!(!path.exists(), "the damaged print removed");

    // Removed by key and by media URI; a second time says there is none.
    archivist(dir.path(), &["prints", "remove", &good], &env).expect_code(0);
    archivist(
        dir.path(),
        &["prints", "remove", "--uri", "/media/3.wav"],
        &env,
    )
    .expect_code(0);
    let again = archivist(dir.path(), &["prints", "remove", &third], &env).expect_code(0);
    assert!(again.stderr.contains("no print"), "{}", again.stderr);
    let listed = archivist(dir.path(), &["prints", "list", "--json"], &env).expect_code(0);
    assert_eq!(listed.stdout, "");

    put(&store, "a", b"a");
    put(&store, "b", b"b");
    archivist(dir.path(), &["prints", "remove", "--all"], &env).expect_code(0);
    let listed = archivist(dir.path(), &["prints", "list", "--json"], &env).expect_code(0);
    assert_eq!(listed.stdout, "");
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = archivist(dir.path(), &["prints", "remove", "not-a-key"], &[]).expect_code(2);
    assert!(run.stderr.contains("not a print key"), "{}", run.stderr);
    let run = archivist(dir.path(), &["prints", "remove"], &[]).expect_code(2);
    assert!(run.stderr.contains("--all"), "{}", run.stderr);
    let run = archivist(
        dir.path(),
        &["prints", "list"],
        &[("ARCHIVIST_PRINT_STORE", "ftp://host/prints")],
    )
    .expect_code(2);
    assert!(
        run.stderr.contains("ARCHIVIST_PRINT_STORE"),
        "{}",
        run.stderr
    );
    // A store where a file is: cannot be made.
    std::fs::write(dir.path().join("file"), b"x").unwrap();
    let run = archivist(
        dir.path(),
        &["prints", "--print-store", "file/store", "list"],
        &[],
    )
    .expect_code(2);
    assert!(run.stderr.contains("print store"), "{}", run.stderr);
    let run = archivist(
        dir.path(),
        &["research", "--once", "--print-store", "ftp://x/y"],
        &[],
    )
    .expect_code(2);
    assert!(run.stderr.contains("--print-store"), "{}", run.stderr);
}
