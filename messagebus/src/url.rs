//! Database and broker URLs as they may be shown: credentials masked. Shared by the datastore,
//! whose URLs take the same forms (the lowest crate both depend on).

/// Query parameters that carry a secret, in any form sqlx or libpq accept.
const SECRET_PARAMS: &[&str] = &["password", "sslpassword", "passfile"];

/// `url` with every credential replaced by `***`: the password of the user part and the
/// `password`, `sslpassword` and `passfile` parameters. For logs and error messages.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return redact_unparsed(url);
    };
    if parsed.password().is_some() && parsed.set_password(Some("***")).is_err() {
        return redact_unparsed(url);
    }
    if parsed
        .query_pairs()
        .any(|(k, _)| SECRET_PARAMS.contains(&k.as_ref()))
    {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if SECRET_PARAMS.contains(&k.as_ref()) {
                    "***".to_string()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

/// What can still be masked in a string that is not a URL: everything after a `:` in what
/// looks like a user part, and every secret parameter's value.
fn redact_unparsed(text: &str) -> String {
    let mut out = text.to_string();
    if let Some((scheme, rest)) = text.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if let Some((userinfo, host)) = authority.rsplit_once('@') {
            if let Some((user, _)) = userinfo.split_once(':') {
                out = format!("{scheme}://{user}:***@{host}{}", &rest[authority.len()..]);
            }
        }
    }
    for key in SECRET_PARAMS {
        let needle = format!("{key}=");
        let mut searched = 0;
        while let Some(at) = out[searched..].find(&needle) {
            let start = searched + at + needle.len();
            let end = out[start..]
                .find(['&', '#', ' '])
                .map_or(out.len(), |e| start + e);
            out.replace_range(start..end, "***");
            searched = start + 3;
        }
    }
    out
}

/// `url` without the parameters sqlx does not support but libpq users may write
/// (`sslpassword`, `passfile`): sqlx would ignore them, logging their values. Returns the
/// URL to connect with and the names of what was left out.
pub fn without_unsupported_params(url: &str) -> (String, Vec<String>) {
    const UNSUPPORTED: &[&str] = &["sslpassword", "passfile"];
    let Ok(mut parsed) = url::Url::parse(url) else {
        return (url.to_string(), Vec::new());
    };
    let dropped: Vec<String> = parsed
        .query_pairs()
        .filter(|(k, _)| UNSUPPORTED.contains(&k.as_ref()))
        .map(|(k, _)| k.into_owned())
        .collect();
    if dropped.is_empty() {
        return (url.to_string(), dropped);
    }
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| !UNSUPPORTED.contains(&k.as_ref()))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(kept);
    }
    (parsed.to_string(), dropped)
}

#[cfg(test)]
mod tests {
    use super::{redact_url, without_unsupported_params};

    #[test]
    fn masks_every_credential() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db?x=1"),
            "postgres://u:***@h:5432/db?x=1"
        );
        let shown = redact_url(
            "postgres://u@127.0.0.1:1/db?password=hunter2&sslpassword=x2&passfile=/etc/pf&a=b",
        );
        assert!(!shown.contains("hunter2") && !shown.contains("x2") && !shown.contains("/etc/pf"));
        assert!(
            shown.contains("a=b") && shown.contains("password=***"),
            "{shown}"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://a.db"), "sqlite://a.db");
        assert_eq!(redact_url("sqlite:a.db"), "sqlite:a.db");
        assert_eq!(
            redact_url("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
    }

    #[test]
    fn masks_what_is_not_a_url() {
        let shown = redact_url("not a url password=hunter2 and more");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn leaves_out_what_sqlx_would_log() {
        let (url, dropped) =
            without_unsupported_params("postgres://h/db?sslpassword=x&sslmode=disable&passfile=p");
        assert_eq!(url, "postgres://h/db?sslmode=disable");
        assert_eq!(dropped, ["sslpassword", "passfile"]);
        let (url, dropped) = without_unsupported_params("postgres://h/db?passfile=p");
        assert_eq!((url.as_str(), dropped.len()), ("postgres://h/db", 1));
    }
}
