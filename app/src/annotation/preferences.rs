//! Side-by-side preference: the form that sends pairs from the Compare page, the server
//! functions behind it and behind a rater's answer, and the Preferences page (Bradley–Terry
//! ratings, win rates, position bias and agreement per eval, and the requests sent).

use crate::annotation::api::TrainingFeedbackView;
use crate::components::{ActionError, ErrorNote};
use crate::format::format_time;
use arbiter_domain::annotation::preference::{PairRequestSummary, PositionBias, PreferenceReport};
use arbiter_domain::annotation::task::ClaimHandle;
use arbiter_domain::grading::pairwise::PairwiseCalibration;
use arbiter_domain::ids::RunId;
use arbiter_domain::stats::Interval;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::guard::{require, service_error},
    arbiter_domain::accounts::Permission,
};

/// One eval's preference report with the names its indices stand for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalPreferencesView {
    pub eval_name: String,
    pub checkpoints: Vec<String>,
    pub raters: Vec<(u64, String)>,
    pub report: PreferenceReport,
    /// Krippendorff's alpha (nominal) between raters of the same pair, or why there is none.
    pub agreement: String,
    /// Per dimension of the rubrics pairs were compared on: its key, report and agreement.
    pub dimensions: Vec<(String, PreferenceReport, String)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreferencesPageData {
    pub requests: Vec<PairRequestSummary>,
    pub evals: Vec<EvalPreferencesView>,
    /// Each pairwise judge's calibration against the raters' decided pairs, by grader id.
    pub calibrations: Vec<(String, PairwiseCalibration)>,
}

/// The pairwise judges a request may ask first: (id, grader id).
#[server(endpoint = "pairwise_judges")]
pub async fn pairwise_judges() -> Result<Vec<(i64, String)>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    Ok(state
        .store
        .list_judges()
        .await
        .map_err(crate::guard::store_error)?
        .into_iter()
        .filter(|judge| judge.pairwise)
        .map(|judge| (judge.id, judge.grader_id()))
        .collect())
}

/// Sends pairs of run A's and run B's answers to raters (researchers: whoever launches runs).
#[server(endpoint = "send_pairs")]
pub async fn send_pairs(
    run_a: RunId,
    run_b: RunId,
    selection: String,
    pairs: String,
    raters: String,
    #[server(default)] note: String,
    #[server(default)] rubric: String,
    #[server(default)] judge: String,
    #[server(default)] judge_threshold: String,
    #[server(default)] audit_rate: String,
) -> Result<PairRequestSummary, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let form = arbiter_engine::preferences::PairRequestForm {
        run_a,
        run_b,
        selection,
        pairs,
        raters,
        note,
        rubric,
        judge,
        judge_threshold,
        audit_rate,
    };
    arbiter_engine::preferences::send_pairs(state.store.as_ref(), &form, &user)
        .await
        .map_err(service_error)
}

/// A rater's answer on the pair they hold: `a`, `b`, `tie` or `both_bad`.
#[server(endpoint = "submit_preference")]
pub async fn submit_preference(
    handle: ClaimHandle,
    choice: String,
    #[server(default)] dimensions: String,
    #[server(default)] rationale: String,
) -> Result<Option<TrainingFeedbackView>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    let feedback = arbiter_engine::preferences::submit_preference(
        state.store.as_ref(),
        &handle,
        user.id,
        &choice,
        &dimensions,
        &rationale,
    )
    .await
    .map_err(service_error)?;
    Ok(feedback.map(crate::annotation::api::training_view))
}

#[server(endpoint = "preferences_page")]
pub async fn preferences_page() -> Result<PreferencesPageData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    let requests = store
        .pair_requests(100)
        .await
        .map_err(crate::guard::store_error)?;
    let evals = arbiter_engine::preferences::preference_reports(store, None)
        .await
        .map_err(service_error)?;
    let calibrations = arbiter_engine::pair_judging::pairwise_calibrations(store)
        .await
        .map_err(service_error)?;
    Ok(PreferencesPageData {
        requests,
        calibrations,
        evals: evals
            .into_iter()
            .map(|eval| EvalPreferencesView {
                agreement: agreement_text(&eval.agreement),
                dimensions: eval
                    .dimensions
                    .into_iter()
                    .map(|dimension| {
                        let agreement = agreement_text(&dimension.agreement);
                        (dimension.key, dimension.report, agreement)
                    })
                    .collect(),
                eval_name: eval.eval_name,
                checkpoints: eval.checkpoints,
                raters: eval.raters,
                report: eval.report,
            })
            .collect(),
    })
}

