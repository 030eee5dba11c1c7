//! A panic is a bug, and its message may hold whatever was formatted into it, a URL with its
//! password included. The hook prints it as an error (`error: internal error …`) with every
//! credential the process knows masked: the DATABASE_URL and ARCHIVIST_BUS_URL passwords and
//! secret parameters, the AWS secret key and session token, and the API token (ARCHIVIST_TOKEN).
//!
//! One panic is not a bug of ours: the analyser's decoding library (symphonia) asserts on some
//! crafted headers. The analyser catches those (`analysis/src/guard.rs`) and fails that file
//! alone; the hook, which runs before the catch, asks `analysis::catching_decoder_panic()` and
//! stays quiet for them. The flag is per thread, so a bug elsewhere is still reported.

use std::cmp::Reverse;
use std::io::Write;

/// Query parameters that carry a secret (as `messagebus::redact_url` masks them).
const SECRET_PARAMS: &[&str] = &["password", "sslpassword", "passfile"];

/// Installs the hook; `urls` are the database and bus URLs in use.
pub(crate) fn install(urls: &[Option<&str>]) {
    let replacements = replacements(urls);
    std::panic::set_hook(Box::new(move |info| {
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_string());
        let at = info
            .location()
            .map(|l| format!(" (at {}:{})", l.file(), l.line()))
            .unwrap_or_default();
        let text = mask(&format!("{payload}{at}"), &replacements);
        // Inside the analyser's guarded call into its decoding library (symphonia asserts on
        // some crafted headers): the panic is caught there and becomes that file's failure,
        // reported with the file's name like any undecodable file. Not a bug of ours: no
        // "internal error" on standard error, only a debug line with where it happened.
        if analysis::catching_decoder_panic() {
            tracing::debug!(panic = %text, "the decoding library panicked; caught, that file fails");
            return;
        }
        // A closed standard error: nobody to tell.
        let _ = writeln!(
            std::io::stderr(),
            "error: internal error, a bug (please report it): {text}"
        );
    }));
}

/// Masks the credentials of known URLs (and the AWS secrets) in a text shown to someone:
/// the status page's error messages.
#[derive(Clone)]
pub(crate) struct Redactor(Vec<(String, String)>);

impl Redactor {
    /// A redactor for `urls` (the database and bus URLs in use).
    pub(crate) fn new(urls: &[Option<&str>]) -> Self {
        Redactor(replacements(urls))
    }

    /// `text` with every known credential masked.
    pub(crate) fn apply(&self, text: &str) -> String {
        mask(text, &self.0)
    }
}

/// `text` with each `(from, to)` replaced, in order.
fn mask(text: &str, replacements: &[(String, String)]) -> String {
    let mut text = text.to_string();
    for (from, to) in replacements {
        text = text.replace(from.as_str(), to);
    }
    text
}

/// What to mask: each URL by its masked form, then every bare secret, longest first.
fn replacements(urls: &[Option<&str>]) -> Vec<(String, String)> {
    // Whole URLs first (replaced by their masked form), then the bare secrets, longest first.
    let mut replacements: Vec<(String, String)> = Vec::new();
    let mut secrets: Vec<String> = Vec::new();
    for url in urls.iter().flatten() {
        replacements.push((url.to_string(), datastore::redact_url(url)));
        if let Ok(parsed) = url::Url::parse(url) {
            secrets.extend(parsed.password().map(str::to_string));
            secrets.extend(
                parsed
                    .query_pairs()
                    .filter(|(k, _)| SECRET_PARAMS.contains(&k.as_ref()))
                    .map(|(_, v)| v.into_owned()),
            );
        }
    }
    for var in [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "ARCHIVIST_TOKEN",
    ] {
        secrets.extend(std::env::var(var).ok());
    }
    secrets.retain(|s| !s.is_empty() && s != "***");
    secrets.sort_by_key(|s| Reverse(s.len()));
    replacements.extend(secrets.into_iter().map(|s| (s, "***".to_string())));
    replacements
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    #[test]
    fn masks_every_credential_of_the_urls() {
        let url = "postgres://u:pw-one@h/db?password=pw-two&sslmode=disable";
        let r = super::replacements(&[Some(url), None, Some("sqlite://x.sqlite")]);
        let text = super::mask(
            &format!("config {{ database_url: Some({url:?}) }}, then pw-one, pw-two"),
            &r,
        );
        assert!(
            !text.contains("pw-one") && !text.contains("pw-two"),
            "{text}"
        );
        assert!(
            text.contains("sslmode=disable") && text.contains("***"),
            "{text}"
        );
    }
}
