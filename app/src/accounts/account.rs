//! The Account page: personal API tokens for the REST API and the `arbiter` CI commands.

use crate::accounts::api::{api_tokens, CreateApiToken, RevokeApiToken, TokenView};
use crate::components::{ActionError, ErrorNote};
use crate::format::format_time;
use leptos::prelude::*;

#[component]
pub fn AccountPage() -> impl IntoView {
    let create = ServerAction::<CreateApiToken>::new();
    let revoke = ServerAction::<RevokeApiToken>::new();
    let tokens = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| api_tokens(),
    );
    view! {
        <h1>"Account"</h1>
        <p><a href="/account/password">"Change your password"</a></p>
        <section class="card">
            <h2>"API tokens"</h2>
            <p class="hint">
                "A token lets scripts and CI use the REST API ("
                <a href="/api/v1/openapi.json">"OpenAPI description"</a>
                ") and the " <code>"arbiter submit"</code> " / " <code>"wait"</code> " / "
                <code>"report"</code> " commands as you, with your role. Send it as "
                <code>"Authorization: Bearer arb_…"</code> ". Only a hash is kept: copy it now."
            </p>
            <ActionForm action=create>
                <label>"Name " <input name="name" required placeholder="nightly-ci"/></label>
                <label>
                    "Expires after (days, empty for never) "
                    <input name="days" inputmode="numeric" size="6"/>
                </label>
                <button type="submit">"Create token"</button>
            </ActionForm>
            <ActionError value=create.value()/>
            {move || {
                create
                    .value()
                    .get()
                    .and_then(Result::ok)
                    .map(|made| {
                        view! {
                            <div class="notice" role="status">
                                <p>
                                    "Token “" {made.name} "” — copy it now, it will not be shown again:"
                                </p>
                                <pre data-testid="new-token">{made.token}</pre>
                            </div>
                        }
                    })
            }}
            <ActionError value=revoke.value()/>
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match tokens.await {
                        Ok(tokens) if tokens.is_empty() => {
                            view! { <p>"No tokens yet."</p> }.into_any()
                        }
                        Ok(tokens) => view! { <TokenTable tokens revoke/> }.into_any(),
                        Err(error) => view! { <ErrorNote error/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn TokenTable(tokens: Vec<TokenView>, revoke: ServerAction<RevokeApiToken>) -> impl IntoView {
    let when = |ms: Option<i64>, none: &'static str| ms.map_or(none.to_string(), format_time);
    view! {
        <table data-testid="tokens">
            <thead>
                <tr>
                    <th>"Name"</th>
                    <th>"Owner"</th>
                    <th>"Starts with"</th>
                    <th>"Created"</th>
                    <th>"Last used"</th>
                    <th>"Expires"</th>
                    <th>"State"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>
                {tokens
                    .into_iter()
                    .map(|TokenView { token, state }| {
                        let live = state == "live";
                        let id = token.id;
                        view! {
                            <tr>
                                <td>{token.name}</td>
                                <td>{token.username}</td>
                                <td><code>{token.prefix} "…"</code></td>
                                <td>{format_time(token.created_at)}</td>
                                <td>{when(token.last_used_at, "never")}</td>
                                <td>{when(token.expires_at, "never")}</td>
                                <td>{state}</td>
                                <td>
                                    <Show when=move || live>
                                        <button on:click=move |_| {
                                            revoke.dispatch(RevokeApiToken { id });
                                        }>"Revoke"</button>
                                    </Show>
                                </td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}
