//! Configuration: the global options (every subcommand takes them, each with its environment
//! variable), checked and turned into typed values; a bad value is a [`UsageError`] (exit
//! code 2) that names the variable and the flag.
//!
//! The options are read as plain strings, so that a bad value is reported with the variable's
//! name (clap's own messages name only the flag).

use std::time::Duration;

use clap::Args;

use crate::values::{parse_duration, resolve_addr, UsageError};

// Defaults of the options with a default, also used for a variable that is set but empty
// (`ARCHIVIST_MAX_CLIPS=` in a compose file means "the default", as for the others).
const DEFAULT_MAX_CLIPS: &str = "50";
const DEFAULT_MAX_RECEIVES: &str = "5";
const DEFAULT_MAX_RESULTS_WAITING: &str = "10000";
const DEFAULT_EPISODES_QUEUE: &str = "curated_episodes";
const DEFAULT_CLIPS_QUEUE: &str = "curated_clips";
const DEFAULT_PENDING_RESEARCH_QUEUE: &str = "pending_research";
const DEFAULT_COMPLETED_RESEARCH_QUEUE: &str = "completed_research";
const DEFAULT_CONNECT_TIMEOUT: &str = "30s";
const DEFAULT_SHUTDOWN_TIMEOUT: &str = "30s";
const DEFAULT_RETRY_BUDGET: &str = "30s";
const DEFAULT_START_JITTER: &str = "5s";

/// Options every subcommand takes, each with its environment variable.
#[derive(Debug, Args)]
#[command(next_help_heading = "Configuration (every option also from its environment variable)")]
pub(crate) struct GlobalArgs {
    /// The datastore: sqlite://PATH (created if missing) or postgres://USER@HOST/DB
    /// [default: sqlite://archivist.sqlite, in the working directory]
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) database_url: Option<String>,

    /// The message bus: sqlite or postgres (queues in that database), sqs, rabbitmq (at
    /// ARCHIVIST_BUS_URL), or memory (one process: `demo` and tests) [default: the kind of
    /// ARCHIVIST_BUS_URL, by default the database bus in DATABASE_URL]
    #[arg(long, env = "ARCHIVIST_BUS", global = true, hide_env_values = true)]
    pub(crate) bus: Option<String>,

    /// The database bus's database, sqlite://PATH or postgres://…, or RabbitMQ's
    /// amqp://USER:PASSWORD@HOST:PORT/VHOST [default: DATABASE_URL]
    #[arg(long, env = "ARCHIVIST_BUS_URL", global = true, hide_env_values = true)]
    pub(crate) bus_url: Option<String>,

    /// Researchers listening on pending_research, for a bus that cannot count its consumers
    /// (SQS) [default: the bus's own count]
    #[arg(
        long,
        env = "ARCHIVIST_RESEARCHERS",
        global = true,
        hide_env_values = true
    )]
    pub(crate) researchers: Option<String>,

    /// How long a lease lasts without renewal, as 90s, 15m, 2h [default: 2h; for `demo`, 5s]
    #[arg(
        long,
        env = "ARCHIVIST_LEASE_DURATION",
        global = true,
        hide_env_values = true
    )]
    pub(crate) lease_duration: Option<String>,

    /// The most clips in one work item
    #[arg(
        long,
        env = "ARCHIVIST_MAX_CLIPS",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_MAX_CLIPS
    )]
    pub(crate) max_clips: String,

    /// Results waiting on completed_research at which work assignment leases nothing until
    /// they are recorded (0: no limit)
    #[arg(
        long,
        env = "ARCHIVIST_MAX_RESULTS_WAITING",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_MAX_RESULTS_WAITING
    )]
    pub(crate) max_results_waiting: String,

    /// Receives before a message that keeps failing goes to the dead-letter queue
    #[arg(
        long,
        env = "ARCHIVIST_MAX_RECEIVES",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_MAX_RECEIVES
    )]
    pub(crate) max_receives: String,

    /// The queue curators send episodes to
    #[arg(
        long,
        env = "ARCHIVIST_EPISODES_QUEUE",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_EPISODES_QUEUE
    )]
    pub(crate) episodes_queue: String,

    /// The queue curators send clips to
    #[arg(
        long,
        env = "ARCHIVIST_CLIPS_QUEUE",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_CLIPS_QUEUE
    )]
    pub(crate) clips_queue: String,

    /// The queue work items are published to
    #[arg(
        long,
        env = "ARCHIVIST_PENDING_RESEARCH_QUEUE",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_PENDING_RESEARCH_QUEUE
    )]
    pub(crate) pending_research_queue: String,

    /// The queue researchers send results to
    #[arg(
        long,
        env = "ARCHIVIST_COMPLETED_RESEARCH_QUEUE",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_COMPLETED_RESEARCH_QUEUE
    )]
    pub(crate) completed_research_queue: String,

    /// Where the completed-research archivist announces each episode fully researched
    /// (EpisodeResearched, once each time an episode's last pair is recorded); the queue must
    /// exist (`archivist queues` creates it). Unset: not announced
    #[arg(
        long = "announce",
        value_name = "QUEUE",
        env = "ARCHIVIST_ANNOUNCE_QUEUE",
        global = true,
        hide_env_values = true
    )]
    pub(crate) announce_queue: Option<String>,

    /// How long to keep trying to reach the datastore and the bus at start before giving up
    /// (exit 1)
    #[arg(
        long,
        env = "ARCHIVIST_CONNECT_TIMEOUT",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_CONNECT_TIMEOUT
    )]
    pub(crate) connect_timeout: String,

    /// How long to wait for archivists to finish the message in hand after SIGINT/SIGTERM
    #[arg(
        long,
        env = "ARCHIVIST_SHUTDOWN_TIMEOUT",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_SHUTDOWN_TIMEOUT
    )]
    pub(crate) shutdown_timeout: String,

    /// How long a one-shot run (`--once`, or without `--every`) keeps retrying an operation
    /// while the datastore or the bus is unreachable before it gives up (exit 1, nothing lost);
    /// long-running archivists retry for as long as an outage lasts
    #[arg(
        long,
        env = "ARCHIVIST_RETRY_BUDGET",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_RETRY_BUDGET
    )]
    pub(crate) retry_budget: String,

    /// The longest random wait before a work-assignment run starts, so that cron runs on
    /// several hosts do not hit the datastore at the same second (`0s`: none)
    #[arg(
        long,
        env = "ARCHIVIST_START_JITTER",
        global = true,
        hide_env_values = true,
        default_value = DEFAULT_START_JITTER
    )]
    pub(crate) start_jitter: String,

    /// Serve Prometheus metrics (/metrics) and health checks (/healthz, /readyz) on this
    /// address, as 127.0.0.1:9898, while the process runs; `run` serves the status page and
    /// its JSON (/api/…) there too [default: none]
    #[arg(
        long,
        env = "ARCHIVIST_METRICS_ADDR",
        global = true,
        hide_env_values = true
    )]
    pub(crate) metrics_addr: Option<String>,

    /// Log lines as `text` (for people; coloured on a terminal) or `json` (one object a line,
    /// for a log system: the archivist's name, message and lease ids as fields)
    #[arg(
        long,
        env = "ARCHIVIST_LOG_FORMAT",
        global = true,
        hide_env_values = true,
        default_value = "text"
    )]
    pub(crate) log_format: String,
}

