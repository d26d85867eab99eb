//! The server's errors: [`Error`], what stops it from starting or serving, for its caller to act
//! on; and `ApiError`, errors as every route reports them (`{"error": {"message", "field"?}}`
//! with a status, from the core's typed errors).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// What stops the server from starting or serving.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A setting the server does not take: `setting` names where it came from (a keys file's
    /// line, a model window), `why` the rule it breaks. The caller adds its own flag's name.
    Invalid {
        /// Where the value came from.
        setting: String,
        /// What is wrong with it.
        why: String,
    },
    /// Serving without API keys on an address other than loopback, where anyone could reach it.
    Unprotected {
        /// The address asked for.
        listen: std::net::SocketAddr,
    },
    /// The store could not be opened (a bad path, a foreign file, a database that does not
    /// answer).
    Store {
        /// The store, as shown (never with its password).
        store: String,
        /// What went wrong.
        source: engram::Error,
    },
    /// Listening or serving failed: the address is taken, standard input broke.
    Io {
        /// What was being done.
        doing: String,
        /// What went wrong.
        source: std::io::Error,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Invalid { setting, why } => write!(f, "{setting}: {why}"),
            Error::Unprotected { listen } => write!(
                f,
                "refusing to serve {listen} without API keys: pass --api-keys FILE (one tenant:key per line), or listen on 127.0.0.1"
            ),
            Error::Store { store, source } => write!(f, "{store}: {source}"),
            Error::Io { doing, source } => write!(f, "{doing}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Store { source, .. } => Some(source),
            Error::Io { source, .. } => Some(source),
            Error::Invalid { .. } | Error::Unprotected { .. } => None,
        }
    }
}

/// An error as the API reports it: `{"error": {"message", "field"?}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) field: Option<String>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            field: None,
        }
    }

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn field(field: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!("`{field}`: {}", message.into()),
            field: Some(field.to_owned()),
        }
    }

    /// A 500 whose detail goes to the log, never to the client.
    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(%detail, "internal error");
        eprintln!("engram serve: internal error: {detail}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
    }
}

impl ApiError {
    /// A 503 for a tenant whose store cannot be opened (a foreign or damaged database file,
    /// an unreachable server): the detail, with the file, goes to the log; the client is told
    /// that the fault is on the server's side and lasting until an operator acts.
    pub(crate) fn store_unavailable(tenant: &str, detail: impl std::fmt::Display) -> Self {
        tracing::error!(%tenant, %detail, "cannot open the tenant's store");
        eprintln!("engram serve: cannot open the store of tenant {tenant:?}: {detail}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this tenant's store cannot be opened; the server's log says why",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"message": self.message});
        if let Some(f) = self.field {
            error["field"] = json!(f);
        }
        (self.status, axum::Json(json!({ "error": error }))).into_response()
    }
}

/// The core's error by its kind: what does not exist is a 404, a contradiction of what is
/// stored a 409, what a compaction cannot keep within its budget a 422, a mistake in the
/// request a 400 (naming the field when the core names one); a failure of the store or the
/// setup is a 500 whose detail goes to the log.
impl From<engram::Error> for ApiError {
    fn from(e: engram::Error) -> Self {
        use engram::Error as E;
        match e {
            E::NotFound { message, .. } => ApiError::new(StatusCode::NOT_FOUND, message),
            E::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
            E::Invalid { field, why } if field.is_empty() => ApiError::bad(why),
            E::Invalid { field, why } => ApiError::field(&field, why),
            e @ (E::CannotFit { .. } | E::NoMessages) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
            E::Rejected(m) => ApiError::bad(m),
            e @ (E::Input(_)
            | E::UnknownName { .. }
            | E::Malformed(_)
            | E::OutOfRange(_)
            | E::Required(_)) => ApiError::bad(e.to_string()),
            other => ApiError::internal(other),
        }
    }
}

/// What a handler returns.
pub(crate) type ApiResult = Result<Response, ApiError>;

/// A JSON body with status 200.
pub(crate) fn ok(value: Value) -> ApiResult {
    Ok(axum::Json(value).into_response())
}
