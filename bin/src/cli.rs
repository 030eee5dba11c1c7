//! The command line: clap definitions of the global options and every subcommand.
//!
//! Options that the contract ties to an environment variable are read as plain strings here
//! and checked in `config.rs`, so that a bad value is reported with the variable's name (clap's
//! own messages name only the flag).

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::values::{parse_duration, parse_interval};

// Defaults of the options with a default, also used in `config.rs` for a variable that is set
// but empty (`ARCHIVIST_MAX_CLIPS=` in a compose file means "the default", as for the others).
pub(crate) const DEFAULT_MAX_CLIPS: &str = "50";
pub(crate) const DEFAULT_MAX_RECEIVES: &str = "5";
pub(crate) const DEFAULT_MAX_RESULTS_WAITING: &str = "10000";
pub(crate) const DEFAULT_EPISODES_QUEUE: &str = "curated_episodes";
pub(crate) const DEFAULT_CLIPS_QUEUE: &str = "curated_clips";
pub(crate) const DEFAULT_PENDING_RESEARCH_QUEUE: &str = "pending_research";
pub(crate) const DEFAULT_COMPLETED_RESEARCH_QUEUE: &str = "completed_research";
pub(crate) const DEFAULT_CONNECT_TIMEOUT: &str = "30s";
pub(crate) const DEFAULT_SHUTDOWN_TIMEOUT: &str = "30s";
pub(crate) const DEFAULT_RETRY_BUDGET: &str = "30s";
pub(crate) const DEFAULT_START_JITTER: &str = "5s";
pub(crate) const DEFAULT_SERVE_ADDR: &str = "127.0.0.1:9898";

/// The archivist: stores curated episodes and clips, hands research work to researchers a
/// lease at a time, and records what they find.
#[derive(Debug, Parser)]
#[command(name = "archivist", version, propagate_version = true)]
#[command(
    after_help = "Exit codes: 0 finished (poison messages set aside included), \
1 fatal error (datastore or bus unreachable after retries), 2 bad usage or configuration.\n\
Logs go to standard error (filter with RUST_LOG, default info); standard output carries only \
the command's output."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

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

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the datastore's schema, then exit
    Migrate,
    /// The episodes archivist: store curated episodes (long-running)
    Episodes(IngestArgs),
    /// The clips archivist: store curated clips (long-running)
    Clips(IngestArgs),
    /// One work-assignment run: lease work and publish it to researchers, then exit (for cron)
    #[command(after_help = "Examples:\n  \
        archivist pending-research                  # one run (cron), researchers counted by the bus\n  \
        archivist pending-research --every 1m       # repeat every minute until SIGINT/SIGTERM\n  \
        ARCHIVIST_BUS=sqs ARCHIVIST_RESEARCHERS=8 archivist pending-research")]
    PendingResearch(RepeatArgs),
    /// Drain the completed-research queue: record results, renew or end leases, then exit
    CompletedResearch(RepeatArgs),
    /// All four archivists in one long-running process
    #[command(after_help = "Examples:\n  \
        archivist run                               # everything on ./archivist.sqlite\n  \
        DATABASE_URL=postgres://archivist@db/archive archivist run --every 30s")]
    Run(RunArgs),
    /// The whole pipeline with built-in curators and researchers, its queues in the datastore's
    /// database (ARCHIVIST_BUS=memory: inside the process), ending with a summary; the results
    /// stay in the datastore
    #[command(long_about = DEMO_ABOUT)]
    #[command(after_help = "Examples:\n  \
        archivist demo                              # in ./archivist.sqlite, then: archivist status\n  \
        archivist demo --json | jq .matched_pairs\n  \
        DATABASE_URL=sqlite://try.sqlite archivist demo   # somewhere else (new or empty)")]
    Demo(DemoArgs),
    /// Publish each line of standard input (JSON) as one message to QUEUE
    // Not wrapped: an example message is one line, to be copied whole.
    #[command(after_help = SEND_HELP, term_width = 0)]
    Send(SendArgs),
    /// Take messages off QUEUE, print each body as one line, and acknowledge them
    #[command(after_help = "Examples:\n  \
        archivist receive pending_research --max 1 --wait 1m   # a researcher takes one work item\n  \
        archivist receive curated_clips --dead-letters --peek   # what was set aside, and why; left in place\n  \
        archivist receive curated_clips --dead-letters          # the same, taken off for good")]
    Receive(ReceiveArgs),
    /// Move QUEUE's dead letters back onto it (after the fault that set them aside is
    /// fixed), and say how many
    #[command(after_help = "Examples:\n  \
        archivist redrive curated_clips --dry-run   # how many would move; nothing moves\n  \
        archivist redrive curated_clips --max 2     # try two first\n  \
        archivist redrive curated_clips             # then the rest\n\n\
