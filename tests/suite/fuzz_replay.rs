//! Replays the fuzz target's seed corpus (`fuzz/corpus/decode/`) and every crash a fuzzing run
//! saved (`fuzz/crashes/decode/`, kept once fixed) through the target's own code, so that CI
//! checks them without the fuzzer. `scripts/fuzz.sh` runs the fuzzer itself.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../fuzz/src/decode_all.rs"]
mod decode_all;

use std::path::Path;

#[test]
fn the_fuzz_corpus_and_every_saved_crash_decode_without_panicking() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut counts = Vec::new();
    for dir in ["corpus/decode", "crashes/decode"] {
        let mut n = 0;
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "README.txt" {
                continue;
            }
            let data = std::fs::read(&path).unwrap();
            let caught = std::panic::catch_unwind(|| decode_all::decode_all(&data));
            assert!(caught.is_ok(), "{} panics", path.display());
            n += 1;
        }
        counts.push(format!("{n} in fuzz/{dir}"));
    }
    assert!(
        counts[0] != "0 in fuzz/corpus/decode",
        "the seed corpus is there"
    );
    println!("replayed without a panic: {}", counts.join(", "));
}
