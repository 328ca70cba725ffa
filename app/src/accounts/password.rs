//! The password page: a user chooses their own password (the current one required). Invited
//! raters land here at their first sign-in, since their first password was a lead's choice;
//! every other session of the user ends when it changes.

use crate::accounts::api::{current_user, ChangePassword};
use crate::components::ActionError;
use arbiter_domain::accounts::MIN_PASSWORD_LENGTH;
use leptos::prelude::*;

#[component]
pub fn PasswordPage() -> impl IntoView {
    let change = ServerAction::<ChangePassword>::new();
    let user = Resource::new(|| (), |_| current_user());
    let changed = move || change.value().get().is_some_and(|result| result.is_ok());
    view! {
        <section class="card narrow">
            <h1>"Change your password"</h1>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    let must = user.await.ok().flatten().is_some_and(|user| user.must_change_password);
                    must.then(|| view! {
                        <p class="notice" role="status" data-testid="must-change">
                            "Your first password was chosen by whoever invited you: choose your own before you go on."
                        </p>
                    })
                })}
            </Suspense>
            <Show
                when=changed
                fallback=move || view! {
                    <ActionForm action=change attr:class="stack">
                        <label>
                            "Current password"
                            <input type="password" name="current" autocomplete="current-password" required/>
                        </label>
                        <label>
                            {format!("New password (at least {MIN_PASSWORD_LENGTH} characters)")}
                            <input type="password" name="new" autocomplete="new-password"
                                minlength=MIN_PASSWORD_LENGTH.to_string() required/>
                        </label>
                        <label>
                            "New password again"
                            <input type="password" name="confirmation" autocomplete="new-password" required/>
                        </label>
                        <button type="submit">"Change password"</button>
                    </ActionForm>
                }
            >
                <p class="notice" role="status" data-testid="password-changed">
                    "Your password is changed; your other sessions are signed out. "
                    <a href="/">"Go on"</a>
                </p>
            </Show>
            <ActionError value=change.value()/>
        </section>
    }
}
