//! The archivist's HTTP API gateway (`archivist serve --api`): curators and researchers
//! anywhere take part with a token, and nobody outside needs the bus's or the datastore's
//! credentials.
//!
//! Every request carries `Authorization: Bearer TOKEN`; tokens are made with
//! [`tokens::issue`] (the command line's `archivist token create`) and only their SHA-256
//! hash is kept, in the datastore ([`datastore::ApiAccess`]). A request without a valid token
//! is 401, with a token of another scope 403; failed attempts are limited per credential (never
//! per address: clients behind one NAT do not lock each other out), requests per token.
//!
//! Every participant is outside, token or not: a researcher acts only on the items its own
//! token took (by receipts that cannot be guessed), and its results must name those items'
//! pairs; a token counts as at most its bound of researchers; a revoked token's polls end and
//! what it holds goes back at once; every number and every body is bounded.
//!
//! # Layout
//!
//! Imports run one way: the handlers read `state.rs`, `auth.rs` and the files below them;
//! `gateway.rs` reads the handlers.
//!
//! - `gateway.rs`: [`Gateway::router`] (the routes behind their token checks),
//!   [`Gateway::start`] (the keeper), [`require_reader`] for pages served beside the API.
//! - `state.rs`: [`Gateway`] (the datastore, the bus, the [`Limits`], what is held).
//! - `auth.rs`: the token check, the client's address.
//! - `limiter.rs`: the rate limits (token buckets).
//! - `held.rs`: what the gateway holds for researchers in memory: deliveries, polls, who is
//!   there; what an item names.
//! - `sessions.rs`: [`ReaderSessions`], a browser's way in to the pages a reader token
//!   guards (sign-in, a session cookie, sign-out), and [`require_reader_or_session`].
//! - `tokens.rs`: making tokens, hashing them.
//! - `lines.rs`: request bodies read within the limit, split into JSON lines, each checked.
//! - `curators.rs`: `POST /api/v1/episodes` and `POST /api/v1/clips`.
//! - `researchers.rs`: `POST /api/v1/work` (a long poll) and `…/{receipt}/extend|results|
//!   finish|release`, the keeper that gives back what is no longer held.
//! - `media.rs`: the server's media archive for researchers: `GET /api/v1/archive` (what is
//!   offered), `…/archive/episodes/{key}` (versions; `POST …/versions` records one),
//!   `GET`/`HEAD`/`PUT …/archive/media/{sha256}` (a kept copy by range, a copy given back).
//! - `episode_prints.rs`: the server's print store for researchers: `GET`/`PUT
//!   /api/v1/prints/{key}`.
//! - `readers.rs`: `GET /api/v1/status` and `GET /api/v1/matches`.
//! - `server.rs`: the connection loop (client addresses, bounds, idle connections, TLS).
//! - `tls.rs`: [`Tls`], the certificate and key, reloaded on demand (SIGHUP).
//! - `openapi.rs`: `/api/v1/openapi.json`, generated from the handlers (utoipa).
//! - `error.rs`: [`ApiError`], each variant one answer (status code and JSON body).

mod auth;
mod curators;
mod episode_prints;
mod error;
mod gateway;
mod held;
mod limiter;
mod lines;
mod media;
mod openapi;
mod readers;
mod researchers;
pub mod server;
mod sessions;
mod state;
mod tls;
pub mod tokens;

pub use auth::{Caller, ClientAddr};
pub use error::{ApiError, LineError, MAX_LISTED};
pub use gateway::require_reader;
pub use media::MAX_RECORD_BYTES;
pub use openapi::openapi_json;
pub use readers::MAX_MATCHES;
pub use researchers::{ITEM_VISIBILITY, RESEARCHER_HEADER};
pub use sessions::{
    require_reader_or_session, ReaderSessions, SignInRefused, SignedIn, SESSION_COOKIE,
    SESSION_LIFETIME, SIGN_IN_PATH,
};
pub use state::{
    Gateway, Holdings, Limits, Queues, DEFAULT_MAX_MEDIA_BYTES, DEFAULT_MAX_PRINT_BYTES,
};
pub use tls::Tls;
