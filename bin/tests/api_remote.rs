//! Remote researchers through the real gateway, not a fake: `archivist serve --api` on the
//! SQLite database bus, two `archivist research --server URL` processes with an `--exec`
//! analyser and a researcher's token, and the archivists run locally: every pair researched
//! exactly once, with the matches a local researcher records.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Child;
use std::time::{Duration, Instant};

use common::research::{shell, World};
use common::serving::start_serving_in;
use common::{BusEnv, Run};

/// How long the processes may take to do what the test waits for (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(120);

#[test]
fn remote_researchers_research_every_pair_once_through_the_gateway() {
    let w = World::new(BusEnv::database(), None, 4, 3);
    w.curate();
    let run = w
        .run(
            &[
                "token",
                "create",
                "--scope",
                "researcher",
                "--name",
                "remote",
            ],
            &[],
        )
        .expect_code(0);
    let token = run.stdout.trim().to_string();
    let env = w.bus.with(&[]);
    let (_gateway, addr) = start_serving_in(
        w.path(),
        &["serve", "--api", "--addr", "127.0.0.1:0"],
        &env,
        DEADLINE,
    );
    let server = format!("http://{addr}");

    // Rounds as an operator's cron would run them: work handed out for two researchers,
    // two remote researchers taking what waits, then the results recorded; until every
    // pair is recorded.
    let pairs = 4 * 3;
    let until = Instant::now() + DEADLINE;
    loop {
        w.run(&["pending-research"], &[("ARCHIVIST_RESEARCHERS", "2")])
            .expect_code(0);
        let children: Vec<Child> = (0..2)
            .map(|_| {
                w.spawn_research(
                    &["--once", "--concurrency", "1", "--server", &server],
                    &shell(),
                    // No bus for them: a database that does not exist. Only the API works.
                    &[
                        ("ARCHIVIST_TOKEN", &token),
                        ("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none"),
                    ],
                )
            })
            .collect();
        for child in children {
            let run = Run::from_output(child.wait_with_output().unwrap()).expect_code(0);
            assert!(
                !run.stderr.contains(&token) && !run.stdout.contains(&token),
                "the token reached the researcher's output"
            );
        }
        w.run(&["completed-research"], &[]).expect_code(0);
        let s = w.status();
        let done = s["researched_pairs"].as_u64().unwrap() + s["failed_pairs"].as_u64().unwrap();
        if done == pairs {
            assert_eq!(s["researched_pairs"], pairs, "{s}");
            break;
        }
        assert!(Instant::now() < until, "not done in time: {s}");
    }
    // The same answers as a local researcher's, each pair once (a pair recorded twice would
    // show as two stored results or a second match).
    assert_eq!(w.matches(), w.expected_matches());
    assert_eq!(w.stored_results(), w.expected_results());
    let depths = w.queue_depths();
    for q in ["pending_research", "completed_research"] {
        assert_eq!(depths[q]["waiting"], 0, "{q}: {depths:?}");
        assert_eq!(depths[q]["dead_letters"], 0, "{q}: {depths:?}");
    }
}