Each message goes back as new: its receive count starts again, its reason is dropped. Dead \
letters taken off with `archivist receive QUEUE --dead-letters` are gone: there is nothing left \
to redrive of them. On the database bus the move is one transaction (interrupted: all moved or none); on SQS and RabbitMQ \
it goes a batch at a time, each message sent before it leaves the dead-letter queue (a crash in \
between can leave that batch in both: delivered twice, never lost).")]
    Redrive(RedriveArgs),
    /// Counts of episodes, clips, pairs, researched pairs, matches, leases and queue depths
    #[command(after_help = "Examples:\n  \
        archivist status                            # a table\n  \
        archivist status --json | jq '.researched_pairs / .research_pairs'")]
    Status(StatusArgs),
    /// Recorded matches as JSON lines (episode, clip, offsets)
    #[command(after_help = "Examples:\n  \
        archivist matches --clip 'Intro Jingle'\n  \
        archivist matches --episode 'Episode 4012: The Archive' --limit 10\n  \
        archivist matches --format table --limit 20             # for reading\n  \
        archivist matches | jq -r '.clip_title' | sort | uniq -c")]
    Matches(MatchesArgs),
    /// Create the queues and their dead-letter queues if missing, and show their depths
    Queues(QueuesArgs),
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell
    #[command(after_help = "Examples:\n  \
        archivist completions bash > ~/.local/share/bash-completion/completions/archivist\n  \
        archivist completions zsh > \"${fpath[1]}/_archivist\"\n  \
        archivist completions fish > ~/.config/fish/completions/archivist.fish")]
    Completions(CompletionsArgs),
    /// Serve the status page, its JSON (/api/…), metrics and health checks on --addr until
    /// SIGINT/SIGTERM; reads only
    #[command(after_help = "Examples:\n  \
        archivist serve                             # http://127.0.0.1:9898/ on ./archivist.sqlite\n  \
        archivist serve --addr 0.0.0.0:9898         # reachable from other hosts\n  \
        curl -s 127.0.0.1:9898/api/status")]
    Serve(ServeArgs),
    /// Curators: send one EpisodeInfo per audio item of podcast feeds (`curate feed URL…`),
    /// one ClipInfo per audio file (`curate clips PATH…`), each only when new or changed
    Curate(crate::commands::curate::CurateArgs),
    /// Where each clip occurs in an episode, found from the audio by the reference analyser
    /// (local files or URLs; no datastore, no bus)
    #[command(long_about = crate::commands::analyse::ABOUT)]
    #[command(after_help = crate::commands::analyse::EXAMPLES)]
    Analyse(crate::commands::analyse::AnalyseArgs),
    /// Make failed research pairs researchable again (all, or of --episode and/or --clip)
    #[command(after_help = "Examples:\n  \
        archivist status                            # failed pairs and their common reasons\n  \
        archivist retry-failed --episode 'Episode 4012: The Archive'\n  \
        archivist retry-failed --json               # every failed pair")]
    RetryFailed(crate::commands::retry_failed::RetryFailedArgs),
    /// A researcher: take work items off pending_research, fetch their media, run an analyser
    /// on each and send one result per clip to completed_research (long-running)
    #[command(long_about = crate::commands::research::ABOUT)]
    #[command(after_help = crate::commands::research::EXAMPLES)]
    Research(crate::commands::research::ResearchArgs),
}

const DEMO_ABOUT: &str = "The whole pipeline in one process: built-in curators send a month \
of a daily show's episodes and a dozen clips (and two poison messages), with their audio \
synthesised into files beside the datastore (archivist-demo-media/ for archivist.sqlite) and the \
truth of where each clip was put; built-in researchers (`research`'s runtime) run the reference \
analyser on it, one of them stalling mid-item on purpose so that its lease expires and its work \
is taken over; and the four archivists run as in production. Ends with a summary: the \
analyser's recall, false matches and offset error against the truth, and a check that every \
research pair was researched exactly once (exit 0 only then).\n\n\
The datastore is DATABASE_URL, by default archivist.sqlite in the working directory; it must \
be new or empty (a demo never mixes with real data), and the results stay there to explore \
with `status`, `matches` and the status page (`serve`). The lease is 5s, so that the stalled \
item's work comes back quickly, unless --lease-duration is \
given on the command line (ARCHIVIST_LEASE_DURATION, meant for production runs, is ignored).";

