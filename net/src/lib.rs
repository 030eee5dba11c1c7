//! What archivist's servers and outbound fetches share, below the researcher, the curators
//! and the `archivist` binary.
//!
//! - Fetching someone else's URL (a feed, an enclosure, a redirect): [`address_policy`]
//!   connects to public addresses only, unless told otherwise, checking the address actually
//!   connected to.
//! - Fetching over HTTP, with one set of rules for everything archivist fetches (feeds,
//!   media, an episode print's ranges, `analyse` on URLs): [`fetch`] (redirects, timeouts,
//!   sizes, truncation, the user agent, retry classes).
//! - Serving HTTP to whoever else talks to us: [`server`] binds a listener and serves an
//!   axum router with bounded connections, deadlines and, on loopback, only our own host
//!   names.
//!
//! # Layout
//!
//! - `address_policy.rs`: [`address_policy::AddressPolicy`], [`address_policy::Client`],
//!   [`address_policy::Refused`].
//! - `fetch.rs`: [`fetch::Fetcher`], [`fetch::FetchConfig`], [`fetch::Answer`],
//!   [`fetch::FetchError`], [`fetch::Status`].
//! - `server.rs`: [`server::bind`], [`server::spawn`], [`server::BindError`].
//!
//! # Example
//!
//! ```
//! use net::address_policy::AddressPolicy;
//!
//! let policy = AddressPolicy::new(false, Vec::new());
//! // A cloud metadata address is refused; a public one passes.
//! assert!(policy.check("metadata", "169.254.169.254".parse().unwrap()).is_err());
//! assert!(policy.check("example.org", "93.184.215.14".parse().unwrap()).is_ok());
//! ```

pub mod address_policy;
pub mod fetch;
pub mod server;

/// Installs the TLS crypto provider reqwest uses. reqwest is built without one of its own
/// (its default would compile a second one): it uses aws-lc-rs, which lapin and the AWS SDK
/// already bring. [`address_policy::AddressPolicy::client_builder`] calls it; a second call
/// changes nothing.
pub fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