/// The default datastore, relative to the working directory.
pub(crate) const DEFAULT_DATABASE_URL: &str = "sqlite://archivist.sqlite";
/// The default lease, as the contract sets it.
const DEFAULT_LEASE: Duration = Duration::from_secs(2 * 60 * 60);
/// The longest lease we accept: longer ones are almost certainly a typo (`2000h`).
const MAX_LEASE: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// The longest queue name: SQS allows 80 characters and we append `_dead_letter` (12).
const MAX_QUEUE_NAME: usize = 68;
/// The longest start jitter: a cron run should start within its minute.
const MAX_START_JITTER: Duration = Duration::from_secs(60);
/// SQS's limit on `maxReceiveCount`.
const MAX_MAX_RECEIVES: u32 = 1000;

/// Which bus the queues live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BusKind {
    /// In this process only.
    Memory,
    /// Amazon SQS (or an emulator), configured as the AWS SDK reads its environment.
    Sqs,
    /// Queues in an SQLite database (the bus URL's).
    Sqlite,
    /// Queues in a Postgres database (the bus URL's).
    Postgres,
    /// RabbitMQ at the bus URL (`amqp://…`).
    Rabbitmq,
}

impl BusKind {
    /// Whether the queues live in a database.
    pub(crate) fn is_database(self) -> bool {
        matches!(self, BusKind::Sqlite | BusKind::Postgres)
    }

