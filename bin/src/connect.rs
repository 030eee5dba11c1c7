//! Opening the adapters: the datastore (connect and migrate, retried until the connect
//! timeout) and the bus (SQS shared between processes, waited for until the same timeout;
//! in-memory for the demo; the API of `serve --api` for a remote participant; or an
//! explanation of why not).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use datastore::{redact_url, DataStore, DataStoreError};
use messagebus::api::{ApiBus, ApiConfig, ApiQueues, ApiToken};
use messagebus::rabbitmq::{RabbitBus, RabbitBusConfig};
use messagebus::sql::{PgBus, SqlBusConfig, SqliteBus};
use messagebus::sqs::{SqsBus, SqsConfig};
use messagebus::{Bus, BusError, MemoryBus, MemoryBusConfig, Receiver, Sender};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{BusKind, Config};
use crate::values::{usage, RemoteArgs};

/// The first wait between two connection attempts; doubled each time up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What one connection attempt came to.
enum Attempt<T, E> {
    /// Connected.
    Done(T),
    /// A passing failure: tried again while the budget lasts.
    Passing(E),
    /// A lasting failure (a refusal, bad configuration): given up at once with this error.
    Lasting(anyhow::Error),
}

/// The one retry policy of every adapter this file opens: attempts with a doubling backoff
/// ([`FIRST_BACKOFF`] to [`MAX_BACKOFF`]) until the budget (ARCHIVIST_CONNECT_TIMEOUT) is
/// spent, each attempt cut off at the budget's end, all of it cut short by the token.
struct ConnectRetry<'a> {
    /// What is connected to, as the errors and warnings name it ("the datastore
    /// postgres://…", credentials masked).
    name: String,
    /// How long connecting may take in all.
    budget: Duration,
    token: &'a CancellationToken,
}

impl<'a> ConnectRetry<'a> {
    /// Connecting to `name` within `config`'s connect timeout.
    fn new(config: &Config, token: &'a CancellationToken, name: String) -> Self {
        ConnectRetry {
            name,
            budget: config.connect_timeout,
            token,
        }
    }

