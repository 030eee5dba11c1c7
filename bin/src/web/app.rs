//! What every handler of the server shares: the datastore and the bus it reads ([`Sources`],
//! the bus in a [`BusSlot`] that may be filled in later), the Prometheus handle and the
//! progress [`History`] ([`App`]), and the sampler that adds to the history.

use std::sync::Arc;
use std::time::Duration;

use datastore::DataStore;
use messagebus::Bus;
use tokio_util::sync::CancellationToken;

use crate::config::{BusKind, Config};

pub(crate) use super::history::History;

/// How often the sampler reads the counts.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// How long one request may wait on the datastore or the bus: a scraper gives up after ten
/// seconds by default, and a page that answers late is worse than one that says what it
/// could not read.
pub(super) const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The bus as the server sees it: in another process, connected, or not (yet) reachable.
#[derive(Clone)]
pub(crate) struct BusSlot {
    /// The queues live in another process (the in-memory bus): nothing to read here.
    elsewhere: bool,
    bus: Arc<std::sync::OnceLock<Arc<dyn Bus>>>,
    /// Why the bus is not connected yet (credentials masked).
    why_not: Arc<std::sync::Mutex<String>>,
    redactor: Arc<crate::panic_hook::Redactor>,
}

impl BusSlot {
    fn new(bus: Option<Arc<dyn Bus>>, redactor: crate::panic_hook::Redactor) -> Self {
        let slot = BusSlot {
            elsewhere: bus.is_none(),
            bus: Arc::default(),
            why_not: Arc::default(),
            redactor: Arc::new(redactor),
        };
        if let Some(bus) = bus {
            let _ = slot.bus.set(bus);
        }
        slot
    }

    /// The bus: `Ok(None)` when its queues live in another process; `Err` saying why when it
    /// could not be reached (yet).
    pub(crate) fn get(&self) -> Result<Option<Arc<dyn Bus>>, String> {
        if self.elsewhere {
            return Ok(None);
        }
        match self.bus.get() {
            Some(bus) => Ok(Some(bus.clone())),
            None => Err(self
                .why_not
                .lock()
                .map(|w| w.clone())
                .unwrap_or_else(|_| "bus not connected".to_string())),
        }
    }

    /// The bus is connected now.
    pub(crate) fn connected(&self, bus: Arc<dyn Bus>) {
        let _ = self.bus.set(bus);
    }

    /// Why it is still not connected (credentials are masked here).
    pub(crate) fn still_not(&self, why: &str) {
        if let Ok(mut w) = self.why_not.lock() {
            *w = self.redactor.apply(why);
        }
    }
}

/// Where the served data comes from.
pub(crate) struct Sources {
    pub(crate) store: Arc<dyn DataStore>,
    pub(crate) bus: BusSlot,
    pub(crate) queues: Vec<String>,
    /// The work-item queue among them (the status page counts researchers on it).
    pub(crate) work_items: String,
    /// The datastore and the bus as the page names them: URLs with credentials masked.
    pub(crate) datastore_shown: String,
    pub(crate) bus_shown: String,
    /// Masks the credentials of the configured URLs in error texts shown to a visitor.
    pub(crate) redactor: crate::panic_hook::Redactor,
    /// The media archive (`--media-archive`): its copies served at `/media/{sha256}` and
    /// played by the pages, its figures on the status page.
    pub(crate) archive: Option<Arc<dyn archive::MediaArchive>>,
}

impl Sources {
    /// The sources of `config`'s datastore and bus.
    pub(crate) fn new(
        config: &Config,
        store: Arc<dyn DataStore>,
        bus: Option<Arc<dyn Bus>>,
    ) -> Self {
        let database_url = config.database_url();
        let bus_url = config.bus_url();
        let bus_shown = match config.bus {
            BusKind::Memory => "in-memory (inside another process)".to_string(),
            BusKind::Sqs => "SQS".to_string(),
            BusKind::Sqlite | BusKind::Postgres => {
                format!("database bus at {}", messagebus::redact_url(&bus_url))
            }
            BusKind::Rabbitmq => format!("RabbitMQ at {}", messagebus::redact_url(&bus_url)),
        };
        let redactor = crate::panic_hook::Redactor::new(&[Some(&database_url), Some(&bus_url)]);
        Sources {
            store,
            bus: BusSlot::new(bus, redactor.clone()),
            queues: config.queues.all().iter().map(|q| q.to_string()).collect(),
            work_items: config.queues.pending_research.clone(),
            datastore_shown: datastore::redact_url(&database_url),
            bus_shown,
            redactor,
            archive: None,
        }
    }

    /// These sources with the media archive `archive`, where one is given.
    pub(crate) fn with_archive(mut self, archive: Option<Arc<dyn archive::MediaArchive>>) -> Self {
        self.archive = archive;
        self
    }

    /// The sources of `config`'s datastore, with a bus that could not be reached yet
    /// (`why_not`): the returned slot is filled in once it is.
    pub(crate) fn without_bus_yet(
        config: &Config,
        store: Arc<dyn DataStore>,
        why_not: String,
    ) -> (Self, BusSlot) {
        let mut sources = Sources::new(config, store, None);
        sources.bus.elsewhere = false;
        sources.bus.still_not(&why_not);
        let slot = sources.bus.clone();
        (sources, slot)
    }
}

/// State every handler shares.
pub(crate) struct App {
    pub(super) sources: Sources,
    pub(super) prometheus: metrics_exporter_prometheus::PrometheusHandle,
    pub(super) history: History,
    /// The media archive as the pages read it, where one is given.
    pub(super) archive: Option<Arc<super::archive_view::ArchiveView>>,
}

/// Reads the counts every [`SAMPLE_EVERY`] into the history until `token` is cancelled.
pub(super) async fn sample_history(app: Arc<App>, token: CancellationToken) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = chrono::Utc::now();
        match tokio::time::timeout(CHECK_TIMEOUT, app.sources.store.status(now)).await {
            Ok(Ok(status)) => app.history.record(now, &status),
            Ok(Err(e)) => tracing::debug!(error = %e, "progress not sampled"),
            Err(_) => tracing::debug!("progress not sampled: the datastore did not answer in time"),
        }
    }
}
