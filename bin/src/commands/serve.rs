//! `archivist serve`: the status page, its JSON API, metrics and health checks on `--addr`,
//! until SIGINT/SIGTERM. It only reads, as `status` does: it never creates or migrates the
//! datastore, and creates no queue.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::config::{BusKind, Config};
use crate::connect;
use crate::values::resolve_addr;
use crate::web;

/// Where `serve` serves by default.
const DEFAULT_SERVE_ADDR: &str = "127.0.0.1:9898";

/// `serve --help`'s examples.
pub(crate) const EXAMPLES: &str = "Examples:\n  \
        archivist serve                             # http://127.0.0.1:9898/ on ./archivist.sqlite\n  \
        archivist serve --addr 0.0.0.0:9898         # reachable from other hosts\n  \
        curl -s 127.0.0.1:9898/api/status";

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
    /// Also serve the API under /api/v1/ (curators and researchers anywhere, with a token
    /// from `archivist token create`); the pages and /metrics then need a reader token too
    /// (a browser signs in with one at /sign-in), on loopback as elsewhere
    #[arg(long, env = "ARCHIVIST_API")]
    pub(crate) api: bool,
    /// With --api: serve plain HTTP on an address other than loopback (without TLS, tokens
    /// cross the network readable: only behind a TLS-terminating proxy on a trusted network)
    #[arg(long, requires = "api")]
    pub(crate) insecure_http: bool,
    /// With --api: take the client's address from X-Forwarded-For, the right-most entry that
    /// is not a trusted proxy's (this connection's peer, loopback): behind a reverse proxy
    /// that appends to the header, as nginx's $proxy_add_x_forwarded_for does
    #[arg(long, requires = "api")]
    pub(crate) trust_proxy: bool,
    /// With --api: serve HTTPS with this certificate chain (PEM), read again on SIGHUP
    #[arg(long, env = "ARCHIVIST_TLS_CERT", requires_all = ["api", "tls_key"])]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// With --api: the certificate's private key (PEM), read again on SIGHUP
    #[arg(long, env = "ARCHIVIST_TLS_KEY", requires_all = ["api", "tls_cert"])]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// With --api: the most API requests answered at once (long polls included; seven in
    /// eight of them may be long polls); 64 more connections are kept for the pages, /metrics
    /// and the health checks, so that they answer however the API is flooded, and idle
    /// connections are closed to make room for new ones
    #[arg(
        long,
        env = "ARCHIVIST_API_MAX_CONNECTIONS",
        hide_env_values = true,
        requires = "api",
        default_value_t = DEFAULT_API_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    pub(crate) max_api_connections: u32,
    /// Serve the archive's kept copies at /media/{sha256} (with Range, under the pages'
    /// access rules); the clip and episode pages play the copy their offsets were measured
    /// on, and the status page shows the archive's figures. With --api, researchers read
    /// its copies and give back theirs through the API (/api/v1/archive/)
    #[command(flatten)]
    pub(crate) media_archive: crate::values::MediaArchiveArgs,
    /// With --api: where the server keeps the episode prints its researchers read and give
    /// back (`GET`/`PUT /api/v1/prints/{key}`): a directory, or s3://bucket/prefix
    /// [default: none, researchers keep their own]
    #[arg(
        long,
        value_name = "URL",
        env = "ARCHIVIST_PRINT_STORE",
        hide_env_values = true
    )]
    pub(crate) print_store: Option<String>,
    /// With --api: the most a directory print store keeps, as 500MB or 10GiB (least recently
    /// used evicted)
    #[arg(long, env = "ARCHIVIST_PRINT_STORE_SIZE", hide_env_values = true,
          default_value = "10GiB", value_parser = crate::values::parse_size)]
    pub(crate) print_store_size: u64,
    /// With --api and --media-archive: the largest copy a researcher may give the archive
    /// (`PUT /api/v1/archive/media/{sha256}`), as 500MB or 2GiB
    #[arg(long, default_value = "2GiB", value_parser = crate::values::parse_size)]
    pub(crate) max_media_size: u64,
}

/// `--max-api-connections` unless given.
const DEFAULT_API_CONNECTIONS: u32 = 1984;

