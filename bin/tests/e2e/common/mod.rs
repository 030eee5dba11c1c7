//! Helpers of the end-to-end tests: running the built `archivist` binary in a test's own
//! temporary working directory with a clean environment, the SQS emulator's settings with
//! queue names of a test's own, and fresh Postgres databases.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

pub(crate) mod api;
pub(crate) mod audio;
pub(crate) mod cluster;
pub(crate) mod devtools;
pub(crate) mod pipeline;
pub(crate) mod research;
pub(crate) mod serving;

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Variables the binary reads; removed so that the caller's environment cannot leak in.
const OUR_VARS: &[&str] = &[
    "DATABASE_URL",
    "ARCHIVIST_BUS",
    "ARCHIVIST_BUS_URL",
    "ARCHIVIST_RESEARCHERS",
    "ARCHIVIST_LEASE_DURATION",
    "ARCHIVIST_MAX_CLIPS",
    "ARCHIVIST_MAX_RECEIVES",
    "ARCHIVIST_EPISODES_QUEUE",
    "ARCHIVIST_CLIPS_QUEUE",
    "ARCHIVIST_PENDING_RESEARCH_QUEUE",
    "ARCHIVIST_COMPLETED_RESEARCH_QUEUE",
    "ARCHIVIST_ANNOUNCE_QUEUE",
    "ARCHIVIST_CONNECT_TIMEOUT",
    "ARCHIVIST_SHUTDOWN_TIMEOUT",
    "ARCHIVIST_RETRY_BUDGET",
    "ARCHIVIST_START_JITTER",
    "ARCHIVIST_EVERY",
    "ARCHIVIST_METRICS_ADDR",
    "ARCHIVIST_SERVE_ADDR",
    "ARCHIVIST_CONCURRENCY",
    "ARCHIVIST_ANALYSER_URL",
    "ARCHIVIST_CACHE_DIR",
    "ARCHIVIST_CACHE_SIZE",
    "ARCHIVIST_MEDIA_ROOT",
    "ARCHIVIST_PRINT_STORE",
    "ARCHIVIST_PRINT_STORE_SIZE",
    "ARCHIVIST_LATER_BACKOFF",
    "ARCHIVIST_LATER_MAX_BACKOFF",
    "ARCHIVIST_SERVER",
    "ARCHIVIST_PRESENCE_WINDOW",
    "ARCHIVIST_API_MAX_CONNECTIONS",
    "ARCHIVIST_TOKEN",
    "RUST_LOG",
];