/// Options of the ingestion archivists.
#[derive(Debug, Args)]
pub(crate) struct IngestArgs {
    /// Drain the queue and exit instead of waiting for more
    #[arg(long)]
    pub(crate) once: bool,
}

/// Options of the short-run archivists.
#[derive(Debug, Args)]
pub(crate) struct RepeatArgs {
    /// Repeat the run at this interval (as 30s, 5m) until SIGINT/SIGTERM, instead of running
    /// once. A flag only: an ARCHIVIST_EVERY meant for `run` must not turn cron runs into loops
    #[arg(long, value_parser = parse_interval)]
    pub(crate) every: Option<Duration>,
}

/// Which addresses media and feed fetches may connect to (`research`, `curate feed`,
/// `analyse`): see `address_policy`.
#[derive(Debug, Args)]
pub(crate) struct AddressArgs {
    /// Let fetches connect to loopback, private, link-local, unique-local and other
    /// non-public addresses (a show served from a NAS or this machine). Without it, media
    /// addresses and redirects are refused when they resolve to such an address, since they
    /// come from feeds written by others; a feed or file address typed on the command line
    /// is fetched as given
    #[arg(
        long,
        env = "ARCHIVIST_ALLOW_PRIVATE_ADDRESSES",
        hide_env_values = true
    )]
    pub(crate) allow_private_addresses: bool,
    /// For tests only: addresses taken for public ones (a test has no public address)
    #[arg(
        long,
        hide = true,
        env = "ARCHIVIST_TEST_PUBLIC_ADDRESSES",
        value_delimiter = ','
    )]
    pub(crate) test_public_addresses: Vec<std::net::IpAddr>,
}

impl AddressArgs {
    pub(crate) fn policy(&self) -> net::address_policy::AddressPolicy {
        net::address_policy::AddressPolicy::new(
            self.allow_private_addresses,
            self.test_public_addresses.clone(),
        )
    }
}

/// Options of `run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Interval of the pending-research and completed-research runs
    #[arg(
        long,
        env = "ARCHIVIST_EVERY",
        hide_env_values = true,
        default_value = "10s",
        value_parser = parse_interval
    )]
    pub(crate) every: Duration,
}

/// Options of `demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Print the summary as one JSON object instead of text
    #[arg(long)]
    pub(crate) json: bool,
    /// Research slots of the built-in researcher (one item's analyser stalls on purpose)
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub(crate) researcher_tasks: u32,
    /// Give up if the pipeline has not finished within this long
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
}

/// `send --help`'s examples: the commands, then one complete message of each type a curator
/// or researcher sends (the book's *Messages*, docs/src/messages.md, shows the same lines; a test checks both).
const SEND_HELP: &str = concat!(
    "Examples:\n  \
     archivist send curated_episodes < episodes.jsonl\n  \
     jq -c '.[]' clips.json | archivist send curated_clips   # one JSON message per line\n  \
     archivist send --check curated_clips < clips.jsonl      # validate only: nothing is sent\n  \
     echo 'not json' | archivist send --raw curated_clips    # try out poison handling\n\n\
     One message per line. An EpisodeInfo (curated_episodes):\n  ",
    include_str!("examples/episode.json"),
    "A ClipInfo (curated_clips):\n  ",
    include_str!("examples/clip.json"),
    "A PendingResearchItem (pending_research: what work assignment publishes and a researcher \
     takes; sent by hand only to try out a researcher):\n  ",
    include_str!("examples/pending.json"),
    "A CompletedResearchItem (completed_research; revoke_lease: true on a lease's last result; \
     \"failure\": \"reason\" in place of clip_offsets_ns for a pair that cannot be researched):\n  ",
    include_str!("examples/completed.json"),
);

