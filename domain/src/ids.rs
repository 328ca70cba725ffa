//! The ids of what Arbiter stores, one type each, so that a run's id cannot be passed where a
//! checkpoint's is expected. Each is the database's integer key: stored, sent over the API,
//! written in URLs and shown on pages as that integer (serde and `Display` are transparent),
//! so frozen manifests and their hashes, and every message, are as when the ids were bare
//! integers.

use std::fmt;
use std::num::ParseIntError;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

macro_rules! id_types {
    ($($(#[$doc:meta])* $name:ident;)+) => {$(
        $(#[$doc])*
        #[derive(
            Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
            ToSchema,
        )]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl $name {
            /// The integer key, for the store's queries.
            pub const fn get(self) -> i64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(formatter)
            }
        }

        /// As the bare integer too, so messages that list ids (`{ids:?}`) read as before.
        impl fmt::Debug for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(formatter)
            }
        }

        /// From the store's integer key.
        impl From<i64> for $name {
            fn from(key: i64) -> Self {
                $name(key)
            }
        }

        impl From<$name> for i64 {
            fn from(id: $name) -> i64 {
                id.0
            }
        }

        /// From a URL segment or a form field.
        impl FromStr for $name {
            type Err = ParseIntError;
            fn from_str(text: &str) -> Result<Self, ParseIntError> {
                text.parse().map($name)
            }
        }
    )+};
}

id_types! {
    /// A run: one frozen manifest launched against a checkpoint.
    RunId;
    /// An eval: the definition a run is launched from.
    EvalId;
    /// A registered checkpoint (and its endpoint).
    CheckpointId;
    /// A dataset, across its revisions.
    DatasetId;
    /// One immutable revision of a dataset.
    RevisionId;
    /// A streamed upload whose items are staged until the whole file is read.
    UploadId;
    /// A user account; raters, reviewers and leads are users.
    UserId;
    /// A result identity: one case, repetition and grader stage of a run, committed once.
    IdentityId;
    /// A human annotation task.
    TaskId;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_and_writes_as_its_integer() {
        assert_eq!(serde_json::to_string(&RunId(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<RunId>("42").unwrap(), RunId(42));
        assert_eq!(RunId(42).to_string(), "42");
        assert_eq!("42".parse::<RunId>().unwrap(), RunId(42));
        assert_eq!(format!("{:?}", vec![RunId(4), RunId(2)]), "[4, 2]");
        assert!("run 42".parse::<RunId>().is_err());
    }
}
