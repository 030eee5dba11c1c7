//! The archivist's HTTP API gateway (`archivist serve --api`): curators and researchers
//! anywhere take part with a token, and nobody outside needs the bus's or the datastore's
//! credentials.
//!
//! Every request carries `Authorization: Bearer TOKEN`; tokens are made with
//! [`tokens::issue`] (the command line's `archivist token create`) and only their SHA-256
//! hash is kept, in the datastore ([`datastore::ApiAccess`]). A request without a valid token
//! is 401, with a token of another scope 403; failed attempts are limited per client address,
//! requests per token.
//!
//! # Layout
//!
//! - `gateway.rs`: [`Gateway`] (the datastore, the bus, the [`Limits`]) and its
//!   [`Gateway::router`]; [`require_reader`] for pages served beside the API.
//! - `auth.rs`: the token check and the rate limits.
//! - `sessions.rs`: [`ReaderSessions`], a browser's way in to the pages a reader token
//!   guards (sign-in, a session cookie, sign-out), and [`require_reader_or_session`].
//! - `tokens.rs`: making tokens, hashing them.
//! - `lines.rs`: request bodies read within the limit, split into JSON lines, each checked.
//! - `curators.rs`: `POST /api/v1/episodes` and `POST /api/v1/clips`.
//! - `researchers.rs`: `POST /api/v1/work` (a long poll) and `…/{receipt}/extend|results|
//!   finish|release`, receipts durable where the bus has them.
//! - `readers.rs`: `GET /api/v1/status` and `GET /api/v1/matches`.
//! - `server.rs`: the connection loop (client addresses, bounds, TLS).
//! - `tls.rs`: [`Tls`], the certificate and key, reloaded on demand (SIGHUP).
//! - `openapi.rs`: `/api/v1/openapi.json`, generated from the handlers (utoipa).
//! - `error.rs`: [`ApiError`], each variant one answer (status code and JSON body).

mod auth;
mod curators;
mod error;
mod gateway;
mod lines;
mod openapi;
mod readers;
mod researchers;
pub mod server;
mod sessions;
mod tls;
pub mod tokens;

pub use auth::{Caller, ClientAddr};
pub use error::{ApiError, LineError};
pub use gateway::{require_reader, Gateway, Limits, Queues};
pub use openapi::openapi_json;
pub use readers::MAX_MATCHES;
pub use researchers::{ITEM_VISIBILITY, RESEARCHER_HEADER};
pub use sessions::{
    require_reader_or_session, ReaderSessions, SignInRefused, SignedIn, SESSION_COOKIE,
    SESSION_LIFETIME, SIGN_IN_PATH,
};
pub use tls::Tls;
