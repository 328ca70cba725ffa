//! The login page. A plain HTML form posting to `/login` (handled by the server binary), so it
//! works before the wasm loads and the session cookie is set by a full page response.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.read().get("error");
    view! {
        <section class="card narrow">
            <h1>"Sign in to Arbiter"</h1>
            {move || error().map(|message| view! { <p class="error" role="alert">{message}</p> })}
            <form method="post" action="/login" class="stack">
                <label>
                    "Username" <input name="username" autocomplete="username" required/>
                </label>
                <label>
                    "Password"
                    <input type="password" name="password" autocomplete="current-password" required/>
                </label>
                <button type="submit">"Sign in"</button>
            </form>
        </section>
    }
}
