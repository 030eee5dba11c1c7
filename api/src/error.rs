//! [`ApiError`]: what a request or the gateway's set-up can fail with, and the answer each
//! gets (status code and JSON body).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// One refused line of a request body: its number (from 1) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct LineError {
    /// The line's number, counting from 1 (blank lines counted).
    pub line: usize,
    /// Why it was refused.
    pub reason: String,
}

/// What went wrong. Each variant is one answer of the API (see [`ApiError::status`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// No valid token (none, unknown, revoked): 401.
    #[error("a valid bearer token is needed (Authorization: Bearer TOKEN)")]
    Unauthorized,
    /// A valid token of another scope: 403.
    #[error("this needs a token of scope {needed}")]
    Forbidden {
        /// The scope the request needs.
        needed: datastore::TokenScope,
    },
    /// Too many failed attempts with this credential, or requests with this token: 429, with
    /// `Retry-After`.
    #[error("too many requests: try again in {retry_after} s")]
    TooManyRequests {
        /// Seconds until a request may succeed again.
        retry_after: u64,
    },
    /// A body that is not JSON (lines): 400.
    #[error("{0}")]
    BadRequest(String),
    /// The body is over the limit: 413.
    #[error("the body is over the limit of {0} bytes")]
    TooLarge(usize),
    /// The body holds more lines than one request may: 413.
    #[error("the body holds more than {0} lines")]
    TooManyLines(usize),
    /// Lines that break the archivists' rules: 422, nothing of the request done. At most
    /// [`MAX_LISTED`] are listed; `refused` counts them all.
    #[error("{}", invalid_summary(*.refused, .errors.len()))]
    Invalid {
        /// The first refused lines.
        errors: Vec<LineError>,
        /// How many lines were refused in all.
        refused: usize,
    },
    /// The receipt is unknown, expired, or no longer holds its item; a kept copy or print
    /// that is damaged: 409.
    #[error("{0}")]
    Conflict(String),
    /// No such copy, episode or print: 404.
    #[error("{0}")]
    NotFound(String),
    /// A body that is well formed but cannot be done (a copy whose bytes do not hash to its
    /// name, a version whose copy is not kept, a print whose envelope does not hold): 422,
    /// nothing done.
    #[error("{0}")]
    Unprocessable(String),
    /// A range that is not within the copy: 416, with `Content-Range: bytes */SIZE`.
    #[error("the range asked for is not within the copy's {size} bytes")]
    RangeNotSatisfiable {
        /// The copy's length.
        size: u64,
    },
    /// Too many long polls at once, or the bus or datastore cannot be reached now: 503.
    #[error("{0}")]
    Unavailable(String),
    /// Bad usage of the library (a token name that cannot be one).
    #[error("{0}")]
    Usage(String),
    /// The datastore failed.
    #[error("datastore: {0}")]
    DataStore(#[from] datastore::DataStoreError),
    /// The bus failed.
    #[error("bus: {0}")]
    Bus(#[from] messagebus::BusError),
    /// TLS set-up: a certificate or key that cannot be read or used.
    #[error("TLS: {0}")]
    Tls(String),
}

/// The most refused lines a 422 lists.
pub const MAX_LISTED: usize = 100;

fn invalid_summary(refused: usize, listed: usize) -> String {
    if listed < refused {
        format!("{refused} lines refused; the first {listed} are listed")
    } else if refused == 1 {
        "1 line refused".into()
    } else {
        format!("{refused} lines refused")
    }
}

/// An error's body: what went wrong, and for 422 each refused line.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorAnswer {
    /// What went wrong, in words.
    pub(crate) error: String,
    /// 422 only: each refused line (the first 100), with its number (from 1) and reason.
    pub(crate) errors: Option<Vec<LineError>>,
}

impl ApiError {
    /// The status code the API answers this with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::BadRequest(_) | ApiError::Usage(_) => StatusCode::BAD_REQUEST,
            ApiError::TooLarge(_) | ApiError::TooManyLines(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::DataStore(e) if !e.is_retryable() => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Bus(e) if !e.is_retryable() => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::DataStore(_) | ApiError::Bus(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Tls(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<&'a [LineError]>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let error = match &self {
            // The datastore's and the bus's words may carry their URLs: logged, not shown.
            ApiError::DataStore(_) | ApiError::Bus(_) => {
                tracing::warn!(error = %self, "API request failed");
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    "the bus or the datastore cannot be reached now: try again later".into()
                } else {
                    "the request failed inside the server".into()
                }
            }
            other => other.to_string(),
        };
        let errors = match &self {
            ApiError::Invalid { errors, .. } => Some(errors.as_slice()),
            _ => None,
        };
        let mut response = (status, Json(ErrorBody { error, errors })).into_response();
        if let ApiError::Unavailable(_) = &self {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if let ApiError::RangeNotSatisfiable { size } = &self {
            if let Ok(value) = axum::http::HeaderValue::from_str(&format!("bytes */{size}")) {
                response
                    .headers_mut()
                    .insert(axum::http::header::CONTENT_RANGE, value);
            }
        }
        if let ApiError::TooManyRequests { retry_after } = &self {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(*retry_after),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}