    /// Runs `attempt` until it is done, fails lastingly, or the budget is spent.
    async fn run<T, E, F, Fut>(&self, mut attempt: F) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Attempt<T, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let name = &self.name;
        let budget = humantime::format_duration(self.budget);
        let interrupted = || anyhow!("interrupted while connecting to {name}");
        let gave_up = |attempts: u32, error: E| {
            anyhow::Error::new(error).context(format!(
                "{name} is unreachable after {attempts} attempts over {budget} \
                 (ARCHIVIST_CONNECT_TIMEOUT)"
            ))
        };
        let deadline = Instant::now() + self.budget;
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0u32;
        let mut last = None;
        loop {
            attempts += 1;
            let outcome = tokio::select! {
                _ = self.token.cancelled() => return Err(interrupted()),
                r = tokio::time::timeout_at(deadline, attempt()) => r,
            };
            let error = match outcome {
                Ok(Attempt::Done(done)) => {
                    tracing::debug!(attempt = attempts, "{name} answers");
                    return Ok(done);
                }
                Ok(Attempt::Lasting(e)) => return Err(e),
                Ok(Attempt::Passing(e)) => e,
                Err(_) => {
                    return Err(match last {
                        Some(e) => gave_up(attempts, e),
                        None => anyhow!(
                            "{name} is unreachable after {attempts} attempts over {budget} \
                             (ARCHIVIST_CONNECT_TIMEOUT): no answer within it"
                        ),
                    })
                }
            };
            if Instant::now() + backoff >= deadline {
                return Err(gave_up(attempts, error));
            }
            tracing::warn!(attempt = attempts, error = %error, retry_in = ?backoff, "{name} is not reachable yet");
            last = Some(error);
            tokio::select! {
                _ = self.token.cancelled() => return Err(interrupted()),
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// How a subcommand opens the datastore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    /// Create it if missing and bring its schema up to date (harmless when current), so
    /// that every subcommand that writes works on a new SQLite file or an empty database.
    Migrate,
    /// Change nothing: a missing datastore or an old schema is a usage error naming
    /// `archivist migrate` (`status`, `matches`; a read-only database role can run them).
    ReadOnly,
}

/// Opens the datastore at `url`, as `open` says.
///
/// Passing failures are retried until `config.connect_timeout`; then the error is fatal
/// (exit 1). A configuration problem is a usage error (exit 2).
pub(crate) async fn datastore(
    config: &Config,
    url: &str,
    token: &CancellationToken,
    open: Open,
) -> anyhow::Result<Arc<dyn DataStore>> {
    Ok(open_datastore(config, url, token, open).await?.0)
}

/// [`datastore`] with [`Open::Migrate`], and the migrations it applied.
pub(crate) async fn migrate_datastore(
    config: &Config,
    url: &str,
    token: &CancellationToken,
) -> anyhow::Result<Vec<String>> {
    Ok(open_datastore(config, url, token, Open::Migrate).await?.1)
}

/// The datastore, and the migrations it was missing when opened (applied, with
/// [`Open::Migrate`]).
async fn open_datastore(
    config: &Config,
    url: &str,
    token: &CancellationToken,
    open: Open,
) -> anyhow::Result<(Arc<dyn DataStore>, Vec<String>)> {
    let shown = redact_url(url);
    if open == Open::ReadOnly {
        if let Some(path) = missing_sqlite_file(url) {
            return Err(usage(format!(
                "no datastore at {} (DATABASE_URL {shown}): create it with `archivist \
                 migrate`, or run in the directory that holds it",
                path.display()
            )));
        }
    }
    if let Some(dir) = missing_sqlite_dir(url) {
        return Err(usage(format!(
            "DATABASE_URL {shown}: the directory {} does not exist (a missing SQLite file is \
             created, its directory is not)",
            dir.display()
        )));
    }
    let retry = ConnectRetry::new(config, token, format!("the datastore {shown}"));
    let (store, missing) = retry.run(|| open_datastore_once(url, &shown, open)).await?;
    if !missing.is_empty() && open == Open::ReadOnly {
        // Without the first migration there is no schema of ours at all.
        return Err(usage(if missing.iter().any(|m| m.starts_with("0001 ")) {
            format!(
                "no archivist schema in DATABASE_URL {shown}: create it with `archivist migrate`"
            )
        } else {
            format!(
                "the datastore's schema at DATABASE_URL {shown} is older than this archivist: \
                 missing migration {}; run `archivist migrate`",
                missing.join(", ")
            )
        }));
    }
    Ok((store, missing))
}

/// One attempt of [`open_datastore`]: connects, reads the missing migrations, refuses another
/// program's database, and with [`Open::Migrate`] migrates.
async fn open_datastore_once(
    url: &str,
    shown: &str,
    open: Open,
) -> Attempt<(Arc<dyn DataStore>, Vec<String>), DataStoreError> {
    let try_once = async {
        let store = datastore::connect(url).await?;
        let missing = store.missing_migrations().await?;
        // Migrations to apply (or missing, read-only): the database may be another
        // program's, whose migrations ours would be mixed into. Checked before anything
        // is written; a database with nothing to apply is ours already.
        if !missing.is_empty() {
            let foreign = datastore::foreign_migrations(url).await;
            if !foreign.is_empty() {
                return Ok(Err(foreign));
            }
        }
        if open == Open::Migrate {
            store.migrate().await?;
        }
        Ok::<_, DataStoreError>(Ok((store, missing)))
    };
    match try_once.await {
        Ok(Ok(opened)) => Attempt::Done(opened),
        Ok(Err(foreign)) => Attempt::Lasting(usage(foreign.explain("DATABASE_URL", shown))),
        Err(DataStoreError::Config(message)) => {
            Attempt::Lasting(usage(format!("DATABASE_URL {shown}: {message}")))
        }
        Err(e) => {
            if let Some(denied) = sqlite_permission_problem("DATABASE_URL", url) {
                return Attempt::Lasting(denied);
            }
            if !e.is_retryable() {
                return Attempt::Lasting(
                    anyhow::Error::new(e).context(format!("datastore {shown}")),
                );
            }
            Attempt::Passing(e)
        }
    }
}

/// The absolute path of the SQLite file `url` names when it does not exist (in memory: never).
pub(crate) fn missing_sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path.contains(":memory:") || Path::new(path).exists() {
        return None;
    }
    Some(std::path::absolute(path).unwrap_or_else(|_| PathBuf::from(path)))
}

/// Why this user cannot open the SQLite file of `url` for writing, if that is why opening
/// failed: SQLite says only "(code: 14) unable to open database file", with the path as given.
/// Looked at after a failure only: it opens the file (or creates and removes a probe file
/// beside it, for the file and its `-wal` and `-shm` companions).
pub(crate) fn sqlite_permission_problem(var: &str, url: &str) -> Option<anyhow::Error> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path.contains(":memory:") {
        return None;
    }
    let file = std::path::absolute(path).ok()?;
    let dir = file.parent()?.to_path_buf();
    let denied = |e: &std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    let shown = redact_url(url);
    if file.exists() {
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&file)
        {
            if denied(&e) {
                return Some(usage(format!(
                    "{var} {shown}: permission denied: this user cannot write {} ({e})",
                    file.display()
                )));
            }
        }
    }
    let probe = dir.join(format!(".archivist-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            None
        }
        Err(e) if denied(&e) => Some(usage(format!(
            "{var} {shown}: permission denied: this user cannot create files in {} (SQLite \
             needs to create {}{} and its -wal and -shm files there); run where you may \
             write, or point {var} at such a place",
            dir.display(),
            file.display(),
            if file.exists() { "'s lock" } else { "" }
        ))),
        Err(_) => None,
    }
}