#[cfg(feature = "ssr")]
fn agreement_text(agreement: &arbiter_domain::annotation::agreement::Agreement) -> String {
    crate::annotation::api::statistic_text(&crate::annotation::api::statistic_view(agreement))
}

/// The Compare page's form: pairs of the baseline's and this candidate's answers, to raters.
#[component]
pub fn SendPairsForm(baseline: RunId, candidate: RunId) -> impl IntoView {
    let send = ServerAction::<SendPairs>::new();
    let judges = Resource::new(|| (), |_| pairwise_judges());
    view! {
        <details class="send-pairs" data-testid=format!("send-pairs-{candidate}")>
            <summary>"Send pairs to raters"</summary>
            <p class="hint">
                "Raters see the input and the two answers as A and B, sides drawn at random per pair, and say which is better. "
                "Results are on the " <a href="/preferences">"Preferences"</a> " page."
            </p>
            <ActionForm action=send attr:class="row">
                <input type="hidden" name="run_a" value=baseline.to_string()/>
                <input type="hidden" name="run_b" value=candidate.to_string()/>
                <label>"Which cases"
                    <select name="selection">
                        <option value="differ">"verdicts differ"</option>
                        <option value="unsure">"a judge was unsure"</option>
                        <option value="random">"a random sample"</option>
                    </select>
                </label>
                <label>"Pairs" <input name="pairs" value="50" size="5"/></label>
                <label>"Raters per pair" <input name="raters" value="1" size="2"/></label>
                <label>"Note" <input name="note" maxlength="1000"/></label>
                <label title="Raters also say which output is better on each dimension of this rubric (its newest version)">
                    "Per dimension of rubric (optional)" <input name="rubric" size="12" placeholder="rubric name"/>
                </label>
                <Transition fallback=|| ()>
                    {move || Suspend::new(async move {
                        let judges = judges.await.unwrap_or_default();
                        (!judges.is_empty()).then(|| view! {
                            <label title="Asked in both orders first: a pair it decides confidently needs no rater">
                                "Pairwise judge first"
                                <select name="judge">
                                    <option value="">"none: raters only"</option>
                                    {judges.into_iter().map(|(id, name)| view! { <option value=id.to_string()>{name}</option> }).collect_view()}
                                </select>
                            </label>
                            <label>"decides from confidence" <input name="judge_threshold" value="0.8" size="4"/></label>
                            <label title="Share of the pairs the judge decides that raters label anyway, to calibrate it">
                                "audit share" <input name="audit_rate" value="0.1" size="4"/>
                            </label>
                        })
                    })}
                </Transition>
                <button type="submit">"Send pairs"</button>
            </ActionForm>
            <ActionError value=send.value()/>
            {move || send.value().get().and_then(Result::ok).map(|sent| view! {
                <p class="notice" role="status" data-testid="pairs-sent">
                    "Sent " {sent.pairs} " pairs (request " {sent.id} ")."
                </p>
            })}
        </details>
    }
}