/// Parses HOST:PORT, resolving a host name.
fn parse_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    let s = if s.trim().is_empty() {
        DEFAULT_SERVE_ADDR
    } else {
        s.trim()
    };
    resolve_addr(s)
}

/// How long `serve` waits for the bus before it serves without it.
const BUS_PATIENCE: Duration = Duration::from_secs(5);
/// How often it tries the bus again while it serves without it.
const BUS_RETRY: Duration = Duration::from_secs(10);

/// Connects the bus the server started without, trying every [`BUS_RETRY`] until it answers
/// or the token is cancelled.
async fn connect_later(config: Config, token: CancellationToken, slot: web::BusSlot) {
    let mut quick = config.clone();
    quick.connect_timeout = config.connect_timeout.min(BUS_PATIENCE);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(BUS_RETRY) => {}
        }
        match connect::shared_bus(&quick, "serve", &token).await {
            Ok(bus) => {
                tracing::info!("the bus answers now: its queues are shown");
                slot.connected(bus);
                return;
            }
            Err(e) => {
                let why = crate::values::describe(&e);
                tracing::debug!("the bus still cannot be read: {why}");
                slot.still_not(&why);
            }
        }
    }
}

/// Serves until `token` is cancelled.
pub(crate) async fn run(
    config: &Config,
    token: &CancellationToken,
    args: &ServeArgs,
) -> anyhow::Result<()> {
    if args.api {
        return run_api(config, token, args).await;
    }
    let addr: SocketAddr = args.addr;
    let archive = connect::media_archive(&args.media_archive).await?;
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::ReadOnly,
    )
    .await?;
    // The in-memory bus's queues live in the process that runs it (the demo): the page then
    // shows the datastore alone. Any other bus is given a few seconds: the page comes up
    // without it (its sections saying they cannot be read) and it is connected later.
    let (sources, slot) = match config.bus {
        BusKind::Memory => (web::Sources::new(config, store, None), None),
        _ => {
            let mut quick = config.clone();
            quick.connect_timeout = config.connect_timeout.min(BUS_PATIENCE);
            match connect::shared_bus(&quick, "serve", token).await {
                Ok(bus) => (web::Sources::new(config, store, Some(bus)), None),
                Err(_) if token.is_cancelled() => return Ok(()),
                Err(e) => {
                    let why = crate::values::describe(&e);
                    tracing::warn!(
                        "serving without the bus for now (the queues, dead letters and queue \
                         gauges cannot be read; trying again every {}): {why}",
                        humantime::format_duration(BUS_RETRY)
                    );
                    let (sources, slot) = web::Sources::without_bus_yet(config, store, why);
                    (sources, Some(slot))
                }
            }
        }
    };
    let sources = sources.with_archive(archive);
    let connected = sources.bus.clone();
    web::spawn(
        addr,
        "ARCHIVIST_SERVE_ADDR (--addr)",
        sources,
        web::Routes::Everything,
        &[],
        token,
    )
    .await?;
    if let Some(slot) = slot {
        tokio::spawn(connect_later(config.clone(), token.clone(), slot));
    }
    token.cancelled().await;
    if let Ok(Some(bus)) = connected.get() {
        if let Err(e) = bus.close().await {
            tracing::debug!(error = %e, "could not close the bus");
        }
    }
    Ok(())
}