/// The directory of an SQLite file that is missing: a configuration error, which SQLite would
/// report only as "unable to open database file".
fn missing_sqlite_dir(url: &str) -> Option<&Path> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return None;
    }
    let dir = Path::new(path).parent()?;
    (!dir.as_os_str().is_empty() && !dir.is_dir()).then_some(dir)
}

/// An in-memory bus with the given settings and the four queues created.
pub(crate) async fn memory_bus_with(
    config: &Config,
    settings: MemoryBusConfig,
) -> anyhow::Result<Arc<dyn Bus>> {
    let bus: Arc<dyn Bus> = Arc::new(MemoryBus::new(settings));
    for q in config.queues.all() {
        bus.create_queue(q).await?;
    }
    Ok(bus)
}

/// The bus for a subcommand that other processes must share queues with (every subcommand
/// but `demo`): SQS, or a usage error explaining why the chosen bus cannot do it.
pub(crate) async fn shared_bus(
    config: &Config,
    subcommand: &str,
    token: &CancellationToken,
) -> anyhow::Result<Arc<dyn Bus>> {
    match config.bus {
        // Even `run` is refused: no curator or researcher could reach its queues, and its
        // work assignment would lease work nobody can read, stranding the pairs for a lease.
        BusKind::Memory => Err(usage(format!(
            "`archivist {subcommand}` cannot work on the in-memory bus (ARCHIVIST_BUS=memory): \
             its queues would live inside this one process, so no curator, researcher or \
             other archivist outside it could send to or receive from them. Unset \
             ARCHIVIST_BUS for the database bus (queues in the datastore's database, shared \
             by every process), set ARCHIVIST_BUS=sqs (with the AWS settings) or \
             ARCHIVIST_BUS=rabbitmq (with ARCHIVIST_BUS_URL=amqp://…), or run `archivist demo` \
             to see the whole pipeline in one process"
        ))),
        // `status` and `serve` read: they create no table and no queue; `queues` creates them itself,
        // saying which.
        BusKind::Sqlite | BusKind::Postgres => {
            // `send`, `receive` and `redrive` use queues that `migrate` made: a missing file
            // means the wrong directory or URL, and a new empty file there would swallow what
            // is sent (or wait forever on nothing).
            if matches!(subcommand, "send" | "receive" | "redrive") {
                refuse_missing_bus_file(config)?;
            }
            // `status` and `serve` read, and `redrive` moves what exists (even `--dry-run`
            // must write nothing): none creates a table or a queue.
            database_bus(
                config,
                token,
                !matches!(subcommand, "status" | "serve" | "queues" | "redrive"),
            )
            .await
        }
        BusKind::Sqs => {
            let bus = sqs_bus(config).await?;
            wait_for_bus(config, bus.as_ref(), token).await?;
            Ok(bus)
        }
        BusKind::Rabbitmq => {
            rabbitmq_bus(
                config,
                token,
                !matches!(subcommand, "status" | "serve" | "queues"),
            )
            .await
        }
    }
}

