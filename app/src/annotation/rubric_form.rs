//! A rubric as a rater answers it: one block per dimension, the focused one marked, with the
//! guidelines beside the item. Digits pick a level of the focused dimension (see [`pick`]);
//! the annotate page's key map moves the focus and submits.

use arbiter_domain::annotation::rubric::{
    Dimension, DimensionAnswer, DimensionKind, Rubric, RubricAnswer,
};
use arbiter_domain::annotation::task::TaskRubric;
use leptos::prelude::*;

/// The answer a digit gives the dimension (`1`–`9`, then `0` for the tenth choice), given its
/// answer so far; `None` when the digit means nothing there. Binary: 1 pass, 2 fail. Ordinal:
/// the point. Categorical: the option (toggled in or out when several may be chosen).
pub(crate) fn pick(
    kind: &DimensionKind,
    digit: &str,
    current: Option<&DimensionAnswer>,
) -> Option<DimensionAnswer> {
    let index = match digit {
        "0" => 9,
        digit => digit.parse::<usize>().ok()?.checked_sub(1)?,
    };
    match kind {
        DimensionKind::Binary => match index {
            0 => Some(DimensionAnswer::Binary(true)),
            1 => Some(DimensionAnswer::Binary(false)),
            _ => None,
        },
        DimensionKind::Ordinal { scale } => {
            (index < scale.len()).then_some(DimensionAnswer::Number(index as f64 + 1.0))
        }
        DimensionKind::Categorical { options, multiple } => {
            let option = options.get(index)?.clone();
            if !multiple {
                return Some(DimensionAnswer::Texts(vec![option]));
            }
            let mut chosen = match current {
                Some(DimensionAnswer::Texts(chosen)) => chosen.clone(),
                _ => Vec::new(),
            };
            match chosen.iter().position(|have| *have == option) {
                Some(at) => {
                    chosen.remove(at);
                }
                None => chosen.push(option),
            }
            Some(DimensionAnswer::Texts(chosen))
        }
        DimensionKind::Numeric { .. } | DimensionKind::FreeText { .. } => None,
    }
}

/// Whether a dimension is answered in a text field (the focus moves into it).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub(crate) fn typed(kind: &DimensionKind) -> bool {
    matches!(
        kind,
        DimensionKind::Numeric { .. } | DimensionKind::FreeText { .. }
    )
}

/// Whether picking a level is the whole answer (the focus moves on by itself).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub(crate) fn one_pick(kind: &DimensionKind) -> bool {
    matches!(
        kind,
        DimensionKind::Binary
            | DimensionKind::Ordinal { .. }
            | DimensionKind::Categorical {
                multiple: false,
                ..
            }
    )
}

/// The guidelines beside the item, folded open.
#[component]
pub fn GuidelinesPanel(rubric: TaskRubric) -> impl IntoView {
    rubric.guidelines.map(|guidelines| {
        view! {
            <details class="guidelines" open data-testid="guidelines" data-version=guidelines.version.to_string()>
                <summary>"Guidelines (" {rubric.version.name.clone()} ", version " {guidelines.version} ")"</summary>
                <div class="rendered" inner_html=rubric.guidelines_html></div>
            </details>
        }
    })
}

/// Every dimension of the rubric, answered into `answers`; `focused` is the dimension digits
/// apply to.
#[component]
pub fn RubricForm(
    rubric: Rubric,
    answers: RwSignal<RubricAnswer>,
    focused: RwSignal<usize>,
) -> impl IntoView {
    rubric
        .dimensions
        .into_iter()
        .enumerate()
        .map(|(index, dimension)| view! { <DimensionBlock index dimension answers focused/> })
        .collect_view()
}