    /// The database bus of the kind of `url`.
    fn of_url(url: &str) -> Option<BusKind> {
        if url.starts_with("sqlite:") {
            Some(BusKind::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Some(BusKind::Postgres)
        } else if is_amqp_url(url) {
            Some(BusKind::Rabbitmq)
        } else {
            None
        }
    }
}

/// Whether `url` is a RabbitMQ URL.
fn is_amqp_url(url: &str) -> bool {
    url.starts_with("amqp://") || url.starts_with("amqps://")
}

/// The four queue names.
#[derive(Debug, Clone)]
pub(crate) struct Queues {
    pub(crate) episodes: String,
    pub(crate) clips: String,
    pub(crate) pending_research: String,
    pub(crate) completed_research: String,
    /// Where episodes fully researched are announced (ARCHIVIST_ANNOUNCE_QUEUE), if anywhere.
    pub(crate) announce: Option<String>,
}

impl Queues {
    /// The four, in pipeline order, and the announcement queue when there is one.
    pub(crate) fn all(&self) -> Vec<&str> {
        let mut all = vec![
            self.episodes.as_str(),
            &self.clips,
            &self.pending_research,
            &self.completed_research,
        ];
        all.extend(self.announce.as_deref());
        all
    }
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// DATABASE_URL when it was given.
    pub(crate) database_url: Option<String>,
    pub(crate) bus: BusKind,
    /// ARCHIVIST_BUS_URL when it was given (only the database bus reads it).
    pub(crate) bus_url: Option<String>,
    pub(crate) researchers: Option<u64>,
    /// ARCHIVIST_LEASE_DURATION when it was given.
    pub(crate) lease_duration: Option<Duration>,
    /// Whether the lease length was given as `--lease-duration` (not from the environment).
    pub(crate) lease_on_command_line: bool,
    pub(crate) max_clips: u32,
    /// Results waiting to be recorded at which work assignment holds back; 0: never.
    pub(crate) max_results_waiting: u32,
    pub(crate) max_receives: u32,
    pub(crate) queues: Queues,
    pub(crate) connect_timeout: Duration,
    pub(crate) shutdown_timeout: Duration,
    /// How long a one-shot run retries one operation through an outage.
    pub(crate) retry_budget: Duration,
    /// The longest random wait before a pending-research run.
    pub(crate) start_jitter: Duration,
    /// Where to serve /metrics, /healthz and /readyz (ARCHIVIST_METRICS_ADDR), if anywhere.
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// ARCHIVIST_PRESENCE_WINDOW: how long remote researchers count after they were seen.
    pub(crate) presence_window: Duration,
}

impl Config {
    /// Checks the global options; the error names the variable and flag at fault.
    pub(crate) fn from_args(args: &GlobalArgs) -> Result<Config, UsageError> {
        let database_url = args
            .database_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string);
        if let Some(url) = &database_url {
            check_database_url(url)?;
        }
        let bus_url = args
            .bus_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string);
        let chosen = args
            .bus
            .as_deref()
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .map(str::to_ascii_lowercase);
        let effective_bus_url = bus_url
            .clone()
            .or_else(|| database_url.clone())
            .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_string());
        let bus = match chosen.as_deref() {
            Some("memory") => BusKind::Memory,
            Some("sqs") => BusKind::Sqs,
            Some("sqlite") => BusKind::Sqlite,
            Some("postgres" | "postgresql") => BusKind::Postgres,
            Some("rabbitmq" | "amqp") => BusKind::Rabbitmq,
            Some(other) => {
                return Err(UsageError(format!(
                    "invalid ARCHIVIST_BUS (--bus) {other:?}: expected sqlite, postgres, sqs, \
                     rabbitmq or memory"
                )))
            }
            None => BusKind::of_url(&effective_bus_url).ok_or_else(|| {
                UsageError(format!(
                    "ARCHIVIST_BUS_URL (--bus-url) {:?}: expected sqlite://…, postgres://… or \
                     amqp://…",
                    datastore::redact_url(&effective_bus_url)
                ))
            })?,
        };
        if bus.is_database() && BusKind::of_url(&effective_bus_url) != Some(bus) {
            let kind = if bus == BusKind::Sqlite {
                "sqlite"
            } else {
                "postgres"
            };
            return Err(UsageError(format!(
                "ARCHIVIST_BUS={kind} keeps its queues in ARCHIVIST_BUS_URL (default \
                 DATABASE_URL), which must then be a {kind}:// URL, not {:?}",
                datastore::redact_url(&effective_bus_url)
            )));
        }
        if bus == BusKind::Rabbitmq && !bus_url.as_deref().is_some_and(is_amqp_url) {
            return Err(UsageError(match &bus_url {
                Some(url) => format!(
                    "ARCHIVIST_BUS=rabbitmq needs ARCHIVIST_BUS_URL (--bus-url) to be an \
                     amqp://USER:PASSWORD@HOST:PORT/VHOST or amqps:// URL, not {:?}",
                    datastore::redact_url(url)
                ),
                None => "ARCHIVIST_BUS=rabbitmq needs ARCHIVIST_BUS_URL (--bus-url): the \
                         broker's amqp://USER:PASSWORD@HOST:PORT/VHOST URL"
                    .to_string(),
            }));
        }
        if let Some(url) = &bus_url {
            if bus.is_database() {
                check_database_url(url)?;
            }
        }
        let researchers = match args.researchers.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => Some(s.parse::<u64>().map_err(|_| {
                UsageError(format!(
                    "invalid ARCHIVIST_RESEARCHERS (--researchers) {s:?}: expected a whole number \
                     of researchers, 0 or more"
                ))
            })?),
        };
        let lease_duration = match args.lease_duration.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => Some(duration(
                "ARCHIVIST_LEASE_DURATION (--lease-duration)",
                s,
                MAX_LEASE,
            )?),
        };
        let max_clips = number(
            "ARCHIVIST_MAX_CLIPS (--max-clips)",
            or_default(&args.max_clips, DEFAULT_MAX_CLIPS),
            1,
            archivist::messages::MAX_CLIPS_PER_ITEM as u32,
        )?;
        let max_results_waiting = number(
            "ARCHIVIST_MAX_RESULTS_WAITING (--max-results-waiting)",
            or_default(&args.max_results_waiting, DEFAULT_MAX_RESULTS_WAITING),
            0,
            u32::MAX,
        )?;
        let max_receives = number(
            "ARCHIVIST_MAX_RECEIVES (--max-receives)",
            or_default(&args.max_receives, DEFAULT_MAX_RECEIVES),
            1,
            MAX_MAX_RECEIVES,
        )?;
        let queues = Queues {
            episodes: queue_name(
                "ARCHIVIST_EPISODES_QUEUE (--episodes-queue)",
                or_default(&args.episodes_queue, DEFAULT_EPISODES_QUEUE),
            )?,
            clips: queue_name(
                "ARCHIVIST_CLIPS_QUEUE (--clips-queue)",
                or_default(&args.clips_queue, DEFAULT_CLIPS_QUEUE),
            )?,
            pending_research: queue_name(
                "ARCHIVIST_PENDING_RESEARCH_QUEUE (--pending-research-queue)",
                or_default(&args.pending_research_queue, DEFAULT_PENDING_RESEARCH_QUEUE),
            )?,
            completed_research: queue_name(
                "ARCHIVIST_COMPLETED_RESEARCH_QUEUE (--completed-research-queue)",
                or_default(
                    &args.completed_research_queue,
                    DEFAULT_COMPLETED_RESEARCH_QUEUE,
                ),
            )?,
            announce: match args.announce_queue.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(q) => Some(queue_name("ARCHIVIST_ANNOUNCE_QUEUE (--announce)", q)?),
            },
        };
        let names = queues.all();
        for (i, a) in names.iter().enumerate() {
            if names[i + 1..].contains(a) {
                return Err(UsageError(format!(
                    "queue name {a:?} is used for two different queues: each of \
                     ARCHIVIST_EPISODES_QUEUE, ARCHIVIST_CLIPS_QUEUE, \
                     ARCHIVIST_PENDING_RESEARCH_QUEUE, ARCHIVIST_COMPLETED_RESEARCH_QUEUE and \
                     ARCHIVIST_ANNOUNCE_QUEUE needs its own"
                )));
            }
        }
        let connect_timeout = duration(
            "ARCHIVIST_CONNECT_TIMEOUT (--connect-timeout)",
            or_default(&args.connect_timeout, DEFAULT_CONNECT_TIMEOUT),
            MAX_LEASE,
        )?;
        let shutdown_timeout = duration(
            "ARCHIVIST_SHUTDOWN_TIMEOUT (--shutdown-timeout)",
            or_default(&args.shutdown_timeout, DEFAULT_SHUTDOWN_TIMEOUT),
            MAX_LEASE,
        )?;
        let retry_budget = duration(
            "ARCHIVIST_RETRY_BUDGET (--retry-budget)",
            or_default(&args.retry_budget, DEFAULT_RETRY_BUDGET),
            MAX_LEASE,
        )?;
        // Zero is allowed here: no jitter.
        let jitter = or_default(&args.start_jitter, DEFAULT_START_JITTER);
        let start_jitter = parse_duration(jitter).map_err(|e| {
            UsageError(format!(
                "invalid ARCHIVIST_START_JITTER (--start-jitter) {:?}: {e}",
                args.start_jitter
            ))
        })?;
        if start_jitter > MAX_START_JITTER {
            return Err(UsageError(format!(
                "invalid ARCHIVIST_START_JITTER (--start-jitter) {:?}: at most {} allowed",
                args.start_jitter,
                humantime::format_duration(MAX_START_JITTER)
            )));
        }
        let metrics_addr = match args.metrics_addr.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => Some(resolve_addr(s).map_err(|why| {
                UsageError(format!(
                    "invalid ARCHIVIST_METRICS_ADDR (--metrics-addr) {s:?}: {why}"
                ))
            })?),
        };
        Ok(Config {
            metrics_addr,
            database_url,
            bus,
            bus_url,
            researchers,
            lease_duration,
            lease_on_command_line: false,
            max_clips,
            max_results_waiting,
            max_receives,
            queues,
            connect_timeout,
            shutdown_timeout,
            retry_budget,
            start_jitter,
            presence_window: presence_window()?,
        })
    }

    /// DATABASE_URL, or the default SQLite file in the working directory.
    pub(crate) fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_string())
    }

    /// The database bus's database: ARCHIVIST_BUS_URL, else the datastore's.
    pub(crate) fn bus_url(&self) -> String {
        self.bus_url.clone().unwrap_or_else(|| self.database_url())
    }

    /// Retries of passing failures: a long-running archivist rides out an outage however long
    /// it lasts; a one-shot (cron) run gives up past ARCHIVIST_RETRY_BUDGET, so that the next
    /// run, not this one, carries on.
    pub(crate) fn retry(&self, long_running: bool) -> archivist::RetryPolicy {
        if long_running {
            archivist::RetryPolicy::forever()
        } else {
            archivist::RetryPolicy::within(self.retry_budget)
        }
    }

    /// The lease duration for production runs: ARCHIVIST_LEASE_DURATION or 2h.
    pub(crate) fn lease(&self) -> chrono::Duration {
        to_chrono(self.lease_duration.unwrap_or(DEFAULT_LEASE))
    }
}