/// A usage error naming the absolute path when the database bus's SQLite file is missing.
fn refuse_missing_bus_file(config: &Config) -> anyhow::Result<()> {
    let url = config.bus_url();
    let Some(path) = missing_sqlite_file(&url) else {
        return Ok(());
    };
    let shown = redact_url(&url);
    let what = if config.bus_url.is_some() {
        format!(
            "no bus database at {} (ARCHIVIST_BUS_URL {shown})",
            path.display()
        )
    } else {
        format!(
            "no datastore (and so no bus queues) at {} (DATABASE_URL {shown})",
            path.display()
        )
    };
    Err(usage(format!(
        "{what}: create it with `archivist migrate`, or run in the directory that holds it"
    )))
}

/// The RabbitMQ bus at ARCHIVIST_BUS_URL. With `create`, the four queues (and their
/// dead-letter queues and exchange) are declared, which is harmless when they exist. Passing
/// failures are retried until `config.connect_timeout`; a refusal (credentials, virtual
/// host, a queue with other arguments) is a usage error.
pub(crate) async fn rabbitmq_bus(
    config: &Config,
    token: &CancellationToken,
    create: bool,
) -> anyhow::Result<Arc<dyn Bus>> {
    rabbitmq_bus_with(
        config,
        token,
        create,
        RabbitBusConfig::default().visibility_timeout,
    )
    .await
}

/// [`rabbitmq_bus`] with deliveries held up to `visibility_timeout` before the bus returns
/// them to the queue (a researcher holds a work item for as long as its analysis takes).
pub(crate) async fn rabbitmq_bus_with(
    config: &Config,
    token: &CancellationToken,
    create: bool,
    visibility_timeout: Duration,
) -> anyhow::Result<Arc<dyn Bus>> {
    let url = config.bus_url();
    let shown = redact_url(&url);
    let settings = RabbitBusConfig {
        max_receives: config.max_receives,
        visibility_timeout,
        ..RabbitBusConfig::default()
    };
    let (url, settings, shown) = (&url, &settings, &shown);
    let retry = ConnectRetry::new(config, token, format!("RabbitMQ at {shown}"));
    retry
        .run(|| async move {
            let try_once = async {
                let bus: Arc<dyn Bus> = Arc::new(RabbitBus::connect(url, settings.clone()).await?);
                if create {
                    for q in config.queues.all() {
                        bus.create_queue(q).await?;
                    }
                }
                Ok::<_, BusError>(bus)
            };
            match try_once.await {
                Ok(bus) => Attempt::Done(bus),
                Err(e) if !e.is_retryable() => {
                    Attempt::Lasting(usage(format!("ARCHIVIST_BUS_URL {shown}: {e}")))
                }
                Err(e) => Attempt::Passing(e),
            }
        })
        .await
}

