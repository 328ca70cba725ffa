//! The webhooks card of the System page.

use crate::components::{ActionError, ErrorNote};
use crate::format::format_time;
use crate::operations::webhooks_api::{webhooks_page, CreateWebhook, DeleteWebhook, WebhooksData};
use leptos::prelude::*;

#[component]
pub fn WebhooksCard() -> impl IntoView {
    let create = ServerAction::<CreateWebhook>::new();
    let delete = ServerAction::<DeleteWebhook>::new();
    let data = Resource::new(
        move || (create.version().get(), delete.version().get()),
        |_| webhooks_page(),
    );
    view! {
        <section class="card" data-testid="webhooks">
            <h2>"Webhooks"</h2>
            <p class="hint">
                "Arbiter POSTs JSON to each receiver when a run completes and when an alert opens or resolves, "
                "retrying with backoff for up to 8 attempts. Signed deliveries carry "
                <code>"X-Arbiter-Signature: t=…,v1=HMAC-SHA256(secret, \"t.body\")"</code> "."
            </p>
            <ActionError value=create.value()/>
            <ActionError value=delete.value()/>
            {move || create.value().get().and_then(Result::ok).map(|made| view! {
                <div class="notice" role="status">
                    <p>"Webhook to " <code>{made.url}</code> " added."</p>
                    {made.secret.map(|secret| view! {
                        <p>"Its signing secret — copy it now, it will not be shown again:"</p>
                        <pre data-testid="webhook-secret">{secret}</pre>
                    })}
                </div>
            })}
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(data) => view! { <WebhooksBody data create delete/> }.into_any(),
                        Err(error) => view! { <ErrorNote error/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn WebhooksBody(
    data: WebhooksData,
    create: ServerAction<CreateWebhook>,
    delete: ServerAction<DeleteWebhook>,
) -> impl IntoView {
    let can_edit = data.can_edit;
    view! {
        {if data.webhooks.is_empty() {
            view! { <p>"No webhooks."</p> }.into_any()
        } else {
            view! {
                <table>
                    <thead><tr><th>"Receiver"</th><th>"Events"</th><th>"Signed"</th><th></th></tr></thead>
                    <tbody>
                        {data.webhooks.into_iter().map(|webhook| {
                            let id = webhook.id;
                            let can_delete = can_edit && webhook.can_delete;
                            view! {
                                <tr>
                                    <td><code>{webhook.url}</code></td>
                                    <td>{webhook.events}</td>
                                    <td>{if webhook.signed { "yes" } else { "no" }}</td>
                                    <td>
                                        <Show when=move || can_delete>
                                            <button class="secondary" on:click=move |_| { delete.dispatch(DeleteWebhook { id }); }>"Delete"</button>
                                        </Show>
                                    </td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
        <Show when=move || can_edit>
            <details>
                <summary>"Add a webhook"</summary>
                <ActionForm action=create attr:class="stack">
                    <label>"Receiver URL" <input name="url" required placeholder="https://ci.example.com/arbiter-hook"/></label>
                    <fieldset>
                        <legend>"Events"</legend>
                        <label class="inline"><input type="checkbox" name="events[run.completed]" checked/> " run completed"</label>
                        <label class="inline"><input type="checkbox" name="events[alert.raised]"/> " alert raised"</label>
                        <label class="inline"><input type="checkbox" name="events[alert.resolved]"/> " alert resolved"</label>
                        <label class="inline"><input type="checkbox" name="events[label.completed]"/> " item labelled (each human decision, with its labels)"</label>
                    </fieldset>
                    <label class="inline">
                        <input type="checkbox" name="sign" disabled=!data.can_sign/>
                        " Sign deliveries"
                        {(!data.can_sign).then_some(" (needs ARBITER_SECRET_KEY on the server)")}
                    </label>
                    <button type="submit">"Add webhook"</button>
                </ActionForm>
            </details>
        </Show>
        {(!data.deliveries.is_empty()).then(|| view! {
            <h3>"Latest deliveries"</h3>
            <table data-testid="deliveries">
                <thead><tr><th>"Queued"</th><th>"Event"</th><th>"Receiver"</th><th>"Attempts"</th><th>"State"</th><th>"Last answer"</th></tr></thead>
                <tbody>
                    {data.deliveries.into_iter().map(|delivery| view! {
                        <tr>
                            <td>{format_time(delivery.created_at)}</td>
                            <td>{delivery.event_key}</td>
                            <td><code>{delivery.url}</code></td>
                            <td>{delivery.attempts}</td>
                            <td>{delivery.state}</td>
                            <td>{delivery.detail}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        })}
    }
}