/// A std duration as a chrono one. Durations here are checked to be at most [`MAX_LEASE`], so
/// the conversion cannot overflow; the fallback is only there to avoid a panic path.
pub(crate) fn to_chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// `value`, or `default` when it is empty: a variable set to nothing means its default.
fn or_default<'a>(value: &'a str, default: &'a str) -> &'a str {
    let v = value.trim();
    if v.is_empty() {
        default
    } else {
        v
    }
}

/// ARCHIVIST_PRESENCE_WINDOW: how long a remote researcher (and a gateway's own receivers)
/// count for the work-assignment rule after they were last seen. An environment variable
/// only (no option): every gateway and every `pending-research` must agree on it, and tests
/// shorten it rather than wait a minute.
fn presence_window() -> Result<Duration, UsageError> {
    const NAME: &str = "ARCHIVIST_PRESENCE_WINDOW";
    match std::env::var(NAME) {
        Err(std::env::VarError::NotPresent) => Ok(datastore::PRESENCE_WINDOW),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(UsageError(format!("invalid {NAME}: not UTF-8")))
        }
        Ok(value) if value.trim().is_empty() => Ok(datastore::PRESENCE_WINDOW),
        Ok(value) => {
            // At most the contract's minute: a remote researcher that went away stops
            // counting within a minute.
            let window = duration(NAME, value.trim(), datastore::PRESENCE_WINDOW)?;
            if window < Duration::from_secs(1) {
                return Err(UsageError(format!(
                    "invalid {NAME} {value:?}: at least 1s allowed"
                )));
            }
            Ok(window)
        }
    }
}