/// The database bus in ARCHIVIST_BUS_URL's database (default: the datastore's). With
/// `create`, its tables and the four queues are created if missing (harmless when they
/// exist), so that every subcommand works on a new database with no setup. Passing failures
/// are retried until `config.connect_timeout`, as for the datastore.
pub(crate) async fn database_bus(
    config: &Config,
    token: &CancellationToken,
    create: bool,
) -> anyhow::Result<Arc<dyn Bus>> {
    let url = config.bus_url();
    let shown = redact_url(&url);
    if let Some(dir) = missing_sqlite_dir(&url) {
        return Err(usage(format!(
            "ARCHIVIST_BUS_URL {shown}: the directory {} does not exist",
            dir.display()
        )));
    }
    // Its tables go into that database: not into another program's
    // (see `datastore::foreign_migrations`).
    if create {
        let foreign = datastore::foreign_migrations(&url).await;
        if !foreign.is_empty() {
            let var = if config.bus_url.is_some() {
                "ARCHIVIST_BUS_URL"
            } else {
                "DATABASE_URL"
            };
            return Err(usage(foreign.explain(var, &shown)));
        }
    }
    let settings = SqlBusConfig {
        max_receives: config.max_receives,
        ..SqlBusConfig::default()
    };
    let var = if config.bus_url.is_some() {
        "ARCHIVIST_BUS_URL"
    } else {
        "DATABASE_URL"
    };
    let (url, settings, shown) = (&url, &settings, &shown);
    let retry = ConnectRetry::new(config, token, format!("the bus database {shown}"));
    retry
        .run(|| async move {
            let try_once = async {
                let bus: Arc<dyn Bus> = match config.bus {
                    BusKind::Postgres => Arc::new(PgBus::connect(url, settings.clone()).await?),
                    _ => Arc::new(SqliteBus::connect(url, settings.clone()).await?),
                };
                if create {
                    for q in config.queues.all() {
                        bus.create_queue(q).await?;
                    }
                }
                Ok::<_, BusError>(bus)
            };
            match try_once.await {
                Ok(bus) => Attempt::Done(bus),
                Err(e) => {
                    if let Some(denied) = sqlite_permission_problem(var, url) {
                        return Attempt::Lasting(denied);
                    }
                    if !e.is_retryable() {
                        return Attempt::Lasting(usage(format!("ARCHIVIST_BUS_URL {shown}: {e}")));
                    }
                    Attempt::Passing(e)
                }
            }
        })
        .await
}

/// Waits until the bus answers, as [`datastore`] waits for the datastore: passing failures are
/// retried until `config.connect_timeout`, then the error is fatal (exit 1). The probe resolves
/// the episodes queue (the bus keeps its URL); any answer, a missing queue included, means the
/// bus is reachable, and what the answer means is left to the subcommand.
async fn wait_for_bus(
    config: &Config,
    bus: &dyn Bus,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let retry = ConnectRetry::new(config, token, "the bus (ARCHIVIST_BUS=sqs)".to_string());
    retry
        .run(|| async {
            match bus.sender(&config.queues.episodes).await {
                Ok(_) => Attempt::Done(()),
                Err(e) if !e.is_retryable() => Attempt::Done(()),
                Err(e) => Attempt::Passing(e),
            }
        })
        .await
}

/// The SQS bus, configured as the AWS SDK reads its environment (AWS_REGION, credentials,
/// AWS_ENDPOINT_URL), with ARCHIVIST_MAX_RECEIVES as the redrive count of queues it creates.
async fn sqs_bus(config: &Config) -> anyhow::Result<Arc<dyn Bus>> {
    check_endpoint_urls()?;
    let settings = SqsConfig {
        max_receives: config.max_receives,
        ..SqsConfig::default()
    };
    match SqsBus::from_env(settings).await {
        Ok(bus) => Ok(Arc::new(bus)),
        Err(e @ (BusError::Rejected { .. } | BusError::Unsupported(_))) => {
            Err(usage(format!("ARCHIVIST_BUS=sqs: {e}")))
        }
        Err(e) => Err(anyhow::Error::new(e).context("cannot reach SQS")),
    }
}

/// The SDK's endpoint variables, checked before any request: an endpoint without a scheme,
/// or with one other than http(s), is bad configuration (exit 2 at once), not an outage to
/// retry for ARCHIVIST_CONNECT_TIMEOUT.
fn check_endpoint_urls() -> anyhow::Result<()> {
    for var in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS"] {
        let Ok(value) = std::env::var(var) else {
            continue;
        };
        if value.trim().is_empty() {
            continue;
        }
        let shown = redact_url(&value);
        match url::Url::parse(value.trim()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            Ok(u) => {
                return Err(usage(format!(
                    "{var} {shown:?}: expected an http:// or https:// URL, not {}://",
                    u.scheme()
                )))
            }
            Err(e) => {
                return Err(usage(format!(
                    "{var} {shown:?} is not a URL ({e}): expected http://HOST:PORT or \
                     https://HOST"
                )))
            }
        }
    }
    Ok(())
}

