//! The references of the tables every result writes hold on both backends: on SQLite by
//! foreign keys, on PostgreSQL by the once-per-statement checks that replaced them (migration
//! 0050). Each refusal is staged in SQL, as no API call writes a dangling reference.

use arbiter_testkit::backend::TestBackend;
use arbiter_testkit::fixtures::*;

#[tokio::test]
async fn results_and_identities_refuse_references_to_rows_that_do_not_exist() {
    for backend in [TestBackend::sqlite().await, TestBackend::postgres().await] {
        let store = backend.database.store();
        let run_id = launch_one_run(store.as_ref(), FIVE_CASES.as_bytes(), 1).await;
        let first = |column: &'static str| {
            let backend = &backend;
            async move {
                backend
                    .fetch_i64(&format!(
                        "SELECT MIN({column}) FROM work_items WHERE run_id = {run_id}"
                    ))
                    .await
            }
        };
        let item = first("id").await;
        let (revision, checkpoint) = (first("revision_id").await, first("checkpoint_id").await);
        let other = backend
            .fetch_i64(&format!(
                "SELECT MAX(id) FROM work_items WHERE run_id = {run_id}"
            ))
            .await;
        let missing = other + 1000;
        let refused = |sql: String| {
            let backend = &backend;
            async move {
                match backend.try_execute(&sql).await {
                    Err(err) => assert!(
                        err.as_database_error()
                            .is_some_and(|db| db.is_foreign_key_violation()),
                        "`{sql}` failed otherwise than on a reference: {err}"
                    ),
                    Ok(rows) => panic!("`{sql}` was accepted ({rows} rows)"),
                }
            }
        };
        let accepted = |sql: String| {
            let backend = &backend;
            async move { assert_eq!(backend.try_execute(&sql).await.unwrap(), 1, "{sql}") }
        };
        let count = |table: &'static str| {
            let backend = &backend;
            async move {
                backend
                    .fetch_i64(&format!("SELECT COUNT(*) FROM {table}"))
                    .await
            }
        };
        let generation = |id: i64| {
            format!(
                "INSERT INTO generations (work_item_id, outcome, output, latency_ms, attempts, created_at) \
                 VALUES ({id}, 'ok', '2', 1, 1, 0)"
            )
        };
        let grade = |id: i64| {
            format!(
                "INSERT INTO grades (work_item_id, grader, verdict, reason, created_at) \
                 VALUES ({id}, 'exact_match@1', 'pass', 'matches', 0)"
            )
        };
        let identity = |run: i64, revision: i64, checkpoint: i64| {
            format!(
                "INSERT INTO work_items (run_id, revision_id, case_id, checkpoint_id, repetition, state) \
                 VALUES ({run}, {revision}, 'c1', {checkpoint}, 9, 'queued')"
            )
        };

        // Inserts naming a missing parent: nothing of the statement is stored, not even its
        // rows whose parent exists.
        refused(format!(
            "INSERT INTO generations (work_item_id, outcome, output, latency_ms, attempts, created_at) \
             VALUES ({item}, 'ok', '2', 1, 1, 0), ({missing}, 'ok', '2', 1, 1, 0)"
        ))
        .await;
        assert_eq!(count("generations").await, 0);
        refused(grade(missing)).await;
        refused(identity(run_id.get() + 1000, revision, checkpoint)).await;
        refused(identity(run_id.get(), revision + 1000, checkpoint)).await;
        refused(identity(run_id.get(), revision, checkpoint + 1000)).await;
        // The cache and the logprobs point at a generation, which `other` has not.
        refused(format!(
            "INSERT INTO generation_cache (generation_key, work_item_id, created_at) VALUES ('k', {other}, 0)"
        ))
        .await;
        refused(format!(
            "INSERT INTO generation_logprobs (work_item_id, logprobs) VALUES ({other}, '\\x00')"
        ))
        .await;

        // The same rows with parents that exist are stored.
        accepted(generation(item)).await;
        accepted(grade(item)).await;
        accepted(identity(run_id.get(), revision, checkpoint)).await;
        accepted(format!(
            "INSERT INTO generation_cache (generation_key, work_item_id, created_at) VALUES ('k', {item}, 0)"
        ))
        .await;
        accepted(format!(
            "INSERT INTO generation_logprobs (work_item_id, logprobs) VALUES ({item}, '\\x00')"
        ))
        .await;

        // A reference never moves to a missing row, and a referenced key never changes.
        refused(format!(
            "UPDATE generations SET work_item_id = {missing} WHERE work_item_id = {item}"
        ))
        .await;
        refused(format!(
            "UPDATE grades SET work_item_id = {missing} WHERE work_item_id = {item}"
        ))
        .await;
        refused(format!(
            "UPDATE work_items SET run_id = {} WHERE id = {item}",
            run_id.get() + 1000
        ))
        .await;
        refused(format!(
            "UPDATE work_items SET id = {missing} WHERE id = {item}"
        ))
        .await;

        // A parent goes only after its children, each checked on its own.
        refused(format!(
            "DELETE FROM generations WHERE work_item_id = {item}"
        ))
        .await;
        accepted(format!(
            "DELETE FROM generation_cache WHERE work_item_id = {item}"
        ))
        .await;
        refused(format!(
            "DELETE FROM generations WHERE work_item_id = {item}"
        ))
        .await;
        accepted(format!(
            "DELETE FROM generation_logprobs WHERE work_item_id = {item}"
        ))
        .await;
        refused(format!("DELETE FROM work_items WHERE id = {item}")).await;
        accepted(format!(
            "DELETE FROM generations WHERE work_item_id = {item}"
        ))
        .await;
        refused(format!("DELETE FROM work_items WHERE id = {item}")).await;
        accepted(format!("DELETE FROM grades WHERE work_item_id = {item}")).await;
        accepted(format!("DELETE FROM work_items WHERE id = {item}")).await;
        assert_eq!(
            backend
                .fetch_i64(&format!(
                    "SELECT COUNT(*) FROM work_items WHERE run_id = {run_id}"
                ))
                .await,
            5,
            "four of the launch's identities and the one added"
        );
        backend.tear_down().await;
    }
}