fn duration(name: &str, value: &str, max: Duration) -> Result<Duration, UsageError> {
    let d =
        parse_duration(value).map_err(|e| UsageError(format!("invalid {name} {value:?}: {e}")))?;
    if d.is_zero() {
        return Err(UsageError(format!(
            "invalid {name} {value:?}: must be longer than zero"
        )));
    }
    if d > max {
        return Err(UsageError(format!(
            "invalid {name} {value:?}: at most {} allowed",
            humantime::format_duration(max)
        )));
    }
    Ok(d)
}

fn number(name: &str, value: &str, min: u32, max: u32) -> Result<u32, UsageError> {
    let n: u32 = value.trim().parse().map_err(|_| {
        UsageError(format!(
            "invalid {name} {value:?}: expected a whole number from {min} to {max}"
        ))
    })?;
    if !(min..=max).contains(&n) {
        return Err(UsageError(format!(
            "invalid {name} {value:?}: must be from {min} to {max}"
        )));
    }
    Ok(n)
}

fn queue_name(name: &str, value: &str) -> Result<String, UsageError> {
    let v = value.trim();
    let ok = !v.is_empty()
        && v.len() <= MAX_QUEUE_NAME
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(v.to_string())
    } else {
        Err(UsageError(format!(
            "invalid {name} {value:?}: a queue name is 1 to {MAX_QUEUE_NAME} letters, digits, \
             '_' or '-'"
        )))
    }
}

