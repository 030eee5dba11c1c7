//! Option values, usage errors and error words: what every command and the configuration
//! share.
//!
//! The lowest module of the binary: it imports nothing of `bin/`, and every other module may
//! import it. Parsers return `String` errors, as clap's `value_parser` wants them.

use std::fmt;
use std::time::Duration;

/// Bad usage or configuration: the process exits with code 2 and this message.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] as an `anyhow::Error`, for `?` in commands.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// The error and its causes in words, each said once: a cause whose text its parent already
/// repeats (sqlx and the SDKs often include their source in their message) is left out, and
/// a cause that starts with its parent's words (a context naming what the cause names
/// again: `sending to Q` over `sending to Q: …`) adds only what follows them.
pub(crate) fn describe(error: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut parent = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        let new = match text.strip_prefix(parent.as_str()) {
            Some(rest) if !parent.is_empty() => rest.trim_start_matches([':', ';', ',', ' ']),
            _ => text.as_str(),
        };
        if !new.is_empty() {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(new);
        }
        parent = text;
    }
    out
}

/// An error of the API client of `status --server` or `matches --server`: a refusal that
/// will not pass (a certificate this machine does not trust, no archivist API at the
/// address) is bad configuration (exit 2); a refused token is too (see [`refused_token`]);
/// an outage is not.
pub(crate) fn remote_error(error: messagebus::BusError) -> anyhow::Error {
    match error {
        // Their messages say it all: "bus rejected the request" would not (this is no bus).
        messagebus::BusError::Rejected { message, .. } => usage(message),
        messagebus::BusError::Unavailable { message, .. } => anyhow::anyhow!(message),
        other => anyhow::Error::new(other),
    }
}

/// Which addresses media and feed fetches may connect to (`research`, `curate feed`,
/// `analyse`): see `net::address_policy`.
#[derive(Debug, clap::Args)]
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
    /// The fetch policy these options ask for.
    pub(crate) fn policy(&self) -> net::address_policy::AddressPolicy {
        net::address_policy::AddressPolicy::new(
            self.allow_private_addresses,
            self.test_public_addresses.clone(),
        )
    }
}

/// Working through the API of `archivist serve --api` instead of the bus (`research`,
/// `curate`, `send`) or the datastore (`status`, `matches`): the server, the token, and the
/// certificate authorities trusted for the server.
#[derive(clap::Args)]
pub(crate) struct RemoteArgs {
    /// Work through the API of the archivist at this address (`archivist serve --api`,
    /// https://HOST[:PORT]) instead of the bus: no bus or database credentials needed, only a
    /// token [default: the bus itself]
    #[arg(
        long,
        value_name = "URL",
        env = "ARCHIVIST_SERVER",
        hide_env_values = true
    )]
    pub(crate) server: Option<String>,
    /// The API token for --server (`archivist token create` on the server prints one); prefer
    /// the variable, which other users of this machine cannot see
    #[arg(
        long,
        value_name = "TOKEN",
        env = "ARCHIVIST_TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<String>,
    /// A PEM file of certificate authorities trusted for --server beside the system's (a
    /// server whose certificate a private CA signed)
    #[arg(
        long,
        value_name = "FILE",
        env = "ARCHIVIST_CA_CERT",
        hide_env_values = true
    )]
    pub(crate) ca_cert: Option<std::path::PathBuf>,
}

impl fmt::Debug for RemoteArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteArgs")
            .field(
                "server",
                &self.server.as_deref().map(messagebus::redact_url),
            )
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

impl RemoteArgs {
    /// Whether the command works through the API (`--server` given). A token without a
    /// server is a usage error: the command would use the bus, which is likely not meant.
    pub(crate) fn remote(&self) -> anyhow::Result<bool> {
        let server = self.server.as_deref().is_some_and(|s| !s.trim().is_empty());
        let token = self.token.as_deref().is_some_and(|s| !s.trim().is_empty());
        if token && !server {
            return Err(usage(
                "an API token (ARCHIVIST_TOKEN, --token) without a server: give the server's \
                 address in ARCHIVIST_SERVER (--server) to work through its API, or unset the \
                 token to use the bus",
            ));
        }
        Ok(server)
    }

    /// The API client's settings for `--server` with the token and `--ca-cert`; no token is
    /// a usage error naming the `scope` the command needs.
    pub(crate) fn api_config(&self, scope: &str) -> anyhow::Result<messagebus::api::ApiConfig> {
        let server = self.server.as_deref().unwrap_or_default().trim();
        let secret = self.token.as_deref().unwrap_or_default().trim();
        if secret.is_empty() {
            return Err(usage(format!(
                "--server (ARCHIVIST_SERVER) needs a token: give it in ARCHIVIST_TOKEN (or \
                 --token); `archivist token create --scope {scope}` on the server prints one"
            )));
        }
        let mut config =
            messagebus::api::ApiConfig::new(server, messagebus::api::ApiToken::new(secret));
        config.ca_cert = self.ca_cert.clone();
        Ok(config)
    }
}