/// Options of `send`.
#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The queue's name (on SQS, resolved to its URL)
    pub(crate) queue: String,
    /// Send lines as they are, without checking that each is JSON (to try out poison handling)
    #[arg(long, conflicts_with = "check")]
    pub(crate) raw: bool,
    /// Send nothing: check each line against QUEUE's message type with the archivists' own
    /// rules, and print each one they would set aside, with their reason
    #[arg(long)]
    pub(crate) check: bool,
}

/// Options of `receive`.
#[derive(Debug, Args)]
pub(crate) struct ReceiveArgs {
    /// The queue's name (on SQS, resolved to its URL)
    pub(crate) queue: String,
    /// The most messages to take
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max: u32,
    /// How long to wait for messages, as 0s, 5s, 1m
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub(crate) wait: Duration,
    /// Read the queue's dead-letter queue instead; each line is then {"body": …, "reason": …}.
    /// This takes them: `redrive` and `retry-failed` no longer find them (see --peek)
    #[arg(long)]
    pub(crate) dead_letters: bool,
    /// With --dead-letters: print them and leave them where they are, for `redrive`
    /// (the database buses: the oldest first; SQS: a sample of up to ten; RabbitMQ cannot look
    /// without taking, and says so)
    #[arg(long, requires = "dead_letters")]
    pub(crate) peek: bool,
}

/// Options of `redrive`.
#[derive(Debug, Args)]
pub(crate) struct RedriveArgs {
    /// The queue whose dead letters go back onto it (its name, not its dead-letter queue's)
    pub(crate) queue: String,
    /// The most dead letters to move [default: every one waiting when it starts]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max: Option<u64>,
    /// Count the dead letters that would move, and move none
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print one JSON object (queue, dead_letter_queue, dead_letters, would_move, moved,
    /// dry_run, interrupted) instead of a sentence
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print one JSON object instead of a table
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where to serve, HOST:PORT: an IP address or a host name of this machine, as
    /// localhost:9898 (port 0 picks a free one, named in the log)
    #[arg(
        long,
        env = "ARCHIVIST_SERVE_ADDR",
        hide_env_values = true,
        default_value = DEFAULT_SERVE_ADDR,
        value_parser = parse_addr
    )]
    pub(crate) addr: std::net::SocketAddr,
}

/// Parses HOST:PORT, resolving a host name.
fn parse_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    let s = if s.trim().is_empty() {
        DEFAULT_SERVE_ADDR
    } else {
        s.trim()
    };
    crate::values::resolve_addr(s)
}

/// Options of `matches`.
#[derive(Debug, Args)]
pub(crate) struct MatchesArgs {
    /// Only matches of the clip with this title
    #[arg(long)]
    pub(crate) clip: Option<String>,
    /// Only matches in episodes with this title
    #[arg(long)]
    pub(crate) episode: Option<String>,
    /// At most this many (latest aired episodes first)
    #[arg(long)]
    pub(crate) limit: Option<u64>,
    /// Only matches researched at or after DATE: RFC 3339 (`2026-01-02T03:04:05Z`) or a day
    /// (`2026-01-02`, from its midnight UTC), for incremental exports
    #[arg(long, value_name = "DATE", value_parser = parse_since)]
    pub(crate) since: Option<chrono::DateTime<chrono::Utc>>,
    /// `json`: one JSON object a line, for scripts; `table`: aligned columns, for people;
    /// `csv`: RFC 4180 with a header row, for spreadsheets
    #[arg(long, value_enum, default_value_t = MatchesFormat::Json)]
    pub(crate) format: MatchesFormat,
}

/// `--since`: an RFC 3339 time, or a day (its midnight UTC).
fn parse_since(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            format!(
                "{text:?} is neither an RFC 3339 time (2026-01-02T03:04:05Z) nor a day \
                 (2026-01-02)"
            )
        })
}

/// How `matches` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MatchesFormat {
    Json,
    Table,
    Csv,
}

/// Options of `completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// Options of `queues`.
#[derive(Debug, Args)]
pub(crate) struct QueuesArgs {
    /// Print one JSON object a queue instead of a table
    #[arg(long)]
    pub(crate) json: bool,
    /// Give existing queues the settings new ones get (ARCHIVIST_MAX_RECEIVES as their
    /// receive limit; on SQS also the retention), instead of only saying how they differ
    #[arg(long)]
    pub(crate) update: bool,
}