/// Checks a queue name given on the command line (`send`, `receive`).
pub(crate) fn check_queue_arg(value: &str) -> Result<String, UsageError> {
    queue_name("queue name", value)
}

fn check_database_url(url: &str) -> Result<(), UsageError> {
    let known = ["sqlite:", "postgres:", "postgresql:"];
    if known.iter().any(|k| url.starts_with(k)) {
        Ok(())
    } else {
        Err(UsageError(format!(
            "invalid DATABASE_URL (--database-url) {:?}: expected sqlite://PATH or \
             postgres://USER@HOST/DATABASE",
            datastore::redact_url(url)
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use clap::Parser;

    /// The global options alone, as the command line flattens them.
    #[derive(Debug, Parser)]
    struct Globals {
        #[command(flatten)]
        global: GlobalArgs,
    }

    fn config(args: &[&str]) -> Result<Config, UsageError> {
        let mut argv = vec!["archivist"];
        argv.extend_from_slice(args);
        let parsed = Globals::try_parse_from(argv).unwrap();
        Config::from_args(&parsed.global)
    }

    #[test]
    fn defaults() {
        let c = config(&["--database-url", "sqlite://x.db"]).unwrap();
        // The database bus, in the datastore's own database.
        assert_eq!(c.bus, BusKind::Sqlite);
        assert_eq!(c.bus_url(), "sqlite://x.db");
        let c = config(&["--database-url", "postgres://h/db"]).unwrap();
        assert_eq!(c.bus, BusKind::Postgres);
        let c = config(&[
            "--database-url",
            "postgres://h/db",
            "--bus-url",
            "sqlite://q.db",
        ])
        .unwrap();
        assert_eq!(
            (c.bus, c.bus_url().as_str()),
            (BusKind::Sqlite, "sqlite://q.db")
        );
        assert_eq!(c.max_clips, 50);
        assert_eq!(c.max_receives, 5);
        assert_eq!(c.lease(), chrono::Duration::hours(2));
        assert_eq!(c.queues.all()[3], "completed_research");
    }

    #[test]
    fn errors_name_the_variable() {
        let e = config(&["--max-clips", "0"]).unwrap_err();
        assert!(e.0.contains("ARCHIVIST_MAX_CLIPS"), "{e}");
        let e = config(&["--lease-duration", "0s"]).unwrap_err();
        assert!(e.0.contains("ARCHIVIST_LEASE_DURATION"), "{e}");
        let e = config(&["--lease-duration", "soon"]).unwrap_err();
        assert!(e.0.contains("ARCHIVIST_LEASE_DURATION"), "{e}");
        let e = config(&["--bus", "kafka"]).unwrap_err();
        assert!(e.0.contains("ARCHIVIST_BUS"), "{e}");
        let e = config(&["--database-url", "mysql://u:pw@h/db"]).unwrap_err();
        assert!(e.0.contains("DATABASE_URL") && !e.0.contains("pw"), "{e}");
        let e = config(&["--clips-queue", "curated_episodes"]).unwrap_err();
        assert!(e.0.contains("two different queues"), "{e}");
        let e = config(&["--researchers=-1"]).unwrap_err();
        assert!(e.0.contains("ARCHIVIST_RESEARCHERS"), "{e}");
    }
}
