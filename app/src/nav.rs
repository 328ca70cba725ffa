//! The top bar: links for the signed-in user's role and a logout button.

use crate::accounts::api::current_user;
use arbiter_domain::accounts::Permission;
use leptos::prelude::*;

/// Top bar: links for the user's role and a logout button.
#[component]
pub fn Nav() -> impl IntoView {
    let user = Resource::new(|| (), |_| current_user());
    view! {
        <header class="topbar">
            <a class="brand" href="/">"Arbiter"</a>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    match user.await {
                        Ok(Some(user)) => {
                            let researcher = user.role.can(Permission::ViewResults);
                            let annotator = user.role.can(Permission::Annotate);
                            let reviewer = user.role.can(Permission::Review);
                            let lead = user.role.can(Permission::ManageUsers);
                            view! {
                                <nav>
                                    <Show when=move || researcher>
                                        <a href="/datasets">"Datasets"</a>
                                        <a href="/checkpoints">"Checkpoints"</a>
                                        <a href="/evals">"Evals"</a>
                                        <a href="/judges">"Judges"</a>
                                        <a href="/rubrics">"Rubrics"</a>
                                        <a href="/runs">"Runs"</a>
                                        <a href="/trends">"Trends"</a>
                                        <a href="/preferences">"Preferences"</a>
                                        <a href="/system">"System"</a>
                                    </Show>
                                    <Show when=move || annotator>
                                        <a href="/annotate">"Annotate"</a>
                                        <a href="/annotate/mine">"My labels"</a>
                                    </Show>
                                    <Show when=move || reviewer>
                                        <a href="/review">"Review"</a>
                                    </Show>
                                    <Show when=move || lead>
                                        <a href="/queue">"Queue"</a>
                                        <a href="/raters">"Raters"</a>
                                        <a href="/pay">"Pay"</a>
                                    </Show>

                                </nav>
                                <span class="whoami">
                                    <a href="/account" data-testid="whoami">{user.username.clone()}</a>
                                    " (" {user.role.as_str()} ")"
                                </span>
                                <form method="post" action="/logout" class="logout">
                                    <button type="submit">"Log out"</button>
                                </form>
                            }
                                .into_any()
                        }
                        _ => view! { <a href="/login">"Log in"</a> }.into_any(),
                    }
                })}
            </Suspense>
        </header>
    }
}
