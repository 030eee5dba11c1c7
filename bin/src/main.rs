//! The `archivist` command. TODO.
fn main() {}
