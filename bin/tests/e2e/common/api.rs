//! Helpers of the API's end-to-end tests: tokens made with `archivist token create`, the
//! gateway (`archivist serve --api`) on an address of the test's choosing (so that it can be
//! killed and started again where its clients look for it), and remote researchers
//! (`research --server`) that have no bus of their own.

use std::process::Child;
use std::time::Duration;

use super::research::World;
use super::serving::{start_serving_in, Running};

/// How long the processes may take to do what a test waits for (a loaded machine).
pub(crate) const DEADLINE: Duration = Duration::from_secs(120);

/// A datastore that does not exist: what remote researchers get as their `DATABASE_URL`, so
/// that only the API works for them.
pub(crate) const NO_DATABASE: &str = "postgres://nobody@127.0.0.1:1/none";

/// `token create --scope SCOPE --name NAME` in `w`: the token printed, one line.
pub(crate) fn create_token(w: &World, scope: &str, name: &str) -> String {
    let run = w
        .run(&["token", "create", "--scope", scope, "--name", name], &[])
        .expect_code(0);
    let token = run.stdout.trim().to_string();
    assert!(token.starts_with("archivist_"), "{token}");
    assert!(!run.stderr.contains(&token), "the token reached the log");
    token
}

/// `serve --api` for `w` on `addr` (`127.0.0.1:0` for any free port), with `extra` on top of
/// the world's environment: the process and the address it serves on.
pub(crate) fn start_gateway(w: &World, addr: &str, extra: &[(&str, &str)]) -> (Running, String) {
    start_serving_in(
        w.path(),
        &["serve", "--api", "--addr", addr],
        &w.bus.with(extra),
        DEADLINE,
    )
}

/// `archivist research --server http://ADDR` with `args` and the analyser `exec`, with the
/// researcher's `token` and no bus of its own (`extra` on top), started.
pub(crate) fn spawn_remote_researcher(
    w: &World,
    addr: &str,
    token: &str,
    args: &[&str],
    exec: &[String],
    extra: &[(&str, &str)],
) -> Child {
    let server = format!("http://{addr}");
    let mut all = vec!["--server", server.as_str()];
    all.extend_from_slice(args);
    let mut env = vec![("ARCHIVIST_TOKEN", token), ("DATABASE_URL", NO_DATABASE)];
    env.extend_from_slice(extra);
    w.spawn_research(&all, exec, &env)
}

/// Who counts for the work-assignment rule in the datastore at `url`: presence seen within
/// `window`.
pub(crate) fn presence(url: &str, window: Duration) -> datastore::Presence {
    let url = url.to_string();
    // On a thread of its own: the caller may be inside a runtime (an async test).
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let store = datastore::connect(&url).await.unwrap();
                let since = chrono::Utc::now() - chrono::Duration::from_std(window).unwrap();
                store.api_access().unwrap().presence(since).await.unwrap()
            })
    })
    .join()
    .unwrap()
}