/// The API bus of a remote participant (`--server URL --token TOKEN`): the API at the server,
/// waited for until `config.connect_timeout` as any bus is (its OpenAPI document answers);
/// a server address that is no http(s) URL, or no archivist API's, is a usage error. The token
/// is checked by the first request of the participant's scope (a refused one: exit 2).
pub(crate) async fn api_bus(
    config: &Config,
    remote: &RemoteArgs,
    token: &CancellationToken,
) -> anyhow::Result<Arc<dyn Bus>> {
    let server = remote.server.as_deref().unwrap_or_default().trim();
    let secret = remote.token.as_deref().unwrap_or_default().trim();
    if secret.is_empty() {
        return Err(usage(
            "--server (ARCHIVIST_SERVER) needs a token: give it in ARCHIVIST_TOKEN (or \
             --token); `archivist token create --scope researcher|curator` on the server \
             prints one",
        ));
    }
    let q = &config.queues;
    let mut settings = ApiConfig::new(server, ApiToken::new(secret));
    settings.ca_cert = remote.ca_cert.clone();
    settings.queues = ApiQueues {
        episodes: q.episodes.clone(),
        clips: q.clips.clone(),
        pending_research: q.pending_research.clone(),
        completed_research: q.completed_research.clone(),
    };
    let bus =
        ApiBus::new(settings).map_err(|e| usage(format!("--server (ARCHIVIST_SERVER): {e}")))?;
    let shown = bus.server().to_string();
    let retry = ConnectRetry::new(config, token, format!("the API server {shown}"));
    retry
        .run(|| async {
            match bus.probe().await {
                Ok(()) => Attempt::Done(()),
                Err(e) if !e.is_retryable() => {
                    Attempt::Lasting(usage(format!("--server (ARCHIVIST_SERVER): {e}")))
                }
                Err(e) => Attempt::Passing(e),
            }
        })
        .await?;
    Ok(Arc::new(bus))
}

/// A sender for `queue`; a missing queue is a configuration problem (exit 2).
pub(crate) async fn sender(bus: &dyn Bus, queue: &str) -> anyhow::Result<Arc<dyn Sender>> {
    bus.sender(queue).await.map_err(|e| queue_error(e, queue))
}

/// A receiver for `queue`; a missing queue is a configuration problem (exit 2).
pub(crate) async fn receiver(bus: &dyn Bus, queue: &str) -> anyhow::Result<Arc<dyn Receiver>> {
    bus.receiver(queue).await.map_err(|e| queue_error(e, queue))
}

/// [`sender`] for a queue a person named (`send`, `redrive`): a missing queue that is not one
/// of the configured ones is said so, with the configured ones named.
pub(crate) async fn named_sender(
    config: &Config,
    bus: &dyn Bus,
    queue: &str,
) -> anyhow::Result<Arc<dyn Sender>> {
    bus.sender(queue)
        .await
        .map_err(|e| named_queue_error(config, e, queue))
}

/// [`receiver`] for a queue a person named (`receive`), as [`named_sender`].
pub(crate) async fn named_receiver(
    config: &Config,
    bus: &dyn Bus,
    queue: &str,
) -> anyhow::Result<Arc<dyn Receiver>> {
    bus.receiver(queue)
        .await
        .map_err(|e| named_queue_error(config, e, queue))
}

fn named_queue_error(config: &Config, e: BusError, queue: &str) -> anyhow::Error {
    let configured = config.queues.all();
    let known = configured
        .iter()
        .any(|q| *q == queue || messagebus::dead_letter_queue_name(q) == queue);
    match e {
        BusError::QueueNotFound(_) if !known => usage(format!(
            "queue {queue:?} does not exist, and it is not one of the configured queues: {} \
             (each with its dead-letter queue, named with _dead_letter appended). Check the \
             name, or the ARCHIVIST_*_QUEUE variables if yours are named otherwise",
            configured.join(", ")
        )),
        e => queue_error(e, queue),
    }
}

fn queue_error(e: BusError, queue: &str) -> anyhow::Error {
    match e {
        BusError::QueueNotFound(_) => usage(format!(
            "queue {queue:?} does not exist: create it (and its dead-letter queue) with \
             `archivist queues`"
        )),
        BusError::Rejected { .. } | BusError::Unsupported(_) => {
            usage(format!("queue {queue:?}: {e}"))
        }
        other => anyhow::Error::new(other).context(format!("queue {queue:?}")),
    }
}

