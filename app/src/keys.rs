//! Key maps: one table per page says which keys do what. The page's key handler looks keys up
//! in it, and the legend under the heading and the `?` cheat sheet are drawn from it, so what
//! the page says a key does is what the key does.

use leptos::prelude::*;

/// Keys and what they do on a page.
pub struct KeyBinding<A: 'static> {
    /// As `KeyboardEvent.key` names them (`"1"`, `"p"`, `"?"`, `"ArrowDown"`).
    pub keys: &'static [&'static str],
    // Read by the key handler, which only the browser build has.
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    pub action: A,
    /// In a few words, for the legend.
    pub does: &'static str,
    /// Shown in the one-line legend as well as on the cheat sheet.
    pub in_legend: bool,
}

pub struct KeyMap<A: 'static>(pub &'static [KeyBinding<A>]);

impl<A: Copy> KeyMap<A> {
    /// What `key` does here, if anything.
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    pub fn action(&self, key: &str) -> Option<A> {
        self.0
            .iter()
            .find(|binding| binding.keys.contains(&key))
            .map(|binding| binding.action)
    }

    /// Every binding as (keys, what they do), for the cheat sheet; `short` keeps only the
    /// legend's.
    pub fn legend(&self, short: bool) -> Vec<(&'static [&'static str], &'static str)> {
        self.0
            .iter()
            .filter(|binding| binding.in_legend || !short)
            .map(|binding| (binding.keys, binding.does))
            .collect()
    }

    /// Keys bound twice (a map with any is a mistake: only the first binding would fire).
    #[cfg(test)]
    pub fn clashes(&self) -> Vec<&'static str> {
        let mut seen = Vec::new();
        let mut clashes = Vec::new();
        for key in self.0.iter().flat_map(|binding| binding.keys.iter()) {
            if seen.contains(key) {
                clashes.push(*key);
            }
            seen.push(*key);
        }
        clashes
    }
}

/// How a key is printed: arrows and named keys as symbols, the rest as they are.
fn key_label(key: &str) -> &str {
    match key {
        "ArrowUp" => "↑",
        "ArrowDown" => "↓",
        "ArrowLeft" => "←",
        "ArrowRight" => "→",
        "Escape" => "Esc",
        other => other,
    }
}

fn keys_view(keys: &'static [&'static str]) -> impl IntoView {
    keys.iter()
        .enumerate()
        .map(|(index, key)| {
            view! { {(index > 0).then_some("/")}<kbd>{key_label(key)}</kbd> }
        })
        .collect_view()
}

/// The one-line legend under a page's heading.
#[component]
pub fn KeyLegend(legend: Vec<(&'static [&'static str], &'static str)>) -> impl IntoView {
    let count = legend.len();
    view! {
        <p class="shortcuts" data-testid="key-legend">
            "Shortcuts: "
            {legend.into_iter().enumerate().map(|(index, (keys, does))| view! {
                {keys_view(keys)} " " {does} {(index + 1 < count).then_some(" · ")}
            }).collect_view()}
        </p>
    }
}

/// Every key of the page in a table, shown while `open` (the `?` key toggles it).
#[component]
pub fn CheatSheet(
    legend: Vec<(&'static [&'static str], &'static str)>,
    open: RwSignal<bool>,
) -> impl IntoView {
    view! {
        <Show when=move || open.get()>
            <section class="card cheat-sheet" role="dialog" aria-label="Keyboard shortcuts" data-testid="cheat-sheet">
                <h2>"Keyboard shortcuts"</h2>
                <table>
                    <tbody>
                        {legend.iter().map(|(keys, does)| view! {
                            <tr><td>{keys_view(keys)}</td><td>{*does}</td></tr>
                        }).collect_view()}
                    </tbody>
                </table>
                <button class="secondary" on:click=move |_| open.set(false)>"Close " <kbd>"?"</kbd></button>
            </section>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Act {
        Yes,
        No,
    }

    #[test]
    fn keys_find_their_action_and_clashes_are_found() {
        static MAP: KeyMap<Act> = KeyMap(&[
            KeyBinding {
                keys: &["1", "y"],
                action: Act::Yes,
                does: "yes",
                in_legend: true,
            },
            KeyBinding {
                keys: &["2", "y"],
                action: Act::No,
                does: "no",
                in_legend: false,
            },
        ]);
        assert_eq!(MAP.action("1"), Some(Act::Yes));
        assert_eq!(MAP.action("2"), Some(Act::No));
        assert_eq!(MAP.action("3"), None);
        assert_eq!(MAP.clashes(), vec!["y"]);
        assert_eq!(MAP.legend(true).len(), 1);
        assert_eq!(MAP.legend(false).len(), 2);
    }
}
