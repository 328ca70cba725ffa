//! Before the fix any researcher could run another team's suite on demand (charged to that
//! team), delete any suite, pause or cancel any run, reprice any checkpoint, and change a
//! shared endpoint's `max_in_flight` by registering one more checkpoint on its URL. Now a
//! change belongs to the owner's team (an endpoint's limit: to its owner), leads and admins
//! override, and reading stays open to every researcher.

use arbiter_domain::accounts::Role;
use arbiter_domain::run::{Priority, RunStatus};
use arbiter_engine::catalog::{self, CheckpointForm};
use arbiter_engine::error::ServiceError;
use arbiter_engine::runs;
use arbiter_engine::suites::{self, SuiteForm};
use arbiter_store::Store;
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(
    only_the_owning_team_changes_suites_runs_and_checkpoints,
    only_an_endpoints_owner_or_a_lead_changes_its_limit
);

fn forbidden<T: std::fmt::Debug>(result: Result<T, ServiceError>, naming: &str) {
    match result {
        Err(ServiceError::Forbidden(message)) => {
            assert!(message.contains(naming), "{message}")
        }
        other => panic!("expected 403 naming `{naming}`, got {other:?}"),
    }
}

async fn only_the_owning_team_changes_suites_runs_and_checkpoints(store: Arc<dyn Store>) {
    let store = &*store;
    // The fixture's run is charged to team `default`; its checkpoint is registered by nobody.
    let run_id = launch_one_run(store, FIVE_CASES.as_bytes(), 1).await;
    let ours = team_member(store, "otto", Role::Researcher, "default").await;
    let theirs = team_member(store, "vera", Role::Researcher, "vision").await;
    let lead = team_member(store, "lea", Role::Lead, "elsewhere").await;

    // Runs: another team's researcher can neither pause nor cancel; the run stays as it was.
    for action in ["pause", "cancel"] {
        forbidden(
            runs::change_run_state(store, &theirs, run_id, action).await,
            "team `default`",
        );
    }
    assert_ne!(progress(store, run_id).await.status, RunStatus::Paused);
    runs::change_run_state(store, &ours, run_id, "pause")
        .await
        .unwrap();
    runs::change_run_state(store, &lead, run_id, "resume")
        .await
        .unwrap();
    // A cancelled run is not resumed by another team relaunching its manifest: the launch is
    // refused and the run stays cancelled; its own team's relaunch resumes it.
    runs::change_run_state(store, &ours, run_id, "cancel")
        .await
        .unwrap();
    let manifest = store.run_manifest(run_id).await.unwrap().unwrap();
    let relaunch = |team: &'static str| {
        runs::launch_run(
            store,
            manifest.eval_id,
            manifest.checkpoint_id,
            arbiter_domain::run::Priority::Promotion,
            team,
            None,
        )
    };
    forbidden(relaunch("vision").await, "cancelled by team `default`");
    assert_eq!(progress(store, run_id).await.status, RunStatus::Cancelled);
    assert_eq!(relaunch("default").await.unwrap().run_id, run_id);
    assert_ne!(progress(store, run_id).await.status, RunStatus::Cancelled);
    // Triage policies: frozen into every later launch of the eval, so they belong to the
    // team of whoever defined it (the fixture's eval: the operator, so leads and admins).
    let eval_id = manifest.eval_id;
    forbidden(
        arbiter_engine::grading::check_eval_owner(store, &ours, eval_id).await,
        "defined by the operator",
    );
    arbiter_engine::grading::check_eval_owner(store, &lead, eval_id)
        .await
        .unwrap();
    let revision = store
        .get_dataset(manifest.dataset_id)
        .await
        .unwrap()
        .unwrap()
        .latest_revision
        .unwrap();
    let our_eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("ours", revision.dataset_id, 1),
        Some(ours.id),
    )
    .await
    .unwrap();
    forbidden(
        arbiter_engine::grading::check_eval_owner(store, &theirs, our_eval).await,
        "team `default`",
    );
    arbiter_engine::grading::check_eval_owner(store, &ours, our_eval)
        .await
        .unwrap();
    // Unknown runs and actions are told apart from refusals.
    assert!(matches!(
        runs::change_run_state(store, &ours, arbiter_domain::ids::RunId(999_999), "pause").await,
        Err(ServiceError::NotFound(_))
    ));
    assert!(matches!(
        runs::change_run_state(store, &theirs, run_id, "explode").await,
        Err(ServiceError::Invalid(_))
    ));

    // Checkpoints: the researcher's own is repriced by their team; one registered by the
    // operator (no registrant) only by leads and admins.
    let own_checkpoint =
        catalog::register_simple_checkpoint(store, "otto-step-1", ENDPOINT, "m", Some(ours.id))
            .await
            .unwrap();
    forbidden(
        catalog::set_checkpoint_prices(store, &theirs, own_checkpoint, "5", "5").await,
        "team `default`",
    );
    let operators = store.list_checkpoints().await.unwrap();
    let operators = operators
        .iter()
        .find(|checkpoint| checkpoint.name == "base")
        .unwrap();
    assert_eq!(operators.owner_team, None);
    forbidden(
        catalog::set_checkpoint_prices(store, &ours, operators.id, "5", "5").await,
        "the operator",
    );
    catalog::set_checkpoint_prices(store, &ours, own_checkpoint, "1", "2")
        .await
        .unwrap();
    catalog::set_checkpoint_prices(store, &lead, operators.id, "3", "4")
        .await
        .unwrap();
    let prices: Vec<(String, f64)> = store
        .list_checkpoints()
        .await
        .unwrap()
        .into_iter()
        .map(|checkpoint| (checkpoint.name, checkpoint.prices.input_usd_per_mtok))
        .collect();
    assert_eq!(
        prices,
        vec![("base".to_string(), 3.0), ("otto-step-1".to_string(), 1.0)]
    );

    // A smoke suite of team `vision` on its training run: registering a checkpoint of that run
    // starts it when `vision` (or the operator's announcement) registers, never when another
    // team's researcher does (it would be charged to `vision` at a priority of their choosing).
    let smoke = SuiteForm {
        name: "vision-smoke".into(),
        tier: "smoke".into(),
        training_run: "vision-run".into(),
        eval_ids: vec![store.list_evals().await.unwrap()[0].id],
        ..SuiteForm::default()
    };
    suites::create_suite(store, &smoke, &theirs.team, false, Some(theirs.id))
        .await
        .unwrap();
    let in_their_run = |name: &'static str| CheckpointForm {
        name: name.into(),
        endpoint_url: ENDPOINT.into(),
        model: "m".into(),
        training_run: "vision-run".into(),
        training_step: "1".into(),
        ..CheckpointForm::default()
    };
    let planted = catalog::register_checkpoint(store, &in_their_run("planted"), Some(ours.id))
        .await
        .unwrap();
    let started = suites::trigger_new_checkpoint(
        store,
        planted,
        arbiter_domain::run::Priority::Promotion,
        Some(&ours),
    )
    .await
    .unwrap();
    assert!(started.is_empty(), "{started:?}");
    let announced = catalog::register_checkpoint(store, &in_their_run("announced"), None)
        .await
        .unwrap();
    let started = suites::trigger_new_checkpoint(
        store,
        announced,
        arbiter_domain::run::Priority::Scheduled,
        None,
    )
    .await
    .unwrap();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0].suite, "vision-smoke");

    // Suites: another team may neither run ours on demand (it would be charged to us) nor
    // delete it; its members and leads may.
    let eval_id = store.list_evals().await.unwrap()[0].id;
    let form = SuiteForm {
        name: "nightly".into(),
        tier: "full".into(),
        every_nth: Some(0),
        eval_ids: vec![eval_id],
        ..SuiteForm::default()
    };
    let suite_id = suites::create_suite(store, &form, &ours.team, false, Some(ours.id))
        .await
        .unwrap();
    let runs_before = store.list_runs().await.unwrap().len();
    forbidden(
        suites::run_suite_on_demand(
            store,
            &theirs,
            own_checkpoint,
            "nightly",
            Priority::Promotion,
        )
        .await,
        "team `default`",
    );
    assert_eq!(store.list_runs().await.unwrap().len(), runs_before);
    forbidden(
        suites::delete_suite(store, &theirs, suite_id).await,
        "team `default`",
    );
    assert_eq!(
        store.suites().await.unwrap().len(),
        2,
        "nightly and vision-smoke"
    );
    let launched =
        suites::run_suite_on_demand(store, &ours, own_checkpoint, "nightly", Priority::Scheduled)
            .await
            .unwrap();
    assert!(launched[0].run_id.is_some(), "{launched:?}");
    suites::delete_suite(store, &lead, suite_id).await.unwrap();
    assert_eq!(
        store.suites().await.unwrap().len(),
        1,
        "vision-smoke is left"
    );
    assert!(matches!(
        suites::delete_suite(store, &lead, suite_id).await,
        Err(ServiceError::NotFound(_))
    ));
}

