//! API tokens: made here (256 random bits, shown once), stored as their SHA-256 hash only.

use chrono::{DateTime, Utc};
use datastore::{ApiAccess, NewToken, TokenScope};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::ApiError;

/// Every token starts with this, so that one pasted in the wrong place (a log, a chat) is
/// recognised for what it is and can be revoked.
pub const TOKEN_PREFIX: &str = "archivist_";

/// A new token: [`TOKEN_PREFIX`] and 256 random bits from the operating system's generator,
/// as 64 lowercase hex digits.
pub fn generate() -> String {
    let mut bits = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bits);
    format!("{TOKEN_PREFIX}{}", hex(&bits))
}

/// The token's hash as stored and looked up: SHA-256 of the whole token, lowercase hex. A
/// look-up by hash compares no secret byte by byte, so its time tells nothing of the token.
pub fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Makes a token named `name` (a random name when `None`) with `scope`, counting as at most
/// `max_researchers` researchers (at least 1), stores its hash, and returns the name and the
/// token: the only time the token exists outside its holder.
pub async fn issue(
    access: &dyn ApiAccess,
    name: Option<String>,
    scope: TokenScope,
    max_researchers: u32,
    now: DateTime<Utc>,
) -> Result<(String, String), ApiError> {
    let name = match name {
        Some(name) => check_name(&name).map(|()| name)?,
        None => format!("{scope}-{}", &hex(&rand::random::<[u8; 4]>())),
    };
    let token = generate();
    access
        .create_token(&NewToken {
            name: name.clone(),
            scope,
            hash: hash(&token),
            created: now,
            max_researchers: max_researchers.max(1),
        })
        .await?;
    Ok((name, token))
}

/// A token's name: 1 to 64 characters, letters, digits, `-`, `_`, `.`, `@`.
pub fn check_name(name: &str) -> Result<(), ApiError> {
    let fine = !name.is_empty()
        && name.chars().count() <= 64
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
    if fine {
        Ok(())
    } else {
        Err(ApiError::Usage(format!(
            "token name {name:?}: 1 to 64 letters, digits, '-', '_', '.' or '@'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_recognisable() {
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 64);
        assert_eq!(hash(&a).len(), 64);
        assert_eq!(hash(&a), hash(&a));
        assert_ne!(hash(&a), hash(&b));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("alice@lab-2").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name(&"x".repeat(65)).is_err());
    }
}