#[component]
fn DimensionBlock(
    index: usize,
    dimension: Dimension,
    answers: RwSignal<RubricAnswer>,
    focused: RwSignal<usize>,
) -> impl IntoView {
    // Plain clones in each closure: a stored value would be gone when the next item replaces
    // this one, while the answers signal it is read beside lives on with the page.
    let key = dimension.key.clone();
    let set = {
        let key = key.clone();
        move |value: Option<DimensionAnswer>| {
            focused.set(index);
            answers.update(|answers| match value {
                Some(value) => {
                    answers.insert(key.clone(), value);
                }
                None => {
                    answers.remove(&key);
                }
            });
        }
    };
    let choose = {
        let (key, kind, set) = (key.clone(), dimension.kind.clone(), set.clone());
        move |digit: &str| {
            let current = answers.with(|answers| answers.get(&key).cloned());
            if let Some(next) = pick(&kind, digit, current.as_ref()) {
                set(Some(next));
            }
        }
    };
    // One button per choice (binary, ordinal, categorical), pressed when chosen.
    let choices: Vec<(String, String, String)> = match &dimension.kind {
        DimensionKind::Binary => vec![
            ("1".into(), "Pass".into(), String::new()),
            ("2".into(), "Fail".into(), String::new()),
        ],
        DimensionKind::Ordinal { scale } => scale
            .iter()
            .enumerate()
            .map(|(at, anchor)| {
                (
                    digit_of(at),
                    anchor.label.clone(),
                    anchor.description.clone(),
                )
            })
            .collect(),
        DimensionKind::Categorical { options, .. } => options
            .iter()
            .enumerate()
            .map(|(at, option)| (digit_of(at), option.clone(), String::new()))
            .collect(),
        _ => Vec::new(),
    };
    let field = match dimension.kind.clone() {
        DimensionKind::Numeric { min, max } => Some(
            view! {
                <input type="number" class="dimension-field" min=min max=max step="any"
                    aria-label=dimension.question.clone()
                    on:focus=move |_| focused.set(index)
                    on:input=move |ev| {
                        let text = event_target_value(&ev);
                        set(text.trim().parse::<f64>().ok().map(DimensionAnswer::Number));
                    }/>
            }
            .into_any(),
        ),
        DimensionKind::FreeText { max_chars } => Some(
            view! {
                <textarea class="dimension-field" rows="2" maxlength=max_chars
                    aria-label=dimension.question.clone()
                    on:focus=move |_| focused.set(index)
                    on:input=move |ev| {
                        let text = event_target_value(&ev);
                        set((!text.is_empty()).then(|| DimensionAnswer::Texts(vec![text])));
                    }></textarea>
            }
            .into_any(),
        ),
        _ => None,
    };
    let level = dimension
        .kind
        .level()
        .map_or("text", |level| level.as_str());
    view! {
        <fieldset class=move || if focused.get() == index { "dimension focused" } else { "dimension" }
            data-testid=format!("dimension-{}", dimension.key)
            on:click=move |_| focused.set(index)>
            <legend>
                {index + 1} ". " {dimension.question.clone()}
                <span class="hint">" (" {level} {(!dimension.required).then_some(", optional")} ")"</span>
            </legend>
            <div class="row choices">
                {choices.into_iter().map(|(digit, label, description)| {
                    let pressed = {
                        let (digit, key, kind) = (digit.clone(), key.clone(), dimension.kind.clone());
                        move || answers.with(|answers| chosen(&kind, &digit, answers.get(&key)))
                    };
                    let (click, choose) = (digit.clone(), choose.clone());
                    view! {
                        <button type="button" class="choice" title=description.clone()
                            aria-pressed=move || pressed().to_string()
                            on:click=move |_| choose(&click)>
                            <kbd>{digit}</kbd> " " {label}
                        </button>
                    }
                }).collect_view()}
            </div>
            {field}
        </fieldset>
    }
}

/// The digit that picks the choice at `index` (0-based): 1–9, then 0.
fn digit_of(index: usize) -> String {
    ((index + 1) % 10).to_string()
}

/// Whether the choice `digit` is part of the answer so far.
fn chosen(kind: &DimensionKind, digit: &str, answer: Option<&DimensionAnswer>) -> bool {
    let Some(answer) = answer else {
        return false;
    };
    match (kind, answer) {
        (DimensionKind::Binary, DimensionAnswer::Binary(pass)) => (digit == "1") == *pass,
        (DimensionKind::Ordinal { .. }, DimensionAnswer::Number(point)) => {
            digit_of(*point as usize - 1) == digit
        }
        (DimensionKind::Categorical { options, .. }, DimensionAnswer::Texts(picked)) => options
            .iter()
            .enumerate()
            .any(|(at, option)| digit_of(at) == digit && picked.contains(option)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_domain::annotation::rubric::Anchor;

    #[test]
    fn digits_pick_levels_by_kind() {
        assert_eq!(
            pick(&DimensionKind::Binary, "2", None),
            Some(DimensionAnswer::Binary(false))
        );
        assert_eq!(pick(&DimensionKind::Binary, "3", None), None);
        let scale = (0..10)
            .map(|point| Anchor {
                label: point.to_string(),
                description: String::new(),
            })
            .collect();
        let ordinal = DimensionKind::Ordinal { scale };
        assert_eq!(
            pick(&ordinal, "0", None),
            Some(DimensionAnswer::Number(10.0))
        );
        assert_eq!(
            pick(&ordinal, "4", None),
            Some(DimensionAnswer::Number(4.0))
        );
        let many = DimensionKind::Categorical {
            options: vec!["a".into(), "b".into()],
            multiple: true,
        };
        let both = pick(&many, "2", Some(&DimensionAnswer::Texts(vec!["a".into()])));
        assert_eq!(
            both,
            Some(DimensionAnswer::Texts(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            pick(&many, "1", both.as_ref()),
            Some(DimensionAnswer::Texts(vec!["b".into()]))
        );
        assert!(chosen(&many, "2", both.as_ref()));
        assert_eq!(
            pick(&DimensionKind::Numeric { min: 0.0, max: 1.0 }, "1", None),
            None
        );
    }
}
