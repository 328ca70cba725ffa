//! The error every use case returns: what went wrong in words safe to show the user, and the
//! HTTP status that fits. Store failures map here; an infrastructure cause is logged, never shown.

use arbiter_store::StoreError;

/// Failure of a use case. `Internal` hides its cause from the user; it is logged here.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Forbidden(String),
    /// No credentials, or ones that identify nobody (an API token that is unknown or revoked).
    #[error("{0}")]
    Unauthorized(String),
    /// The server is at a limit it keeps on purpose (concurrent password checks); the same
    /// request may succeed in a moment.
    #[error("{0}")]
    Busy(String),
    /// Too many failed attempts lately (wrong passwords); says when to try again.
    #[error("{0}")]
    Throttled(String),
    #[error("something went wrong on the server; the details are in its log")]
    Internal,
}

impl ServiceError {
    /// The HTTP status that fits, for API routes and server functions.
    pub fn status_code(&self) -> u16 {
        match self {
            ServiceError::Invalid(_) => 400,
            ServiceError::NotFound(_) => 404,
            ServiceError::Conflict(_) => 409,
            ServiceError::Forbidden(_) => 403,
            ServiceError::Unauthorized(_) => 401,
            ServiceError::Busy(_) => 503,
            ServiceError::Throttled(_) => 429,
            ServiceError::Internal => 500,
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> ServiceError {
        match err {
            StoreError::Conflict(message) => ServiceError::Conflict(message),
            StoreError::NotFound(message) => ServiceError::NotFound(message),
            other => {
                tracing::error!(error = %other, "store failure");
                ServiceError::Internal
            }
        }
    }
}

pub type ServiceResult<T> = Result<T, ServiceError>;
