//! Small pieces shared by several pages: error notes, item images, alert lists and keyboard
//! shortcuts. Nothing here knows an area of the app.

use leptos::prelude::*;

/// The message inside a server function error, without the framework's prefix.
pub fn error_text(err: &ServerFnError) -> String {
    match err {
        ServerFnError::ServerError(message) => message.clone(),
        other => other.to_string(),
    }
}

#[component]
pub fn ErrorNote(error: ServerFnError) -> impl IntoView {
    view! { <p class="error" role="alert">{error_text(&error)}</p> }
}

/// Shows an action's last error, if its last call failed.
#[component]
pub fn ActionError<T>(
    #[prop(into)] value: Signal<Option<Result<T, ServerFnError>>>,
) -> impl IntoView
where
    T: Clone + Send + Sync + 'static,
{
    move || {
        value.with(|value| match value {
            Some(Err(err)) => Some(view! { <p class="error" role="alert">{error_text(err)}</p> }),
            _ => None,
        })
    }
}

/// An item's texts as they are, for a page that has nothing rendered for them.
pub fn plain_item(
    input: &str,
    target: &str,
    output: &str,
) -> arbiter_domain::annotation::shown::ShownItem {
    use arbiter_domain::annotation::shown::{ShownItem, ShownText};
    let plain = |raw: &str| ShownText {
        raw: raw.to_string(),
        html: String::new(),
    };
    ShownItem {
        input: plain(input),
        conversation: Vec::new(),
        target: plain(target),
        output: plain(output),
    }
}

/// The images an item was sent with. Only data URLs of image types reach here (items are
/// checked when read), so the browser fetches nothing.
#[component]
pub fn ItemImages(images: Vec<String>) -> impl IntoView {
    (!images.is_empty()).then(|| {
        view! {
            <div class="item-images" data-testid="item-images">
                {images.into_iter().enumerate().map(|(index, src)| view! {
                    <img src=src alt=format!("image {} of the item", index + 1)/>
                }).collect_view()}
            </div>
        }
    })
}

/// Open alerts, then the recently resolved ones folded away (queue and system pages).
#[component]
pub fn AlertList(alerts: Vec<arbiter_domain::health::Alert>) -> impl IntoView {
    use crate::format::format_time;
    let (open, resolved): (Vec<_>, Vec<_>) = alerts
        .into_iter()
        .partition(|alert| alert.resolved_at.is_none());
    view! {
        {if open.is_empty() {
            view! { <p class="notice">"No open alerts."</p> }.into_any()
        } else {
            view! {
                <ul>
                    {open.into_iter().map(|alert| view! {
                        <li data-testid="open-alert">
                            <strong class="error">{alert.title()} ": " {alert.subject}</strong> " — " {alert.message}
                            <span class="hint">" since " {format_time(alert.created_at)}
                                {alert.emailed_at.map(|at| format!(" · emailed {}", format_time(at)))}</span>
                        </li>
                    }).collect_view()}
                </ul>
            }.into_any()
        }}
        {(!resolved.is_empty()).then(|| view! {
            <details>
                <summary>"Resolved recently"</summary>
                <ul>
                    {resolved.into_iter().map(|alert| view! {
                        <li>{alert.title()} ": " {alert.subject} " — " {alert.message}
                            <span class="hint">" resolved " {alert.resolved_at.map(format_time)}</span></li>
                    }).collect_view()}
                </ul>
            </details>
        })}
    }
}

/// Keyboard shortcuts for a page: `on_key` gets each key pressed outside text fields (and
/// without Ctrl, Alt or Meta, which belong to the browser). Escape in a text field leaves it,
/// so the shortcuts work again. Browser only; removed when the page goes away.
#[cfg(feature = "hydrate")]
pub fn keyboard_shortcuts(on_key: impl Fn(&str, &leptos::ev::KeyboardEvent) + 'static) {
    use leptos::wasm_bindgen::JsCast;
    let handle = window_event_listener(leptos::ev::keydown, move |event| {
        if event.ctrl_key() || event.meta_key() || event.alt_key() {
            return;
        }
        let field = event
            .target()
            .and_then(|target| target.dyn_into::<leptos::web_sys::HtmlElement>().ok())
            .filter(|element| {
                matches!(element.tag_name().as_str(), "TEXTAREA" | "INPUT" | "SELECT")
            });
        match field {
            Some(field) if event.key() == "Escape" => {
                let _ = field.blur();
            }
            Some(_) => {}
            None => on_key(&event.key(), &event),
        }
    });
    on_cleanup(move || handle.remove());
}
