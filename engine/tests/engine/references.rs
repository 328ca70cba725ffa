//! The references of the tables every result writes hold on both backends: on SQLite by
//! foreign keys, on PostgreSQL by the once-per-statement checks that replaced them (migration
//! 0050). Each refusal is staged in SQL, as no API call writes a dangling reference.

use arbiter_store::Database;
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
        assert_eq!(
            backend.fetch_i64("SELECT COUNT(*) FROM generations").await,
            0
        );
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
        for column in ["revision_id", "checkpoint_id"] {
            refused(format!(
                "UPDATE work_items SET {column} = {column} + 1000 WHERE id = {item}"
            ))
            .await;
        }
        for table in ["generation_cache", "generation_logprobs"] {
            refused(format!(
                "UPDATE {table} SET work_item_id = {other} WHERE work_item_id = {item}"
            ))
            .await;
        }
        for (table, id) in [
            ("runs", run_id.get()),
            ("dataset_revisions", revision),
            ("checkpoints", checkpoint),
        ] {
            refused(format!("UPDATE {table} SET id = id + 1000 WHERE id = {id}")).await;
        }
        if let Database::Postgres(store) = &backend.database {
            // PostgreSQL only: SQLite has neither TRUNCATE nor these isolation levels.
            refused("TRUNCATE generations".to_string()).await;
            refused("TRUNCATE work_items CASCADE".to_string()).await;
            let mut connection = store.pool().acquire().await.unwrap();
            sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *connection)
                .await
                .unwrap();
            let err = sqlx::query(&format!("DELETE FROM work_items WHERE id = {other}"))
                .execute(&mut *connection)
                .await
                .expect_err("a delete under a snapshot older than the statement is refused");
            assert!(err.to_string().contains("READ COMMITTED"), "{err}");
            sqlx::query("ROLLBACK")
                .execute(&mut *connection)
                .await
                .unwrap();
        }

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

        // Runs, dataset revisions and checkpoints go only once no identity names them: each
        // checked on a copy of the launch's, which nothing else references.
        for (table, unique_column, reference, id) in [
            ("runs", "manifest_hash", "run_id", run_id.get()),
            ("dataset_revisions", "content_hash", "revision_id", revision),
            ("checkpoints", "name", "checkpoint_id", checkpoint),
        ] {
            let copy = id + 1000;
            backend
                .execute(&format!(
                    "CREATE TABLE staged_parent AS SELECT * FROM {table} WHERE id = {id}"
                ))
                .await;
            backend
                .execute(&format!(
                    "UPDATE staged_parent SET id = {copy}, {unique_column} = {unique_column} || '-copy'"
                ))
                .await;
            backend
                .execute(&format!("INSERT INTO {table} SELECT * FROM staged_parent"))
                .await;
            backend.execute("DROP TABLE staged_parent").await;
            let [run, revision, checkpoint] = match reference {
                "run_id" => [copy, revision, checkpoint],
                "revision_id" => [run_id.get(), copy, checkpoint],
                _ => [run_id.get(), revision, copy],
            };
            accepted(identity(run, revision, checkpoint)).await;
            refused(format!("DELETE FROM {table} WHERE id = {copy}")).await;
            accepted(format!("DELETE FROM work_items WHERE {reference} = {copy}")).await;
            accepted(format!("DELETE FROM {table} WHERE id = {copy}")).await;
        }
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
