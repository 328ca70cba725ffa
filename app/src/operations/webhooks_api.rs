//! Server functions of the webhooks card (System page): receivers of run and alert events,
//! and their latest deliveries.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[cfg(feature = "ssr")]
use crate::guard::{require, service_error};
#[cfg(feature = "ssr")]
use arbiter_domain::accounts::Permission;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookView {
    pub id: i64,
    pub url: String,
    pub events: String,
    pub signed: bool,
    /// The viewer created it, or leads the pool: the whole URL is shown and it may be deleted.
    pub can_delete: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryView {
    pub url: String,
    pub event_key: String,
    pub attempts: i64,
    /// delivered, retrying, failed.
    pub state: String,
    pub detail: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhooksData {
    pub webhooks: Vec<WebhookView>,
    pub deliveries: Vec<DeliveryView>,
    pub can_edit: bool,
    /// Whether this server can sign (has ARBITER_SECRET_KEY).
    pub can_sign: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreatedWebhookView {
    pub url: String,
    pub secret: Option<String>,
}

#[server(endpoint = "webhooks_page")]
pub async fn webhooks_page() -> Result<WebhooksData, ServerFnError> {
    let (state, user) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    let webhooks = arbiter_engine::webhooks::webhooks_seen_by(store, &user)
        .await
        .map_err(service_error)?;
    let deliveries = arbiter_engine::webhooks::deliveries_seen_by(store, &user, 20)
        .await
        .map_err(service_error)?;
    Ok(WebhooksData {
        webhooks: webhooks
            .into_iter()
            .map(|webhook| WebhookView {
                can_delete: webhook.managed_by(user.id, user.role),
                id: webhook.id,
                url: webhook.url,
                events: webhook.events.join(", "),
                signed: webhook.signed,
            })
            .collect(),
        deliveries: deliveries
            .into_iter()
            .map(|delivery| DeliveryView {
                state: if delivery.delivered_at.is_some() {
                    "delivered"
                } else if delivery.failed_at.is_some() {
                    "failed"
                } else {
                    "retrying"
                }
                .into(),
                detail: match (delivery.last_status, delivery.last_error) {
                    (_, Some(error)) => error,
                    (Some(status), None) => format!("HTTP {status}"),
                    (None, None) => "not sent yet".into(),
                },
                url: delivery.url,
                event_key: delivery.event_key,
                attempts: delivery.attempts,
                created_at: delivery.created_at,
            })
            .collect(),
        can_edit: user.role.can(Permission::ManageEvals),
        can_sign: arbiter_engine::secrets::process().can_seal(),
    })
}

/// Adds a webhook; `events` holds one `events[NAME]=on` per ticked event.
#[server(endpoint = "create_webhook")]
pub async fn create_webhook(
    url: String,
    #[server(default)] events: BTreeMap<String, String>,
    #[server(default)] sign: Option<String>,
) -> Result<CreatedWebhookView, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let events: Vec<String> = events.into_keys().collect();
    let (webhook, secret) = arbiter_engine::webhooks::create_webhook(
        state.store.as_ref(),
        arbiter_engine::secrets::process(),
        &url,
        &events,
        sign.is_some(),
        user.role.can(Permission::ManageUsers),
        Some(user.id),
        arbiter_store::now_ms(),
    )
    .await
    .map_err(service_error)?;
    Ok(CreatedWebhookView {
        url: webhook.url,
        secret,
    })
}

#[server(endpoint = "delete_webhook")]
pub async fn delete_webhook(id: i64) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    arbiter_engine::webhooks::delete_webhook(state.store.as_ref(), &user, id)
        .await
        .map_err(service_error)
}
