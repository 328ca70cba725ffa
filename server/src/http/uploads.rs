//! Dataset uploads over HTTP, of any size within the operator's limit: the request body (or
//! the form's file field) is written to a temporary file as it arrives, never held in
//! memory, and the engine then parses that file as it streams (see
//! `arbiter_engine::catalog::upload_dataset_file`).

use axum::http::StatusCode;
use std::io::Write;
use tempfile::NamedTempFile;

/// Why an upload could not be received: the status to answer with, and the message.
pub type Refusal = (StatusCode, String);

/// A temporary file receiving an upload, bounded by `limit` bytes.
pub struct Spool {
    file: NamedTempFile,
    written: usize,
    limit: usize,
}

impl Spool {
    /// A spool in `ARBITER_UPLOAD_DIR` when the operator set it (the system's temporary
    /// directory may be memory-backed, or small), else the system's.
    pub fn new(limit: usize) -> Result<Spool, Refusal> {
        let file = match std::env::var_os("ARBITER_UPLOAD_DIR") {
            Some(directory) => NamedTempFile::new_in(directory),
            None => NamedTempFile::new(),
        }
        .map_err(|err| {
            tracing::error!(error = %err, "could not create an upload's temporary file");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the server could not store the upload".to_string(),
            )
        })?;
        Ok(Spool {
            file,
            written: 0,
            limit,
        })
    }

    /// Appends a piece of the upload; more than the limit in all is refused (413).
    pub fn write(&mut self, piece: &[u8]) -> Result<(), Refusal> {
        self.written += piece.len();
        if self.written > self.limit {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the file is larger than {} MB, the limit for one upload (the operator's \
                     ARBITER_MAX_UPLOAD_MB)",
                    self.limit / (1024 * 1024)
                ),
            ));
        }
        self.file.write_all(piece).map_err(|err| {
            tracing::error!(error = %err, "could not write an upload's temporary file");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the server could not store the upload".to_string(),
            )
        })
    }

    /// The received file, flushed; it is removed when dropped.
    pub fn finish(mut self) -> Result<NamedTempFile, Refusal> {
        self.file.flush().map_err(|err| {
            tracing::error!(error = %err, "could not flush an upload's temporary file");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the server could not store the upload".to_string(),
            )
        })?;
        Ok(self.file)
    }
}

/// Spools a whole request body, frame by frame.
pub async fn spool_body(body: axum::body::Body, limit: usize) -> Result<NamedTempFile, Refusal> {
    use http_body_util::BodyExt;
    let mut spool = Spool::new(limit)?;
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| {
            (
                StatusCode::BAD_REQUEST,
                format!("the upload could not be read: {err}"),
            )
        })?;
        if let Some(data) = frame.data_ref() {
            spool.write(data)?;
        }
    }
    spool.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spool_keeps_what_fits_and_refuses_the_rest_with_413() {
        let mut spool = Spool::new(10).unwrap();
        spool.write(b"{\"a\":1}\n").unwrap();
        let (status, message) = spool.write(b"more").unwrap_err();
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(message.contains("ARBITER_MAX_UPLOAD_MB"), "{message}");
        let mut spool = Spool::new(10).unwrap();
        spool.write(b"0123456789").unwrap();
        let file = spool.finish().unwrap();
        assert_eq!(std::fs::read(file.path()).unwrap(), b"0123456789");
    }
}