/// The print store `--print-store` names, or (`default` and none named) the directory under
/// the user's cache directory; `None` when none is named and there is no default.
/// A store that cannot be used as given is a usage error (exit 2).
pub(crate) async fn print_store(
    args: &crate::values::PrintStoreArgs,
    default: bool,
) -> anyhow::Result<Option<Arc<dyn prints::PrintStore>>> {
    let given = match &args.print_store {
        Some(given) => given.clone(),
        None if default => prints::default_dir()
            .ok_or_else(|| {
                usage(
                    "no print store: neither XDG_CACHE_HOME nor HOME is set; give \
                     --print-store (ARCHIVIST_PRINT_STORE)",
                )
            })?
            .display()
            .to_string(),
        None => return Ok(None),
    };
    let options = prints::StoreOptions {
        max_bytes: args.print_store_size,
    };
    match prints::open(&given, &options).await {
        Ok(store) => Ok(Some(store)),
        Err(e @ (prints::StoreError::Config { .. } | prints::StoreError::BadKey(_))) => {
            Err(usage(format!("--print-store (ARCHIVIST_PRINT_STORE): {e}")))
        }
        Err(e) => Err(anyhow!(e)),
    }
}

/// The media archive `--media-archive` names, `None` when none is named. An archive that
/// cannot be used as given is a usage error (exit 2).
pub(crate) async fn media_archive(
    args: &crate::values::MediaArchiveArgs,
) -> anyhow::Result<Option<Arc<dyn archive::MediaArchive>>> {
    let Some(given) = &args.media_archive else {
        return Ok(None);
    };
    match archive::open(given).await {
        Ok(archive) => Ok(Some(archive)),
        Err(e @ (archive::ArchiveError::Config { .. } | archive::ArchiveError::BadKey(_))) => Err(
            usage(format!("--media-archive (ARCHIVIST_MEDIA_ARCHIVE): {e}")),
        ),
        Err(e) => Err(anyhow!(e)),
    }
}

/// What a remote researcher (`research --server`) reads and gives back through the server's
/// API: the server's media archive and print store, each where the server offers one.
pub(crate) struct RemoteHoldings {
    /// The server's media archive ([`messagebus::api::ApiArchive`]).
    pub(crate) archive: Option<Arc<dyn archive::MediaArchive>>,
    /// The server's print store ([`messagebus::api::ApiPrintStore`]).
    pub(crate) prints: Option<Arc<dyn prints::PrintStore>>,
}

/// Asks the server at `--server` what it keeps for its researchers (`GET /api/v1/archive`),
/// waited for as the API bus is: its archive and print store through the API, where it has
/// them. A refused token is exit 2, naming the scope.
pub(crate) async fn remote_holdings(
    config: &Config,
    remote: &RemoteArgs,
    token: &CancellationToken,
) -> anyhow::Result<RemoteHoldings> {
    let settings = remote.api_config("researcher")?;
    let holdings = messagebus::api::ApiHoldings::new(&settings)
        .map_err(|e| usage(format!("--server (ARCHIVIST_SERVER): {e}")))?;
    let shown = messagebus::redact_url(settings.server.trim());
    let retry = ConnectRetry::new(config, token, format!("the API server {shown}"));
    let offer = retry
        .run(|| async {
            match holdings.offered().await {
                Ok(offer) => Attempt::Done(offer),
                Err(e @ BusError::Unauthorized { .. }) => Attempt::Lasting(anyhow!(e)),
                Err(e) if !e.is_retryable() => {
                    Attempt::Lasting(usage(format!("--server (ARCHIVIST_SERVER): {e}")))
                }
                Err(e) => Attempt::Passing(e),
            }
        })
        .await?;
    let archive: Option<Arc<dyn archive::MediaArchive>> = if offer.media {
        Some(Arc::new(
            messagebus::api::ApiArchive::new(&settings)
                .map_err(|e| usage(format!("--server (ARCHIVIST_SERVER): {e}")))?,
        ))
    } else {
        None
    };
    let prints: Option<Arc<dyn prints::PrintStore>> = if offer.prints {
        Some(Arc::new(
            messagebus::api::ApiPrintStore::new(&settings)
                .map_err(|e| usage(format!("--server (ARCHIVIST_SERVER): {e}")))?,
        ))
    } else {
        None
    };
    Ok(RemoteHoldings { archive, prints })
}