/// The configuration options each subcommand reads, by argument id: its `--help` lists only
/// these (the others are accepted, and ignored, so that one environment serves every command).
const USED_OPTIONS: &[(&str, &[&[&str]])] = &[
    ("migrate", &[DATASTORE, BUS, QUEUES, CONNECT, LOGS]),
    (
        "episodes",
        &[
            DATASTORE,
            BUS,
            &["episodes_queue"],
            CONNECT,
            SHUTDOWN,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
    (
        "clips",
        &[
            DATASTORE,
            BUS,
            &["clips_queue"],
            CONNECT,
            SHUTDOWN,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
    (
        "pending-research",
        &[
            DATASTORE,
            BUS,
            &["pending_research_queue", "completed_research_queue"],
            LEASING,
            CONNECT,
            SHUTDOWN,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
    (
        "completed-research",
        &[
            DATASTORE,
            BUS,
            &["completed_research_queue", "announce_queue"],
            CONNECT,
            SHUTDOWN,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
    (
        "run",
        &[
            DATASTORE, BUS, QUEUES, LEASING, CONNECT, SHUTDOWN, METRICS, LOGS,
        ],
    ),
    (
        "demo",
        &[
            DATASTORE,
            BUS,
            QUEUES,
            &["lease_duration", "max_clips"],
            CONNECT,
            SHUTDOWN,
            LOGS,
        ],
    ),
    ("send", &[DATASTORE, BUS, CONNECT, LOGS]),
    ("receive", &[DATASTORE, BUS, CONNECT, LOGS]),
    ("redrive", &[DATASTORE, BUS, CONNECT, RETRY, LOGS]),
    ("status", &[DATASTORE, BUS, QUEUES, CONNECT, LOGS]),
    ("matches", &[DATASTORE, CONNECT, LOGS]),
    ("queues", &[DATASTORE, BUS, QUEUES, CONNECT, LOGS]),
    ("completions", &[]),
    ("serve", &[DATASTORE, BUS, QUEUES, CONNECT, LOGS]),
    ("curate", crate::commands::curate::USED_OPTIONS),
    ("analyse", &[LOGS]),
    ("retry-failed", &[DATASTORE, CONNECT, LOGS]),
    (
        "research",
        &[
            DATASTORE,
            BUS,
            &["pending_research_queue", "completed_research_queue"],
            CONNECT,
            RETRY,
            METRICS,
            LOGS,
        ],
    ),
];
const DATASTORE: &[&str] = &["database_url"];
/// Subcommands that never create a datastore (a missing SQLite file is an error).
const READ_ONLY: &[&str] = &["status", "matches", "serve", "send", "receive", "redrive"];
const BUS: &[&str] = &["bus", "bus_url", "max_receives"];
const QUEUES: &[&str] = &[
    "episodes_queue",
    "clips_queue",
    "pending_research_queue",
    "completed_research_queue",
    "announce_queue",
];
const LEASING: &[&str] = &[
    "researchers",
    "lease_duration",
    "max_clips",
    "max_results_waiting",
    "start_jitter",
];
const CONNECT: &[&str] = &["connect_timeout"];
const SHUTDOWN: &[&str] = &["shutdown_timeout"];
const RETRY: &[&str] = &["retry_budget"];
const METRICS: &[&str] = &["metrics_addr"];
const LOGS: &[&str] = &["log_format"];

/// The command line, with each subcommand's help listing only the options it reads.
pub(crate) fn command() -> clap::Command {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let globals: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    for (sub, groups) in USED_OPTIONS {
        let used: Vec<&str> = groups.iter().flat_map(|g| g.iter().copied()).collect();
        cmd = cmd.mut_subcommand(*sub, |mut c| {
            // A subcommand's own copy of a global option wins over the propagated one: a
            // hidden copy keeps it accepted (and read, with its variable) but out of --help;
            // global, so that it reaches nested subcommands (`curate feed`) too.
            for a in globals
                .iter()
                .filter(|a| !used.contains(&a.get_id().as_str()))
            {
                c = c.arg(a.clone().global(true).hide(true));
            }
            // Subcommands that never create the datastore say so.
            if READ_ONLY.contains(sub) {
                if let Some(a) = globals.iter().find(|a| a.get_id() == "database_url") {
                    c = c.arg(a.clone().global(false).help(
                        "The datastore: sqlite://PATH (an existing file: `archivist migrate` \
                         creates it) or postgres://USER@HOST/DB [default: \
                         sqlite://archivist.sqlite, in the working directory]",
                    ));
                }
            }
            c
        });
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
