//! What the API gateway (`archivist serve --api`) keeps in the datastore: its tokens (only a
//! hash of each) and who is there (remote researchers, and the gateway's own receivers, so
//! that the work-assignment rule counts each remote researcher once, from any process).

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::Result;

/// What an API token may do. A token has exactly one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TokenScope {
    /// Sends curated episodes and clips.
    Curator,
    /// Takes work items and sends their results.
    Researcher,
    /// Reads the status, the matches, and with `serve --api` the pages and metrics.
    Reader,
}

impl TokenScope {
    /// Every scope, in the order the command line lists them.
    pub const ALL: [TokenScope; 3] = [
        TokenScope::Curator,
        TokenScope::Researcher,
        TokenScope::Reader,
    ];

    /// The scope's name: `curator`, `researcher` or `reader`.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Curator => "curator",
            TokenScope::Researcher => "researcher",
            TokenScope::Reader => "reader",
        }
    }
}

impl fmt::Display for TokenScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TokenScope {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        TokenScope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| format!("unknown scope {s:?}: curator, researcher or reader"))
    }
}

/// A token to store: its name, scope and hash (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// Unique among the stored tokens.
    pub name: String,
    /// What it may do.
    pub scope: TokenScope,
    /// The token's hash (the gateway's choice: SHA-256, as lowercase hex), unique.
    pub hash: String,
    /// When it was made.
    pub created: DateTime<Utc>,
    /// The most researchers it counts as for the work-assignment rule, however many it names
    /// (see [`DEFAULT_MAX_RESEARCHERS`]).
    pub max_researchers: u32,
}

/// The most researchers one token counts as, unless its operator says otherwise (`token create
/// --max-researchers N`): a volunteer's machine running a few researchers at once.
pub const DEFAULT_MAX_RESEARCHERS: u32 = 8;

/// A stored token as listed: never the token, never its hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenInfo {
    /// Its name.
    pub name: String,
    /// What it may do.
    pub scope: TokenScope,
    /// When it was made.
    pub created: DateTime<Utc>,
    /// When a request last carried it (kept to the minute: see
    /// [`ApiAccess::use_token`]); `None` if never.
    pub last_used: Option<DateTime<Utc>>,
    /// The most researchers it counts as (see [`NewToken::max_researchers`]).
    pub max_researchers: u32,
}

/// A work item a researcher holds through the API, as the gateway keeps it so that it outlives
/// the gateway's process: who holds it, how to settle it on the bus, and what it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldItem {
    /// The SHA-256 of the receipt the researcher was given (lowercase hex): the receipt itself
    /// is never stored, like a token.
    pub receipt_hash: String,
    /// The name of the token that took it.
    pub token: String,
    /// The bus's own durable receipt, where the bus has one; `None` for a delivery the
    /// gateway holds in memory.
    pub bus_receipt: Option<String>,
    /// What the item names (its lease, episode and clips), in the gateway's own form: results
    /// sent with the receipt are checked against it.
    pub item: String,
    /// When it was taken or last extended.
    pub seen_at: DateTime<Utc>,
}

/// How long a presence counts after it was last written, by default: a remote researcher that
/// goes away stops counting for the work-assignment rule within this (the binary's
/// `ARCHIVIST_PRESENCE_WINDOW` sets another, the same for every gateway and every run).
pub const PRESENCE_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// What a presence row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PresenceKind {
    /// A remote researcher polling or holding a work item through the API: one researcher.
    Researcher,
    /// A gateway's own receivers on the work-item queue, which the bus counts as consumers
    /// (`count` of them): subtracted, so that remote researchers are not counted twice.
    GatewayReceivers,
}

impl PresenceKind {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            PresenceKind::Researcher => "researcher",
            PresenceKind::GatewayReceivers => "gateway",
        }
    }
}

/// Who was there since a moment ([`ApiAccess::presence`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Presence {
    /// Remote researchers seen since then.
    pub researchers: u64,
    /// Receivers the gateways seen since then hold on the work-item queue.
    pub gateway_receivers: u64,
}

/// Tokens and presence, for the API gateway: an optional capability of a datastore
/// ([`DataStore::api_access`](crate::DataStore::api_access); the SQL adapters offer it).
/// Every method is one short statement or transaction.
#[async_trait]
pub trait ApiAccess: Send + Sync {
    /// Stores a token. Fails with [`DataStoreError::Conflict`](crate::DataStoreError::Conflict)
    /// when its name (or its hash) is taken, storing nothing.
    async fn create_token(&self, token: &NewToken) -> Result<()>;

    /// Every stored token, by name.
    async fn tokens(&self) -> Result<Vec<TokenInfo>>;

    /// Revokes the token named `name`: a request carrying it is refused from then on, and it
    /// is no longer listed; its name stays known to [`revoked_token`](Self::revoked_token)
    /// (for the logs) until a new token takes the name. `false` when there is no such token
    /// in force.
    async fn revoke_token(&self, name: &str) -> Result<bool>;

    /// The name of the revoked token whose hash is `hash`, if there is one.
    async fn revoked_token(&self, hash: &str) -> Result<Option<String>>;

    /// The token whose hash is `hash`, if one is stored; its `last_used` becomes `now` when it
    /// was older than a minute (so that a busy token costs one write a minute, not one per
    /// request). The answer shows `last_used` as it was before.
    async fn use_token(&self, hash: &str, now: DateTime<Utc>) -> Result<Option<TokenInfo>>;

    /// Notes that `id` is there at `now`, standing for `count` of `kind`.
    async fn touch_presence(
        &self,
        id: &str,
        kind: PresenceKind,
        count: u64,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Forgets `id` (a gateway that stops).
    async fn leave_presence(&self, id: &str) -> Result<()>;

    /// Who was seen at or after `since`. Forgets nothing.
    async fn presence(&self, since: DateTime<Utc>) -> Result<Presence>;

    /// Forgets everyone last seen before `before`; returns how many.
    async fn forget_presence(&self, before: DateTime<Utc>) -> Result<u64>;

    /// Keeps `held` (replacing one with the same receipt hash).
    async fn hold_item(&self, held: &HeldItem) -> Result<()>;

    /// The item held by the receipt whose hash is `receipt_hash`, if any.
    async fn held_item(&self, receipt_hash: &str) -> Result<Option<HeldItem>>;

    /// Forgets the item held by `receipt_hash`; `false` when none was.
    async fn drop_held(&self, receipt_hash: &str) -> Result<bool>;

    /// Every item the token named `token` holds, oldest first.
    async fn held_by(&self, token: &str) -> Result<Vec<HeldItem>>;

    /// Forgets every item last seen (taken or extended) before `before`: their visibility has
    /// long run out. Returns how many.
    async fn forget_held(&self, before: DateTime<Utc>) -> Result<u64>;
}