/// What a run of the binary gave.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// What a finished child gave.
    pub(crate) fn from_output(out: Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Panics with both outputs unless the exit code is `code`.
    pub(crate) fn expect_code(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "expected exit code {code}, got {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// The standard output's lines parsed as JSON.
    pub(crate) fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// The binary, in `dir`, with `env` on top of a clean environment.
pub(crate) fn command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_archivist"));
    cmd.current_dir(dir).args(args);
    for v in OUR_VARS {
        cmd.env_remove(v);
    }
    // No colours in the logs the tests read.
    cmd.env("NO_COLOR", "1");
    // The user's cache directory (the researchers' default media cache) is the test's own,
    // never the machine user's: tests neither read nor leave anything there.
    cmd.env("XDG_CACHE_HOME", dir.join(".cache"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the binary `processes` times at once (started together, so that they race), each with
/// `args` and `env`, and expects every one to exit 0.
#[allow(dead_code)]
pub(crate) fn run_at_once(dir: &Path, args: &[&str], env: &[(&str, &str)], processes: usize) {
    let children: Vec<_> = (0..processes)
        .map(|_| {
            command(dir, args, env)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        Run::from_output(child.wait_with_output().unwrap()).expect_code(0);
    }
}

/// Runs the binary with no standard input.
pub(crate) fn archivist(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = command(dir, args, env)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Run::from_output(out)
}

/// Runs the binary with `input` on standard input.
pub(crate) fn archivist_with_input(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    input: &str,
) -> Run {
    use std::io::Write;
    let mut child = command(dir, args, env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    Run::from_output(child.wait_with_output().unwrap())
}

/// The binary's settings for a test's bus: the SQS emulator with queue names no other test
/// uses (so that tests can share one moto_server), or the database bus in the test's own
/// datastore (the default, with no bus variable set at all).
pub(crate) struct BusEnv {
    vars: Vec<(String, String)>,
    pub(crate) episodes_queue: String,
    pub(crate) clips_queue: String,
    pub(crate) pending_queue: String,
    pub(crate) completed_queue: String,
}

impl BusEnv {
    /// The database bus: nothing set, the queues (default names) live in the datastore.
    pub(crate) fn database() -> Self {
        BusEnv {
            vars: Vec::new(),
            episodes_queue: "curated_episodes".into(),
            clips_queue: "curated_clips".into(),
            pending_queue: "pending_research".into(),
            completed_queue: "completed_research".into(),
        }
    }

    /// Whether this is the SQS bus.
    pub(crate) fn is_sqs(&self) -> bool {
        self.vars
            .iter()
            .any(|(k, v)| k == "ARCHIVIST_BUS" && v == "sqs")
    }

    /// The emulator's endpoint from ARCHIVIST_TEST_SQS_ENDPOINT; fails (never skips) without
    /// it. The AWS region and credentials come from the environment, else moto's defaults.
    pub(crate) fn sqs() -> Self {
        let endpoint = std::env::var("ARCHIVIST_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
            panic!(
                "ARCHIVIST_TEST_SQS_ENDPOINT is not set: run scripts/test.sh, which starts \
                 moto_server and exports it (with AWS_REGION and the AWS credentials)"
            )
        });
        let from_env = |name: &str, default: &str| {
            (
                name.to_string(),
                std::env::var(name).unwrap_or_else(|_| default.to_string()),
            )
        };
        // Short enough for SQS's 80 characters with `_dead_letter` appended.
        let tag = format!("t_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let queue = |name: &str| format!("{tag}_{name}");
        let mut env = BusEnv {
            vars: vec![
                ("ARCHIVIST_BUS".to_string(), "sqs".to_string()),
                ("AWS_ENDPOINT_URL".to_string(), endpoint),
                from_env("AWS_REGION", "us-east-1"),
                from_env("AWS_ACCESS_KEY_ID", "testing"),
                from_env("AWS_SECRET_ACCESS_KEY", "testing"),
            ],
            episodes_queue: queue("curated_episodes"),
            clips_queue: queue("curated_clips"),
            pending_queue: queue("pending_research"),
            completed_queue: queue("completed_research"),
        };
        for (var, name) in [
            ("ARCHIVIST_EPISODES_QUEUE", env.episodes_queue.clone()),
            ("ARCHIVIST_CLIPS_QUEUE", env.clips_queue.clone()),
            (
                "ARCHIVIST_PENDING_RESEARCH_QUEUE",
                env.pending_queue.clone(),
            ),
            (
                "ARCHIVIST_COMPLETED_RESEARCH_QUEUE",
                env.completed_queue.clone(),
            ),
        ] {
            env.set(var, &name);
        }
        env
    }

    /// RabbitMQ at ARCHIVIST_TEST_AMQP_URL (which scripts/test.sh sets, starting a broker
    /// if none answers); fails (never skips) without it. Queue names of this test's own.
    pub(crate) fn rabbitmq() -> Self {
        let url = std::env::var("ARCHIVIST_TEST_AMQP_URL").unwrap_or_else(|_| {
            panic!(
                "ARCHIVIST_TEST_AMQP_URL is not set: run scripts/test.sh, which starts RabbitMQ \
                 if none answers on 127.0.0.1:5672 and exports it"
            )
        });
        let tag = format!("t_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let queue = |name: &str| format!("{tag}_{name}");
        let mut env = BusEnv {
            vars: vec![
                ("ARCHIVIST_BUS".to_string(), "rabbitmq".to_string()),
                ("ARCHIVIST_BUS_URL".to_string(), url),
            ],
            episodes_queue: queue("curated_episodes"),
            clips_queue: queue("curated_clips"),
            pending_queue: queue("pending_research"),
            completed_queue: queue("completed_research"),
        };
        for (var, name) in [
            ("ARCHIVIST_EPISODES_QUEUE", env.episodes_queue.clone()),
            ("ARCHIVIST_CLIPS_QUEUE", env.clips_queue.clone()),
            (
                "ARCHIVIST_PENDING_RESEARCH_QUEUE",
                env.pending_queue.clone(),
            ),
            (
                "ARCHIVIST_COMPLETED_RESEARCH_QUEUE",
                env.completed_queue.clone(),
            ),
        ] {
            env.set(var, &name);
        }
        env
    }

    /// Sets `name` for every run with this environment.
    pub(crate) fn set(&mut self, name: &str, value: &str) {
        self.vars.retain(|(k, _)| k != name);
        self.vars.push((name.to_string(), value.to_string()));
    }

    /// The four queues: episodes, clips, pending research, completed research.
    pub(crate) fn queues(&self) -> [&str; 4] {
        [
            &self.episodes_queue,
            &self.clips_queue,
            &self.pending_queue,
            &self.completed_queue,
        ]
    }

    /// The variables with `extra` on top, as [`command`] and [`archivist`] take them.
    pub(crate) fn with<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env: Vec<(&str, &str)> = self
            .vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend_from_slice(extra);
        env
    }
}

/// The administrative Postgres URL tests create their databases through.
pub(crate) fn pg_admin_url() -> String {
    std::env::var("ARCHIVIST_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// A fresh Postgres database, dropped when this is dropped.
pub(crate) struct PgDatabase {
    admin: String,
    pub(crate) name: String,
    pub(crate) url: String,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `url` with its database (the path) replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let host_end = base[scheme_end..]
        .find('/')
        .map(|i| scheme_end + i)
        .unwrap_or(base.len());
    let mut out = format!("{}/{db}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

impl PgDatabase {
    /// Creates `archivist_t_<uuid>` through the admin URL. Fails (never skips) when Postgres
    /// cannot be reached.
    pub(crate) fn create() -> Self {
        let admin = pg_admin_url();
        let name = format!("archivist_t_{}", uuid::Uuid::new_v4().simple());
        runtime().block_on(async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&admin)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot reach Postgres at ARCHIVIST_TEST_PG_URL ({admin}): {e}; \
                     run scripts/test.sh, which starts it"
                    )
                });
            // A database name cannot be a bind parameter; this one is our own uuid.
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .unwrap();
        });
        let url = with_database(&admin, &name);
        PgDatabase { admin, name, url }
    }
}

impl PgDatabase {
    /// A new database made from this one as a template (`CREATE DATABASE … TEMPLATE`): a copy
    /// of everything in it, the bus's stored instance id included. Nothing may be connected
    /// to this one meanwhile.
    pub(crate) fn copy(&self) -> Self {
        let name = format!("archivist_t_{}", uuid::Uuid::new_v4().simple());
        runtime().block_on(async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&self.admin).await.unwrap();
            // Names of our own making, not values: they cannot be bound.
            sqlx::query(&format!("CREATE DATABASE {name} TEMPLATE {}", self.name))
                .execute(&mut conn)
                .await
                .unwrap();
        });
        let url = with_database(&self.admin, &name);
        PgDatabase {
            admin: self.admin.clone(),
            name,
            url,
        }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // In a thread of its own: the drop may run inside another runtime or while panicking.
        let _ = std::thread::spawn(move || {
            runtime().block_on(async {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            })
        })
        .join();
    }
}

/// Makes every in-flight message of the database bus at `url` visible now, as if its
/// visibility timeout had run out (the tests do not wait 30 s for it).
pub(crate) fn expire_visibility(url: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if url.starts_with("sqlite:") {
            let pool = sqlx::SqlitePool::connect(url).await.unwrap();
            sqlx::query("UPDATE bus_messages SET visible_at = 0")
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        } else {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            sqlx::query("UPDATE bus_messages SET visible_at = now() WHERE visible_at > now()")
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
    });
}

/// Runs `args` with `ARCHIVIST_FAIL_POINT=point` in `dir`, waits until the process says it
/// reached the point, and SIGKILLs it there.
pub(crate) fn kill_at_point(dir: &Path, args: &[&str], env: &[(&str, &str)], point: &str) {
    use std::io::BufRead;
    let mut env = env.to_vec();
    env.push(("ARCHIVIST_FAIL_POINT", point));
    let mut child = command(dir, args, &env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let marker = format!("fail point {point} reached");
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if line.contains(&marker) {
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        }
        seen.push(line);
    }
    panic!(
        "{args:?} ended without reaching {point}: {:?}\n{}",
        child.wait(),
        seen.join("\n")
    );
}

/// `url` (a `scheme://[user[:password]@]host:port/...` URL) with its port replaced by 1, where
/// nothing listens: a refused connection to the same host.
pub(crate) fn with_refused_port(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (auth, host) = match authority.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), authority),
    };
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    format!("{scheme}://{auth}{host}:1/{path}")
}
