//! Webhooks: receivers of event notifications and their deliveries, as the page lists them.

use crate::accounts::{Permission, Role};
use crate::ids::UserId;
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
    /// Who added it (`None` for ones added before owners were kept, or by an operator).
    pub created_by: Option<UserId>,
    pub created_at: i64,
}

impl Webhook {
    /// Its creator, leads and admins see the whole URL and may delete it.
    pub fn managed_by(&self, user: UserId, role: Role) -> bool {
        self.created_by == Some(user) || role.can(Permission::ManageUsers)
    }
}

/// A receiver's URL cut to its scheme, host and port, for everyone else: receivers such as
/// chat hooks carry their secret in the path or the query, never in the host.
pub fn redacted_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => match (parsed.host_str(), parsed.port()) {
            (Some(host), Some(port)) => format!("{}://{host}:{port}/…", parsed.scheme()),
            (Some(host), None) => format!("{}://{host}/…", parsed.scheme()),
            (None, _) => "…".to_string(),
        },
        Err(_) => "…".to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_only_where_a_receiver_is() {
        for (url, shown) in [
            (
                "https://hooks.slack.com/services/T000/B000/XXXXSECRET",
                "https://hooks.slack.com/…",
            ),
            (
                "http://10.0.0.5:8080/hook?token=abc#frag",
                "http://10.0.0.5:8080/…",
            ),
            ("https://[2001:db8::1]/x", "https://[2001:db8::1]/…"),
            ("not a url", "…"),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
        }
    }

    #[test]
    fn owners_leads_and_admins_manage_a_webhook() {
        let webhook = Webhook {
            id: 1,
            url: "https://example.test/hook".into(),
            events: vec!["run.completed".into()],
            signed: false,
            secret_ref: None,
            cursor_ms: 0,
            created_by: Some(UserId(7)),
            created_at: 0,
        };
        assert!(webhook.managed_by(UserId(7), Role::Researcher));
        assert!(!webhook.managed_by(UserId(8), Role::Researcher));
        assert!(webhook.managed_by(UserId(8), Role::Lead));
        assert!(webhook.managed_by(UserId(8), Role::Admin));
        let unowned = Webhook {
            created_by: None,
            ..webhook
        };
        assert!(!unowned.managed_by(UserId(7), Role::Researcher));
    }
}