async fn only_an_endpoints_owner_or_a_lead_changes_its_limit(store: Arc<dyn Store>) {
    let store = &*store;
    let owner = team_member(store, "otto", Role::Researcher, "default").await;
    let other = team_member(store, "vera", Role::Researcher, "default").await;
    let lead = team_member(store, "lea", Role::Lead, "default").await;
    let form = |name: &str, limit: &str| CheckpointForm {
        name: name.into(),
        endpoint_url: ENDPOINT.into(),
        model: "m".into(),
        max_in_flight: limit.into(),
        ..CheckpointForm::default()
    };
    catalog::register_checkpoint(store, &form("first", "8"), Some(owner.id))
        .await
        .unwrap();
    let limit = || async {
        let endpoints = store.list_endpoints().await.unwrap();
        assert_eq!(endpoints.len(), 1);
        endpoints[0].clone()
    };
    let endpoint = limit().await;
    assert_eq!(
        (endpoint.max_in_flight, endpoint.owner.as_deref()),
        (8, Some("otto"))
    );

    // Registering one more checkpoint on the shared URL may not change its limit, even for
    // its owner: the checkpoint is refused with the reason and nothing is stored.
    for user in [&other, &owner] {
        let refused = catalog::register_checkpoint(store, &form("second", "512"), Some(user.id))
            .await
            .unwrap_err();
        assert_eq!(refused.status_code(), 409, "{refused}");
        assert!(refused.to_string().contains("allows 8"), "{refused}");
    }
    assert_eq!(store.list_checkpoints().await.unwrap().len(), 1);
    // The same limit, or none, registers on the shared endpoint as before.
    catalog::register_checkpoint(store, &form("second", ""), Some(other.id))
        .await
        .unwrap();
    catalog::register_checkpoint(store, &form("third", "8"), Some(other.id))
        .await
        .unwrap();
    assert_eq!(limit().await.checkpoints, 3);

    // The explicit edit: not by another researcher; by its owner and by a lead.
    forbidden(
        catalog::set_endpoint_max_in_flight(store, &other, endpoint.id, "512").await,
        "otto",
    );
    assert_eq!(limit().await.max_in_flight, 8);
    let edited = catalog::set_endpoint_max_in_flight(store, &owner, endpoint.id, "16")
        .await
        .unwrap();
    assert_eq!(edited.max_in_flight, 16);
    catalog::set_endpoint_max_in_flight(store, &lead, endpoint.id, "32")
        .await
        .unwrap();
    assert_eq!(limit().await.max_in_flight, 32);
    assert_eq!(
        store
            .endpoint_limits(&endpoint.base_url)
            .await
            .unwrap()
            .max_in_flight,
        32,
        "workers read the edited limit"
    );
    for bad in ["0", "100001", "many", ""] {
        assert!(matches!(
            catalog::set_endpoint_max_in_flight(store, &lead, endpoint.id, bad).await,
            Err(ServiceError::Invalid(_))
        ));
    }
    assert!(matches!(
        catalog::set_endpoint_max_in_flight(store, &lead, 999_999, "4").await,
        Err(ServiceError::NotFound(_))
    ));
}