#[component]
pub fn PreferencesPage() -> impl IntoView {
    let page = Resource::new(|| (), |_| preferences_page());
    view! {
        <h1>"Preferences"</h1>
        <p class="hint">
            "Raters' side-by-side choices between checkpoints, sent from the Compare page. Ratings are Bradley–Terry strengths on "
            "the Elo scale (400 points is 10 to 1 odds; ties count half), with 95% bootstrap intervals over pairs. "
            "Sides are drawn at random, so a rater without position bias picks the left side (A) about half the time."
        </p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(data) => view! {
                        {if data.evals.is_empty() {
                            view! { <p class="notice" data-testid="no-preferences">"No pair has a label yet."</p> }.into_any()
                        } else {
                            data.evals.into_iter().map(|eval| view! { <EvalPreferencesCard eval/> }).collect_view().into_any()
                        }}
                        {(!data.calibrations.is_empty()).then(|| view! { <PairwiseCalibrations calibrations=data.calibrations/> })}
                        <RequestsTable requests=data.requests/>
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

fn interval_text(interval: Option<Interval>, scale: f64, decimals: usize) -> String {
    interval
        .map(|i| {
            format!(
                "{:.*} – {:.*}",
                decimals,
                i.lower * scale,
                decimals,
                i.upper * scale
            )
        })
        .unwrap_or_else(|| "—".to_string())
}

fn share(rate: Option<f64>) -> String {
    rate.map(|rate| format!("{:.1}%", rate * 100.0))
        .unwrap_or_else(|| "—".to_string())
}

#[component]
fn EvalPreferencesCard(eval: EvalPreferencesView) -> impl IntoView {
    let EvalPreferencesView {
        eval_name,
        checkpoints,
        raters,
        report,
        agreement,
        dimensions,
    } = eval;
    let names = checkpoints.clone();
    let name = move |index: usize| checkpoints.get(index).cloned().unwrap_or_default();
    let rater_name = move |bias: &PositionBias| match bias.rater {
        Some(id) => raters
            .iter()
            .find(|(known, _)| *known == id)
            .map(|(_, name)| name.clone())
            .unwrap_or_default(),
        None => "everyone".to_string(),
    };
    let overall = report.position_bias.clone();
    view! {
        <section class="card" data-testid="preference-report">
            <h2>{eval_name}</h2>
            <p>{report.pairs} " pairs, " {report.labels} " labels; agreement between raters of a pair: " {agreement} "."</p>
            <h3>"Bradley–Terry ratings"</h3>
            <table data-testid="ratings">
                <thead><tr><th>"Checkpoint"</th><th>"Rating"</th><th>"95% interval"</th><th>"Labels"</th></tr></thead>
                <tbody>
                    {report.ratings.iter().map(|rating| view! {
                        <tr data-testid="rating-row">
                            <td>{name(rating.contestant)}</td>
                            <td><strong>{format!("{:.0}", rating.rating)}</strong></td>
                            <td>{interval_text(rating.interval, 1.0, 0)}</td>
                            <td>{rating.labels}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            <h3>"Win rates"</h3>
            <table data-testid="win-rates">
                <thead><tr>
                    <th>"Checkpoint"</th><th>"against"</th><th>"wins"</th><th>"losses"</th><th>"ties"</th><th>"both bad"</th>
                    <th>"win rate (decisive)"</th><th>"95% interval"</th>
                </tr></thead>
                <tbody>
                    {report.win_rates.iter().map(|rate| view! {
                        <tr>
                            <td>{name(rate.first)}</td><td>{name(rate.second)}</td>
                            <td>{rate.first_wins}</td><td>{rate.second_wins}</td><td>{rate.ties}</td><td>{rate.both_bad}</td>
                            <td><strong>{share(rate.rate)}</strong></td>
                            <td>{interval_text(rate.interval, 100.0, 1)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            <h3>"Position bias"</h3>
            <table data-testid="position-bias">
                <thead><tr><th>"Rater"</th><th>"left (A) wins"</th><th>"decisive labels"</th><th>"left share"</th><th>"95% interval"</th></tr></thead>
                <tbody>
                    {std::iter::once(overall).chain(report.position_bias_by_rater.iter().cloned()).map(|bias| view! {
                        <tr>
                            <td>{rater_name(&bias)}</td>
                            <td>{bias.left_wins}</td><td>{bias.decisive}</td>
                            <td>{share(bias.rate)}</td>
                            <td>{interval_text(bias.interval, 100.0, 1)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            {(!dimensions.is_empty()).then(|| view! {
                <h3>"Per dimension"</h3>
                <table data-testid="dimension-ratings">
                    <thead><tr><th>"Dimension"</th><th>"Checkpoint"</th><th>"Rating"</th><th>"95% interval"</th><th>"Labels"</th><th>"Agreement"</th></tr></thead>
                    <tbody>
                        {dimensions.into_iter().flat_map(|(key, report, agreement)| {
                            let names = names.clone();
                            // A checkpoint no pair on this dimension showed has only the anchor.
                            report.ratings.into_iter().filter(|rating| rating.labels > 0).map(move |rating| view! {
                                <tr data-testid="dimension-rating-row" data-key=key.clone()>
                                    <td>{key.clone()}</td>
                                    <td>{names.get(rating.contestant).cloned().unwrap_or_default()}</td>
                                    <td><strong>{format!("{:.0}", rating.rating)}</strong></td>
                                    <td>{interval_text(rating.interval, 1.0, 0)}</td>
                                    <td>{rating.labels}</td>
                                    <td>{agreement.clone()}</td>
                                </tr>
                            }).collect::<Vec<_>>()
                        }).collect_view()}
                    </tbody>
                </table>
            })}
            <p class="hint">"Intervals from " {report.resamples} " bootstrap resamples of pairs."</p>
        </section>
    }
}

/// How each pairwise judge compares with the raters' decided pairs.
#[component]
fn PairwiseCalibrations(calibrations: Vec<(String, PairwiseCalibration)>) -> impl IntoView {
    view! {
        <section class="card" data-testid="pairwise-calibration">
            <h2>"Pairwise judges against raters"</h2>
            <p class="hint">
                "Each judge was asked every pair in both orders. Agreement and Cohen's kappa are over pairs raters decided "
                "(both bad counts as a tie); consistency is the share of judged pairs whose two orders named the same answer."
            </p>
            <table>
                <thead><tr>
                    <th>"Judge"</th><th>"judged"</th><th>"orders agree"</th><th>"decided by raters"</th>
                    <th>"agreement"</th><th>"kappa"</th><th>"confidence → agreement"</th>
                </tr></thead>
                <tbody>
                    {calibrations.into_iter().map(|(name, calibration)| view! {
                        <tr data-testid="pairwise-calibration-row">
                            <td>{name}</td>
                            <td>{calibration.judged}</td>
                            <td>{share(calibration.consistency)}</td>
                            <td>{calibration.pairs}</td>
                            <td><strong>{share(calibration.agreement)}</strong></td>
                            <td>{match (calibration.kappa, &calibration.kappa_undefined) {
                                (Some(kappa), _) => format!("{kappa:.3}"),
                                (None, why) => why.clone().unwrap_or_else(|| "undefined".into()),
                            }}</td>
                            <td>{calibration.reliability.iter().filter(|bin| bin.count > 0).map(|bin| format!(
                                "{:.2}–{:.2}: {} pairs, {} · ", bin.lower, bin.upper, bin.count, share(bin.agreement)
                            )).collect::<String>()}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

#[component]
fn RequestsTable(requests: Vec<PairRequestSummary>) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Pairs sent"</h2>
            {if requests.is_empty() {
                view! { <p class="hint">"None yet: send pairs from the Compare page."</p> }.into_any()
            } else {
                view! {
                    <table data-testid="pair-requests">
                        <thead><tr>
                            <th>"#"</th><th>"Eval"</th><th>"A"</th><th>"B"</th><th>"Cases"</th><th>"Pairs"</th>
                            <th>"Raters each"</th><th>"Done"</th><th>"Labels"</th><th>"Per dimension of"</th><th>"Judge first"</th><th>"By"</th><th>"When"</th><th>"Note"</th>
                        </tr></thead>
                        <tbody>
                            {requests.into_iter().map(|request| view! {
                                <tr>
                                    <td>{request.id}</td>
                                    <td>{request.eval_name}</td>
                                    <td><a href=format!("/runs/{}", request.run_a)>{request.checkpoint_a}</a></td>
                                    <td><a href=format!("/runs/{}", request.run_b)>{request.checkpoint_b}</a></td>
                                    <td>{request.selection}</td>
                                    <td>{request.pairs}</td>
                                    <td>{request.labels_needed}</td>
                                    <td>{request.pairs_done}</td>
                                    <td>{request.labels}</td>
                                    <td>{request.rubric.unwrap_or_default()}</td>
                                    <td>{request.judge.map(|judge| format!("{judge}: decided {} alone", request.judge_decided))}</td>
                                    <td>{request.requested_by}</td>
                                    <td>{format_time(request.created_at)}</td>
                                    <td>{request.note}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}
