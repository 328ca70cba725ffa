//! Webhooks: receivers of event notifications and their deliveries, as the page lists them.

use serde::{Deserialize, Serialize};

/// A receiver of event notifications.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Webhook {
    pub id: i64,
    pub url: String,
    /// `run.completed`, `alert.raised`, `alert.resolved`.
    pub events: Vec<String>,
    /// Whether deliveries carry an `X-Arbiter-Signature`.
    pub signed: bool,
    /// The sealed signing secret: the server's own, never serialised.
    #[serde(skip)]
    #[schema(ignore)]
    pub secret_ref: Option<String>,
    /// Events up to this time have been queued.
    pub cursor_ms: i64,
    pub created_at: i64,
}

/// A delivery as the page lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryRecord {
    pub id: i64,
    pub webhook_id: i64,
    pub url: String,
    pub event: String,
    pub event_key: String,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub delivered_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: i64,
}
