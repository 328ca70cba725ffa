//! Rater hours and pay on both backends: pools and rates from a day on, raters' pools, time on
//! task capped per answer, the ledger priced by what was in force on each day (a later rate
//! change leaves a paid period alone), a rater's own rows, and bad input refused.
//!
//! Times on task and the days answers were given are set in SQL: a test cannot wait half an
//! hour per label.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::pay::{format_day, PayPeriod, DAY_MS};
use arbiter_domain::ids::UserId;
use arbiter_engine::annotation::pay::{
    assign_pool, create_pool, ledger, own_pay, set_rate, RateForm,
};
use arbiter_engine::error::ServiceError;
use arbiter_store::{now_ms, Database, Store};
use arbiter_testkit::backend::TestBackend;
use arbiter_testkit::fixtures::*;

#[tokio::test]
async fn pay_on_sqlite() {
    let backend = TestBackend::sqlite().await;
    pay_is_priced_by_the_rate_in_force(&backend.database).await;
    backend.tear_down().await;
}

#[tokio::test]
async fn pay_on_postgres() {
    let backend = TestBackend::postgres().await;
    pay_is_priced_by_the_rate_in_force(&backend.database).await;
    backend.tear_down().await;
}

/// Runs `sql` with `binds` on whichever backend `database` is.
async fn execute(database: &Database, sql: &str, binds: &[i64]) {
    match database {
        Database::Sqlite(store) => {
            let mut query = sqlx::query(sql);
            for bind in binds {
                query = query.bind(*bind);
            }
            query.execute(store.pool()).await.unwrap();
        }
        Database::Postgres(store) => {
            let mut query = sqlx::query(sql);
            for bind in binds {
                query = query.bind(*bind);
            }
            query.execute(store.pool()).await.unwrap();
        }
    }
}

/// Gives `rater`'s labels, in the order given, these times on task (`None`: untimed) and the
/// time `at`.
async fn label_times(
    database: &Database,
    store: &dyn Store,
    run: arbiter_domain::ids::RunId,
    rater: UserId,
    at: i64,
    durations: &[Option<i64>],
) {
    let mut labels: Vec<i64> = store
        .run_labels(run)
        .await
        .unwrap()
        .into_iter()
        .filter(|label| label.rater_id == rater)
        .map(|label| label.label_id)
        .collect();
    labels.sort_unstable();
    assert_eq!(labels.len(), durations.len());
    for (label, duration) in labels.iter().zip(durations) {
        execute(
            database,
            "UPDATE labels SET created_at = $1, duration_ms = $2 WHERE id = $3",
            &[at, duration.unwrap_or(-1), *label],
        )
        .await;
    }
    execute(
        database,
        "UPDATE labels SET duration_ms = NULL WHERE duration_ms = -1",
        &[],
    )
    .await;
}

fn rate(pool_id: i64, basis: &str, rate: &str, currency: &str, from: i64) -> RateForm {
    RateForm {
        pool_id,
        basis: basis.into(),
        rate: rate.into(),
        currency: currency.into(),
        idle_cap_minutes: String::new(),
        effective_from: format_day(from),
    }
}

