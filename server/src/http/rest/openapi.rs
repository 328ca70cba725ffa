//! The OpenAPI 3.1 description of the REST API, generated from the handlers' annotations and
//! the engine's types, so it cannot drift from what the server answers.

use super::{annotation, pay, preferences, resources, runs, ApiErrorBody};
use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Arbiter",
        description = "Run LLM evaluations at scale: datasets, checkpoints, evals, runs, reports and paired comparisons. \
Authenticate with a personal API token (made on the Account page or with `arbiter token create`): `Authorization: Bearer arb_…`. \
A token acts with its owner's role. Errors are JSON `{\"error\": \"…\"}` with a 4xx or 5xx status."
    ),
    paths(
        resources::me,
        resources::list_datasets,
        resources::get_dataset,
        resources::upload_dataset,
        resources::list_checkpoints,
        resources::register_checkpoint,
        resources::list_endpoints,
        resources::edit_endpoint,
        resources::list_suites,
        resources::create_suite,
        resources::delete_suite,
        resources::run_suite,
        resources::list_webhooks,
        resources::create_webhook,
        resources::delete_webhook,
        resources::list_deliveries,
        resources::list_evals,
        resources::get_eval,
        resources::define_eval,
        resources::preview_eval,
        runs::list_runs,
        runs::launch_run,
        runs::get_run,
        runs::run_events,
        resources::retract_checkpoint,
        resources::list_launches,
        resources::plan_serving,
        runs::run_report,
        runs::run_agreement,
        runs::change_run_state,
        runs::compare,
        preferences::send_pairs,
        preferences::preferences,
        pay::ledger,
        annotation::push_items,
        annotation::pushed_items,
    ),
    components(schemas(ApiErrorBody)),
    modifiers(&BearerToken),
    security(("token" = [])),
    tags(
        (name = "account", description = "Who the token acts for"),
        (name = "datasets", description = "Versioned datasets: each upload of new content is a revision"),
        (name = "checkpoints", description = "Models under evaluation, where they are served, and the suites each new one triggers"),
        (name = "evals", description = "Prompt, grader and generation settings over a dataset"),
        (name = "webhooks", description = "POSTs to your receivers when runs complete and alerts open or resolve, signed with HMAC-SHA256"),
        (name = "runs", description = "Frozen manifests run against a checkpoint, their reports and comparisons"),
        (name = "preferences", description = "Side-by-side preference: pairs of two checkpoints' answers sent to raters, and Bradley–Terry ratings from their choices"),
        (name = "pay", description = "Rater hours and pay: the ledger leads export for payroll"),
        (name = "annotation", description = "Items pushed from outside (production traces, other tools' outputs) into labelling queues, idempotent by content hash, and read back with their labels"),
    )
)]
pub struct ApiDoc;

struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("arb_ followed by 40 letters and digits")
                    .build(),
            ),
        );
    }
}

/// `GET /api/v1/openapi.json`: public, so that tools can read it before holding a token.
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