/// Whether `error` is a token the API server refused (401, 403): exit 2, as bad configuration.
pub(crate) fn refused_token(error: &anyhow::Error) -> bool {
    error.chain().any(|e| {
        matches!(
            e.downcast_ref::<messagebus::BusError>(),
            Some(messagebus::BusError::Unauthorized { .. })
        )
    })
}

/// Where episode prints are kept (`research`, `analyse`, `prints`): see crate `prints`.
#[derive(Debug, clap::Args)]
pub(crate) struct PrintStoreArgs {
    /// Where episode prints are kept: a directory, or s3://bucket/prefix (configured as the
    /// AWS SDK is: AWS_REGION, the usual credentials, AWS_ENDPOINT_URL for an S3-compatible
    /// store) [default: $XDG_CACHE_HOME/archivist/prints, else ~/.cache/archivist/prints]
    #[arg(
        long,
        value_name = "URL",
        env = "ARCHIVIST_PRINT_STORE",
        hide_env_values = true
    )]
    pub(crate) print_store: Option<String>,
    /// The most a directory print store keeps, as 500MB or 10GiB (least recently used
    /// evicted)
    #[arg(long, env = "ARCHIVIST_PRINT_STORE_SIZE", hide_env_values = true,
          default_value = "10GiB", value_parser = parse_size)]
    pub(crate) print_store_size: u64,
}

/// Where the archive keeps each episode's media (`research`, `serve`, `run`, `demo`,
/// `matches`, `archive`): see crate `archive`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MediaArchiveArgs {
    /// Where each episode's media is kept, once, by its SHA-256: a directory, or
    /// s3://bucket/prefix (configured as the AWS SDK is). Every later pass reads the kept
    /// copy, not the show's URL [default: none, media is cached, not kept]
    #[arg(
        long,
        value_name = "URL",
        env = "ARCHIVIST_MEDIA_ARCHIVE",
        hide_env_values = true
    )]
    pub(crate) media_archive: Option<String>,
}

/// Parses `90s`, `15m`, `2h`, `1h 30m` (humantime).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("{e} (expected e.g. 90s, 15m, 2h)"))
}

/// Parses an interval: a duration longer than zero.
pub(crate) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be longer than zero".to_string());
    }
    Ok(d)
}

/// Parses a size: bytes, or with KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{s:?}: expected a size, as 500MB or 10GiB"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?} (B, KB, MB, GB, KiB, MiB, GiB…)"
            ))
        }
    };
    let bytes = number * scale;
    if !(1.0..=9.0e18).contains(&bytes) {
        return Err(format!("{s:?}: out of range"));
    }
    Ok(bytes as u64)
}

/// Parses a size in bytes: digits with an optional K, M or G (powers of 1024), as the
/// curators' options take it.
pub(crate) fn parse_size_kmg(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, factor) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| "expected a size in bytes, as 200000, 512K or 64M".to_string())?;
    match n.checked_mul(factor) {
        Some(0) => Err("must be more than zero".to_string()),
        Some(v) => Ok(v),
        None => Err("too large".to_string()),
    }
}

/// HOST:PORT as a socket address: an IP address as it is, a host name (`localhost`) resolved,
/// its IPv4 address preferred (what `localhost` means to most clients).
pub(crate) fn resolve_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let expected = "expected HOST:PORT, as 127.0.0.1:9898, [::]:9898 or localhost:9898";
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(expected.to_string());
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(expected.to_string());
    }
    let addrs: Vec<std::net::SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(s)
        .map_err(|e| format!("cannot resolve {host:?} ({e}); {expected}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("{host:?} resolves to no address; {expected}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug)]
    struct Source(&'static str);

    impl fmt::Display for Source {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Source {}

    #[test]
    fn a_context_its_cause_repeats_is_said_once() {
        let e = anyhow::Error::new(Source(
            "sending to curated_episodes: the API server refused the token",
        ))
        .context("sending to curated_episodes");
        assert_eq!(
            describe(&e),
            "sending to curated_episodes: the API server refused the token"
        );
        let e = anyhow::Error::new(Source("connection refused")).context("cannot reach the bus");
        assert_eq!(describe(&e), "cannot reach the bus: connection refused");
        let e = anyhow::Error::new(Source("cannot reach the bus")).context("cannot reach the bus");
        assert_eq!(describe(&e), "cannot reach the bus");
    }
}