async fn pay_is_priced_by_the_rate_in_force(database: &Database) {
    let store = database.store();
    let store = store.as_ref();
    let run = launch_one_run(store, SAMPLE, 1).await;
    let ids = store
        .claim_work("worker", 100, LONG_LEASE_MS)
        .await
        .unwrap();
    escalate_to_humans(store, &ids, 2).await;
    let user = |name: &'static str, role| async move {
        store
            .create_user(name, &stand_in_hash(name), role)
            .await
            .unwrap()
    };
    let lead = user("lead", Role::Lead).await;
    let (ann, ben) = (
        user("ann", Role::Annotator).await,
        user("ben", Role::Annotator).await,
    );
    for (rater, labels) in [(ann, 6), (ben, 4)] {
        for _ in 0..labels {
            label_next(store, rater, true).await;
        }
    }
    // A Monday three weeks back, and the Tuesday after it.
    let now = now_ms();
    let monday = PayPeriod::Week.of(now / DAY_MS - 21).0;
    let tuesday = monday + 1;
    let minutes = |m: i64| Some(m * 60_000);
    // Ann's Monday: 1 + 2 + 30 (capped at 10) + untimed + 5 + 4 minutes = 22 payable minutes.
    label_times(
        database,
        store,
        run,
        ann,
        monday * DAY_MS + 10 * 3_600_000,
        &[
            minutes(1),
            minutes(2),
            minutes(30),
            None,
            minutes(5),
            minutes(4),
        ],
    )
    .await;
    // Ben's Tuesday: four labels of 20 minutes, one of them rejected by a reviewer.
    label_times(
        database,
        store,
        run,
        ben,
        tuesday * DAY_MS + 9 * 3_600_000,
        &[minutes(20); 4],
    )
    .await;
    execute(
        database,
        "UPDATE labels SET state = 'rejected' WHERE id = (SELECT MIN(id) FROM labels WHERE annotator_id = $1)",
        &[ben.get()],
    )
    .await;

    // Pools, rates and raters' pools; bad input refused with its reason, nothing stored.
    let vendor = create_pool(store, "vendor", now).await.unwrap();
    let panel = create_pool(store, " panel ", now).await.unwrap();
    assert!(matches!(
        create_pool(store, "vendor", now).await,
        Err(ServiceError::Conflict(message)) if message.contains("exists already")
    ));
    assert!(matches!(
        create_pool(store, "", now).await,
        Err(ServiceError::Invalid(_))
    ));
    for (bad, says) in [
        (rate(vendor, "hour", "-18", "EUR", monday), "not an amount"),
        (
            rate(vendor, "hour", "18.005", "EUR", monday),
            "not an amount",
        ),
        (
            rate(vendor, "day", "18", "EUR", monday),
            "per `answer` or per `hour`",
        ),
        (rate(vendor, "hour", "18", "euro", monday), "currency code"),
        (
            RateForm {
                idle_cap_minutes: "0".into(),
                ..rate(vendor, "hour", "18", "EUR", monday)
            },
            "idle cap",
        ),
        (
            RateForm {
                effective_from: "2026-02-30".into(),
                ..rate(vendor, "hour", "18", "EUR", monday)
            },
            "not a date",
        ),
    ] {
        match set_rate(store, &bad, lead, now).await {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(says), "{message}"),
            other => panic!("{says}: {other:?}"),
        }
    }
    assert!(matches!(
        set_rate(store, &rate(999, "hour", "18", "EUR", monday), lead, now).await,
        Err(ServiceError::NotFound(_))
    ));
    assert!(store.pay_rates().await.unwrap().is_empty());
    set_rate(
        store,
        &rate(vendor, "hour", "18.00", "eur", monday),
        lead,
        now,
    )
    .await
    .unwrap();
    set_rate(
        store,
        &rate(panel, "answer", "0.4", "USD", monday),
        lead,
        now,
    )
    .await
    .unwrap();
    let from = |day: i64| format_day(day);
    assign_pool(store, ann, vendor, &from(monday), lead, now)
        .await
        .unwrap();
    assign_pool(store, ben, panel, &from(monday), lead, now)
        .await
        .unwrap();
    assert!(matches!(
        assign_pool(store, UserId(999), vendor, "", lead, now).await,
        Err(ServiceError::NotFound(_))
    ));
    assert!(matches!(
        assign_pool(store, ann, 999, "", lead, now).await,
        Err(ServiceError::NotFound(_))
    ));

    let week = |until: i64| {
        let (from, until) = (format_day(monday), format_day(until));
        async move { ledger(store, &from, &until, "week", None).await.unwrap() }
    };
    let summary = |rows: &[arbiter_domain::annotation::pay::LedgerRow]| {
        rows.iter()
            .map(|row| {
                (
                    row.rater.clone(),
                    row.pool.clone(),
                    row.labels,
                    row.untimed,
                    row.rejected,
                    row.payable_ms,
                    row.amount_minor,
                )
            })
            .collect::<Vec<_>>()
    };
    let paid = week(tuesday).await;
    let expected = vec![
        // 22 minutes at 18.00 EUR an hour.
        (
            "ann".to_string(),
            Some("vendor".to_string()),
            6,
            1,
            0,
            22 * 60_000,
            660,
        ),
        // Four answers at 0.40 USD, the rejected one too (its time was spent).
        (
            "ben".to_string(),
            Some("panel".to_string()),
            4,
            0,
            1,
            4 * 10 * 60_000,
            160,
        ),
    ];
    assert_eq!(summary(&paid.rows), expected);
    assert_eq!(
        paid.totals,
        vec![
            ("EUR".to_string(), 6, 22 * 60_000, 660),
            ("USD".to_string(), 4, 40 * 60_000, 160)
        ]
    );
    assert!(paid.rows.iter().all(|row| row.period.contains("-W")));

    // From Tuesday the vendor pays more and Ben is unpaid staff: Ann's Monday is priced as
    // before, Ben's Tuesday is not paid.
    set_rate(
        store,
        &rate(vendor, "hour", "20", "EUR", tuesday),
        lead,
        now,
    )
    .await
    .unwrap();
    assign_pool(store, ben, 0, &from(tuesday), lead, now)
        .await
        .unwrap();
    let later = week(tuesday).await;
    assert_eq!(summary(&later.rows)[0], expected[0]);
    assert_eq!(
        (later.rows[1].pool.clone(), later.rows[1].amount_minor),
        (None, 0)
    );

    // A rater's own rows (as of the Tuesday) are theirs alone.
    let own = own_pay(store, ann, tuesday * DAY_MS + 12 * 3_600_000)
        .await
        .unwrap();
    assert!(own
        .iter()
        .flat_map(|ledger| &ledger.rows)
        .all(|row| row.rater_id == ann));
    assert_eq!(own[0].rows.len(), 1, "one week with answers");
    assert_eq!(own[1].period, PayPeriod::Month);

    for (from_day, until_day, period, says) in [
        (tuesday, monday, "week", "ends"),
        (monday, tuesday, "day", "`week` or `month`"),
        (monday - 400, tuesday, "week", "at most 366 days"),
    ] {
        match ledger(
            store,
            &format_day(from_day),
            &format_day(until_day),
            period,
            None,
        )
        .await
        {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(says), "{message}"),
            other => panic!("{says}: {other:?}"),
        }
    }
}