/// `serve --api`: the pages, `/metrics` and health as `serve` has them, and the API, on one
/// address through the gateway's connection loop. The bus must answer at start (the API
/// has nothing to offer without it).
async fn run_api(
    config: &Config,
    token: &CancellationToken,
    args: &ServeArgs,
) -> anyhow::Result<()> {
    let addr: SocketAddr = args.addr;
    let loopback = addr.ip().is_loopback();
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(std::sync::Arc::new(
            api::Tls::load(cert, key).map_err(|e| crate::values::usage(e.to_string()))?,
        )),
        _ => None,
    };
    if !loopback && tls.is_none() && !args.insecure_http {
        return Err(crate::values::usage(format!(
            "serve --api on {addr}, an address other hosts reach, needs TLS (--tls-cert and \
             --tls-key) or --insecure-http (behind a TLS-terminating proxy): tokens must not \
             cross the network readable"
        )));
    }
    if matches!(config.bus, BusKind::Memory) {
        return Err(crate::values::usage(
            "serve --api needs a bus other processes reach (ARCHIVIST_BUS=memory lives inside \
             one process)",
        ));
    }
    let archive = connect::media_archive(&args.media_archive).await?;
    let store = connect::datastore(
        config,
        &config.database_url(),
        token,
        connect::Open::ReadOnly,
    )
    .await?;
    let bus = match connect::shared_bus(config, "serve", token).await {
        Ok(bus) => bus,
        Err(_) if token.is_cancelled() => return Ok(()),
        Err(e) => return Err(e),
    };
    let queues = api::Queues {
        curated_episodes: config.queues.episodes.clone(),
        curated_clips: config.queues.clips.clone(),
        pending_research: config.queues.pending_research.clone(),
        completed_research: config.queues.completed_research.clone(),
    };
    let limits = api::Limits {
        trust_proxy: args.trust_proxy,
        presence_window: config.presence_window,
        // Room is left for the requests of researchers at work (extend, results, finish).
        max_long_polls: api::Limits::default()
            .max_long_polls
            .min((args.max_api_connections as usize * 7 / 8).max(1)),
        max_media_bytes: args.max_media_size,
        ..api::Limits::default()
    };
    // What the server keeps for its researchers: read and given back through the API.
    let prints = crate::values::PrintStoreArgs {
        print_store: args.print_store.clone(),
        print_store_size: args.print_store_size,
    };
    let holdings = api::Holdings {
        archive: archive.clone(),
        prints: connect::print_store(&prints, false).await?,
        upload_dir: None,
    };
    for (what, given) in [
        (
            "media archive",
            holdings.archive.as_ref().map(|a| a.describe()),
        ),
        (
            "print store",
            holdings.prints.as_ref().map(|p| p.describe()),
        ),
    ] {
        if let Some(given) = given {
            tracing::info!("researchers read and give back through the API the {what} {given}");
        }
    }
    let gateway = api::Gateway::with_holdings(store.clone(), bus.clone(), queues, limits, holdings)
        .map_err(|e| crate::values::usage(e.to_string()))?;
    let sources = web::Sources::new(config, store, Some(bus.clone())).with_archive(archive);
    let (health, pages) = web::routers(sources, web::Routes::Everything, token)?;
    // With tokens, what a reader token guards is guarded however the server is reached: a
    // proxy on this host makes every visitor come from loopback.
    let sessions = api::ReaderSessions::new(gateway.clone());
    let pages = pages.layer(axum::middleware::from_fn_with_state(
        sessions.clone(),
        api::require_reader_or_session,
    ));
    let router = health
        .merge(web::sign_in_routes(sessions))
        .merge(pages)
        .merge(gateway.router());
    let listener = web::listen(addr, "ARCHIVIST_SERVE_ADDR (--addr)").await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let bound = api::server::spawn(
        listener,
        router,
        api::server::ServerLimits::for_api(args.max_api_connections as usize),
        tls.clone(),
        token,
    )?;
    let keeper = gateway.start(token);
    if let Some(tls) = tls {
        tokio::spawn(reload_on_hangup(tls, token.clone()));
    }
    tracing::info!(
        "serving the status page, /api/…, the API (/api/v1/), /metrics, /healthz and /readyz \
         on {scheme}://{bound}"
    );
    token.cancelled().await;
    if let Err(e) = keeper.await {
        tracing::debug!(error = %e, "the gateway's keeper ended badly");
    }
    if let Err(e) = bus.close().await {
        tracing::debug!(error = %e, "could not close the bus");
    }
    Ok(())
}

/// Reads the certificate and key again at each SIGHUP until `token` is cancelled; a failed
/// reload keeps the old ones, with a warning.
async fn reload_on_hangup(tls: std::sync::Arc<api::Tls>, token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "SIGHUP cannot be caught: the certificate is not reloaded");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        match tls.reload() {
            Ok(()) => tracing::info!("SIGHUP: the certificate and key were read again"),
            Err(e) => tracing::warn!("SIGHUP: the certificate stays as it was: {e}"),
        }
    }
}
