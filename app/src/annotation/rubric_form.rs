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
/// the point. Categorical: the option (toggled in or out when several may be chosen); options
/// past the tenth are picked by clicking.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub(crate) fn pick(
    kind: &DimensionKind,
    digit: &str,
    current: Option<&DimensionAnswer>,
) -> Option<DimensionAnswer> {
    let index = match digit {
        "0" => 9,
        digit => digit.parse::<usize>().ok()?.checked_sub(1)?,
    };
    pick_index(kind, index, current)
}

/// The answer choosing the `index`th choice (from 0) gives the dimension.
pub(crate) fn pick_index(
    kind: &DimensionKind,
    index: usize,
    current: Option<&DimensionAnswer>,
) -> Option<DimensionAnswer> {
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

/// Records a dimension's answer; no options left chosen is no answer (an optional dimension
/// may be left so; a required one asks again on submission).
pub(crate) fn record(answers: &mut RubricAnswer, key: &str, answer: Option<DimensionAnswer>) {
    match answer {
        Some(DimensionAnswer::Texts(chosen)) if chosen.is_empty() => {
            answers.remove(key);
        }
        Some(answer) => {
            answers.insert(key.to_string(), answer);
        }
        None => {
            answers.remove(key);
        }
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

/// A rubric label's answers, question by question (nothing for a pass/fail label).
#[component]
pub fn AnswersTable(answers: Vec<(String, String)>) -> impl IntoView {
    (!answers.is_empty()).then(|| {
        view! {
            <table class="answers" data-testid="label-answers">
                <tbody>
                    {answers.into_iter().map(|(question, answer)| view! {
                        <tr><th>{question}</th><td>{answer}</td></tr>
                    }).collect_view()}
                </tbody>
            </table>
        }
    })
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
            answers.update(|answers| record(answers, &key, value));
        }
    };
    let choose = {
        let (key, kind, set) = (key.clone(), dimension.kind.clone(), set.clone());
        move |choice: usize| {
            let current = answers.with(|answers| answers.get(&key).cloned());
            if let Some(next) = pick_index(&kind, choice, current.as_ref()) {
                set(Some(next));
            }
        }
    };
    // One button per choice (binary, ordinal, categorical), pressed when chosen.
    let choices: Vec<(String, String)> = match &dimension.kind {
        DimensionKind::Binary => vec![
            ("Pass".into(), String::new()),
            ("Fail".into(), String::new()),
        ],
        DimensionKind::Ordinal { scale } => scale
            .iter()
            .map(|anchor| (anchor.label.clone(), anchor.description.clone()))
            .collect(),
        DimensionKind::Categorical { options, .. } => options
            .iter()
            .map(|option| (option.clone(), String::new()))
            .collect(),
        _ => Vec::new(),
    };
    // A field starts from the answer already given (a reviewer corrects a rater's answers);
    // it is not bound to it, so typing `1.` is not rewritten to `1`.
    let given = answers.with_untracked(|answers| answers.get(&key).cloned());
    let field = match dimension.kind.clone() {
        DimensionKind::Numeric { min, max } => Some(
            view! {
                <input type="number" class="dimension-field" min=min max=max step="any"
                    value=match &given { Some(DimensionAnswer::Number(number)) => number.to_string(), _ => String::new() }
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
                    }>{match &given { Some(DimensionAnswer::Texts(texts)) => texts.concat(), _ => String::new() }}</textarea>
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
                {choices.into_iter().enumerate().map(|(choice, (label, description))| {
                    let pressed = {
                        let (key, kind) = (key.clone(), dimension.kind.clone());
                        move || answers.with(|answers| chosen(&kind, choice, answers.get(&key)))
                    };
                    let choose = choose.clone();
                    view! {
                        <button type="button" class="choice" title=description
                            aria-pressed=move || pressed().to_string()
                            on:click=move |_| choose(choice)>
                            {digit_of(choice).map(|digit| view! { <kbd>{digit}</kbd> " " })}
                            {label}
                        </button>
                    }
                }).collect_view()}
            </div>
            {field}
        </fieldset>
    }
}

/// The digit that picks the choice at `index` (from 0): 1–9, then 0; none past the tenth.
fn digit_of(index: usize) -> Option<String> {
    (index < 10).then(|| ((index + 1) % 10).to_string())
}

/// Whether the choice at `index` (from 0) is part of the answer so far.
fn chosen(kind: &DimensionKind, index: usize, answer: Option<&DimensionAnswer>) -> bool {
    let Some(answer) = answer else {
        return false;
    };
    match (kind, answer) {
        (DimensionKind::Binary, DimensionAnswer::Binary(pass)) => (index == 0) == *pass,
        (DimensionKind::Ordinal { .. }, DimensionAnswer::Number(point)) => {
            *point == index as f64 + 1.0
        }
        (DimensionKind::Categorical { options, .. }, DimensionAnswer::Texts(picked)) => options
            .get(index)
            .is_some_and(|option| picked.contains(option)),
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
        assert!(chosen(&many, 1, both.as_ref()));
        // The last option toggled out leaves no answer, not an empty one.
        let mut answers = RubricAnswer::new();
        let none_left = pick(&many, "1", Some(&DimensionAnswer::Texts(vec!["a".into()])));
        record(&mut answers, "many", none_left);
        assert!(answers.is_empty());
        // Options past the tenth have no digit but are picked by their place.
        let wide = DimensionKind::Categorical {
            options: (0..12).map(|option| option.to_string()).collect(),
            multiple: false,
        };
        assert_eq!(digit_of(10), None);
        assert_eq!(digit_of(9).as_deref(), Some("0"));
        let eleventh = DimensionAnswer::Texts(vec!["10".into()]);
        assert_eq!(pick_index(&wide, 10, None), Some(eleventh.clone()));
        assert!(chosen(&wide, 10, Some(&eleventh)));
        assert!(!chosen(&wide, 0, Some(&eleventh)));
        assert_eq!(
            pick(&DimensionKind::Numeric { min: 0.0, max: 1.0 }, "1", None),
            None
        );
    }
}
