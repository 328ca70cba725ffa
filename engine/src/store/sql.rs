//! The SQL body shared by both backends.
//!
//! `sql_store!` expands the whole `Store` implementation once per backend, so every query is
//! written once. Placeholders are `$n` (both SQLite and PostgreSQL accept them); times are Unix
//! milliseconds; counts use `COUNT(*) FILTER (...)`, which both dialects support. The dialect
//! parameters are the statement that opens a write transaction (SQLite takes the write lock up
//! front with `BEGIN IMMEDIATE`, avoiding lock-upgrade failures) and the row-lock clause for
//! claims (`FOR UPDATE SKIP LOCKED` on PostgreSQL, nothing on SQLite's single writer).

/// Rows inserted per statement when storing dataset items (6 binds a row stays well under
/// SQLite's 32,766-variable limit).
pub(super) const ITEM_INSERT_BATCH: usize = 1000;

macro_rules! sql_store {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::auth::{PasswordHash, Role};
        use $crate::dataset::{DatasetItem, ParsedDataset};
        use $crate::grading::{Grade, Verdict};
        use $crate::manifest::Manifest;
        use $crate::model_client::Generation;
        use $crate::store::{
            now_ms, AnnotationTask, Checkpoint, DatasetRevision, DatasetSummary, EvalSummary, Job,
            LaunchedRun, ManifestInputs, NewCheckpoint, QueueCounts, ResultRow, RunProgress,
            RunSummary, Store, StoreError, StoreResult, User, UserCredentials,
        };
        use sqlx::Row;

        const REVISION_COLUMNS: &str =
            "id, dataset_id, content_hash, item_count, source_name, created_at";

        fn revision_from_row(row: &<$db as sqlx::Database>::Row) -> Result<DatasetRevision, sqlx::Error> {
            Ok(DatasetRevision {
                id: row.try_get("id")?,
                dataset_id: row.try_get("dataset_id")?,
                content_hash: row.try_get("content_hash")?,
                item_count: row.try_get("item_count")?,
                source_name: row.try_get("source_name")?,
                created_at: row.try_get("created_at")?,
            })
        }

        fn user_from_row(row: &<$db as sqlx::Database>::Row) -> Result<User, sqlx::Error> {
            let role: String = row.try_get("role")?;
            Ok(User {
                id: row.try_get("id")?,
                username: row.try_get("username")?,
                role: role
                    .parse::<Role>()
                    .map_err(|err| sqlx::Error::Decode(err.into()))?,
            })
        }

        const EVAL_SELECT: &str = "SELECT e.id, e.name, e.dataset_id, d.name AS dataset_name, \
            e.prompt_template, e.grader, e.max_tokens, e.temperature, e.repetitions, e.seed, \
            e.created_at FROM evals e JOIN datasets d ON d.id = e.dataset_id";

        fn eval_from_row(row: &<$db as sqlx::Database>::Row) -> Result<EvalSummary, sqlx::Error> {
            Ok(EvalSummary {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                dataset_id: row.try_get("dataset_id")?,
                dataset_name: row.try_get("dataset_name")?,
                prompt_template: row.try_get("prompt_template")?,
                grader: row.try_get("grader")?,
                max_tokens: row.try_get("max_tokens")?,
                temperature: row.try_get("temperature")?,
                repetitions: row.try_get("repetitions")?,
                seed: row.try_get("seed")?,
                created_at: row.try_get("created_at")?,
            })
        }

        const CHECKPOINT_SELECT: &str = "SELECT c.id, c.name, e.base_url, c.model, c.created_at \
            FROM checkpoints c JOIN endpoints e ON e.id = c.endpoint_id";

        fn checkpoint_from_row(row: &<$db as sqlx::Database>::Row) -> Result<Checkpoint, sqlx::Error> {
            Ok(Checkpoint {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                base_url: row.try_get("base_url")?,
                model: row.try_get("model")?,
                created_at: row.try_get("created_at")?,
            })
        }

        // Final results of a run with the latest grade's reason. The grade subquery picks the
        // newest grade, so a human label supersedes the automatic one.
        const RESULT_SELECT: &str = "SELECT w.case_id, w.repetition, i.category, i.input, i.target, \
            COALESCE(g.output, '') AS output, COALESCE(g.outcome, 'pending') AS outcome, \
            COALESCE(w.verdict, 'pending') AS verdict, g.error, \
            COALESCE((SELECT gr.reason FROM grades gr WHERE gr.work_item_id = w.id \
                      ORDER BY gr.id DESC LIMIT 1), '') AS grade_reason \
            FROM work_items w \
            JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
            LEFT JOIN generations g ON g.work_item_id = w.id \
            WHERE w.run_id = $1 ORDER BY i.position, w.repetition";

        fn result_from_row(row: &<$db as sqlx::Database>::Row) -> Result<ResultRow, sqlx::Error> {
            Ok(ResultRow {
                case_id: row.try_get("case_id")?,
                repetition: row.try_get("repetition")?,
                category: row.try_get("category")?,
                input: row.try_get("input")?,
                target: row.try_get("target")?,
                output: row.try_get("output")?,
                outcome: row.try_get("outcome")?,
                verdict: row.try_get("verdict")?,
                grade_reason: row.try_get("grade_reason")?,
                error: row.try_get("error")?,
            })
        }

        /// Maps a unique-constraint violation to a user-facing conflict, by constraint name.
        fn conflict_on(err: sqlx::Error, constraint: &str, message: &str) -> StoreError {
            if let sqlx::Error::Database(db_err) = &err {
                let by_name = db_err.constraint() == Some(constraint);
                // SQLite reports no constraint name, only the failing kind.
                let sqlite_unique = $backend == "sqlite"
                    && db_err.kind() == sqlx::error::ErrorKind::UniqueViolation;
                if by_name || sqlite_unique {
                    return StoreError::Conflict(message.to_string());
                }
            }
            StoreError::Database(err)
        }

        #[async_trait::async_trait]
        impl Store for $store {
            fn backend(&self) -> &'static str {
                $backend
            }

            async fn create_user(&self, username: &str, hash: &PasswordHash, role: Role) -> StoreResult<i64> {
                sqlx::query_scalar::<_, i64>(
                    "INSERT INTO users (username, password_hash, role, created_at) \
                     VALUES ($1, $2, $3, $4) RETURNING id",
                )
                .bind(username)
                .bind(hash.as_phc())
                .bind(role.as_str())
                .bind(now_ms())
                .fetch_one(&self.pool)
                .await
                .map_err(|err| {
                    conflict_on(err, "users_username_key", &format!("the username `{username}` is taken"))
                })
            }

            async fn find_user_credentials(&self, username: &str) -> StoreResult<Option<UserCredentials>> {
                let row = sqlx::query("SELECT id, username, role, password_hash FROM users WHERE username = $1")
                    .bind(username)
                    .fetch_optional(&self.pool)
                    .await?;
                let Some(row) = row else { return Ok(None) };
                Ok(Some(UserCredentials {
                    user: user_from_row(&row)?,
                    password_hash: PasswordHash::from_stored(row.try_get("password_hash")?),
                }))
            }

            async fn get_user(&self, id: i64) -> StoreResult<Option<User>> {
                let row = sqlx::query("SELECT id, username, role FROM users WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.as_ref().map(user_from_row).transpose()?)
            }

            async fn set_password(&self, username: &str, hash: &PasswordHash) -> StoreResult<bool> {
                let result = sqlx::query("UPDATE users SET password_hash = $1 WHERE username = $2")
                    .bind(hash.as_phc())
                    .bind(username)
                    .execute(&self.pool)
                    .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn list_users(&self) -> StoreResult<Vec<User>> {
                let rows = sqlx::query("SELECT id, username, role FROM users ORDER BY username")
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.iter().map(user_from_row).collect::<Result<_, _>>()?)
            }

            async fn register_checkpoint(&self, new: &NewCheckpoint, created_by: Option<i64>) -> StoreResult<i64> {
                let mut tx = self.pool.begin_with($begin).await?;
                let now = now_ms();
                sqlx::query("INSERT INTO endpoints (base_url, created_at) VALUES ($1, $2) ON CONFLICT (base_url) DO NOTHING")
                    .bind(&new.base_url)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let endpoint_id: i64 = sqlx::query_scalar("SELECT id FROM endpoints WHERE base_url = $1")
                    .bind(&new.base_url)
                    .fetch_one(&mut *tx)
                    .await?;
                let id = sqlx::query_scalar::<_, i64>(
                    "INSERT INTO checkpoints (name, endpoint_id, model, created_by, created_at) \
                     VALUES ($1, $2, $3, $4, $5) RETURNING id",
                )
                .bind(&new.name)
                .bind(endpoint_id)
                .bind(&new.model)
                .bind(created_by)
                .bind(now)
                .fetch_one(&mut *tx)
                .await
                .map_err(|err| {
                    conflict_on(err, "checkpoints_name_key", &format!("a checkpoint named `{}` exists already", new.name))
                })?;
                tx.commit().await?;
                Ok(id)
            }

            async fn list_checkpoints(&self) -> StoreResult<Vec<Checkpoint>> {
                let rows = sqlx::query(&format!("{CHECKPOINT_SELECT} ORDER BY c.name"))
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.iter().map(checkpoint_from_row).collect::<Result<_, _>>()?)
            }

            async fn store_dataset_revision(
                &self,
                name: &str,
                source_name: &str,
                parsed: &ParsedDataset,
                created_by: Option<i64>,
            ) -> StoreResult<DatasetRevision> {
                let mut tx = self.pool.begin_with($begin).await?;
                let now = now_ms();
                sqlx::query("INSERT INTO datasets (name, created_by, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
                    .bind(name)
                    .bind(created_by)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let dataset_id: i64 = sqlx::query_scalar("SELECT id FROM datasets WHERE name = $1")
                    .bind(name)
                    .fetch_one(&mut *tx)
                    .await?;
                let inserted: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO dataset_revisions (dataset_id, content_hash, item_count, source_name, created_by, created_at, uploaded_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (dataset_id, content_hash) DO NOTHING RETURNING id",
                )
                .bind(dataset_id)
                .bind(&parsed.content_hash)
                .bind(parsed.items.len() as i64)
                .bind(source_name)
                .bind(created_by)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
                if inserted.is_none() {
                    // Known content: it becomes the current revision again (a revert).
                    sqlx::query("UPDATE dataset_revisions SET uploaded_at = $1 WHERE dataset_id = $2 AND content_hash = $3")
                        .bind(now)
                        .bind(dataset_id)
                        .bind(&parsed.content_hash)
                        .execute(&mut *tx)
                        .await?;
                }
                if let Some(revision_id) = inserted {
                    for (chunk_index, chunk) in parsed.items.chunks(super::sql::ITEM_INSERT_BATCH).enumerate() {
                        let offset = chunk_index * super::sql::ITEM_INSERT_BATCH;
                        let mut insert = sqlx::QueryBuilder::<$db>::new(
                            "INSERT INTO dataset_items (revision_id, case_id, position, input, target, category) ",
                        );
                        insert.push_values(chunk.iter().enumerate(), |mut row, (index, item)| {
                            row.push_bind(revision_id)
                                .push_bind(item.case_id.clone())
                                .push_bind((offset + index) as i64)
                                .push_bind(item.input.clone())
                                .push_bind(item.target.clone())
                                .push_bind(item.category.clone());
                        });
                        insert.build().execute(&mut *tx).await?;
                    }
                }
                let row = sqlx::query(&format!(
                    "SELECT {REVISION_COLUMNS} FROM dataset_revisions WHERE dataset_id = $1 AND content_hash = $2"
                ))
                .bind(dataset_id)
                .bind(&parsed.content_hash)
                .fetch_one(&mut *tx)
                .await?;
                let revision = revision_from_row(&row)?;
                tx.commit().await?;
                Ok(revision)
            }

            async fn list_datasets(&self) -> StoreResult<Vec<DatasetSummary>> {
                let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM datasets ORDER BY name")
                    .fetch_all(&self.pool)
                    .await?;
                let mut summaries = Vec::with_capacity(ids.len());
                for id in ids {
                    if let Some(summary) = self.get_dataset(id).await? {
                        summaries.push(summary);
                    }
                }
                Ok(summaries)
            }

            async fn get_dataset(&self, id: i64) -> StoreResult<Option<DatasetSummary>> {
                let row = sqlx::query(
                    "SELECT d.id, d.name, (SELECT COUNT(*) FROM dataset_revisions r WHERE r.dataset_id = d.id) AS revision_count \
                     FROM datasets d WHERE d.id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
                let Some(row) = row else { return Ok(None) };
                let latest = sqlx::query(&format!(
                    "SELECT {REVISION_COLUMNS} FROM dataset_revisions WHERE dataset_id = $1 ORDER BY uploaded_at DESC, id DESC LIMIT 1"
                ))
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
                Ok(Some(DatasetSummary {
                    id: row.try_get("id")?,
                    name: row.try_get("name")?,
                    revision_count: row.try_get("revision_count")?,
                    latest_revision: latest.as_ref().map(revision_from_row).transpose()?,
                }))
            }

            async fn list_revisions(&self, dataset_id: i64) -> StoreResult<Vec<DatasetRevision>> {
                let rows = sqlx::query(&format!(
                    "SELECT {REVISION_COLUMNS} FROM dataset_revisions WHERE dataset_id = $1 ORDER BY uploaded_at DESC, id DESC"
                ))
                .bind(dataset_id)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows.iter().map(revision_from_row).collect::<Result<_, _>>()?)
            }

            async fn list_items(&self, revision_id: i64, limit: i64, offset: i64) -> StoreResult<Vec<DatasetItem>> {
                let rows = sqlx::query(
                    "SELECT case_id, input, target, category FROM dataset_items \
                     WHERE revision_id = $1 ORDER BY position LIMIT $2 OFFSET $3",
                )
                .bind(revision_id)
                .bind(limit)
                .bind(offset)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(DatasetItem {
                            case_id: row.try_get("case_id")?,
                            input: row.try_get("input")?,
                            target: row.try_get("target")?,
                            category: row.try_get("category")?,
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::from)
            }

            async fn create_eval(&self, dataset_id: i64, spec: &$crate::manifest::EvalSpec, created_by: Option<i64>) -> StoreResult<i64> {
                let mut tx = self.pool.begin_with($begin).await?;
                let inserted = sqlx::query_scalar::<_, i64>(
                    "INSERT INTO evals (name, dataset_id, prompt_template, grader, max_tokens, temperature, repetitions, seed, created_by, created_at) \
                     SELECT $1, d.id, $2, $3, $4, $5, $6, $7, $8, $9 FROM datasets d WHERE d.id = $10 RETURNING id",
                )
                .bind(&spec.name)
                .bind(&spec.prompt_template)
                .bind(&spec.grader)
                .bind(i64::from(spec.generation.max_tokens))
                .bind(spec.generation.temperature)
                .bind(i64::from(spec.repetitions))
                .bind(spec.generation.seed as i64)
                .bind(created_by)
                .bind(now_ms())
                .bind(dataset_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|err| {
                    conflict_on(err, "evals_name_key", &format!("an eval named `{}` exists already", spec.name))
                })?;
                let id = inserted.ok_or_else(|| StoreError::NotFound(format!("no dataset with id {dataset_id}")))?;
                tx.commit().await?;
                Ok(id)
            }

            async fn list_evals(&self) -> StoreResult<Vec<EvalSummary>> {
                let rows = sqlx::query(&format!("{EVAL_SELECT} ORDER BY e.id DESC"))
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.iter().map(eval_from_row).collect::<Result<_, _>>()?)
            }

            async fn manifest_inputs(&self, eval_id: i64, checkpoint_id: i64) -> StoreResult<ManifestInputs> {
                let mut tx = self.pool.begin().await?;
                let eval = sqlx::query(&format!("{EVAL_SELECT} WHERE e.id = $1"))
                    .bind(eval_id)
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("no eval with id {eval_id}")))?;
                let eval = eval_from_row(&eval)?;
                let revision = sqlx::query(&format!(
                    "SELECT {REVISION_COLUMNS} FROM dataset_revisions WHERE dataset_id = $1 ORDER BY uploaded_at DESC, id DESC LIMIT 1"
                ))
                .bind(eval.dataset_id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("dataset `{}` has no revision", eval.dataset_name)))?;
                let checkpoint = sqlx::query(&format!("{CHECKPOINT_SELECT} WHERE c.id = $1"))
                    .bind(checkpoint_id)
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("no checkpoint with id {checkpoint_id}")))?;
                tx.commit().await?;
                Ok(ManifestInputs {
                    eval,
                    revision: revision_from_row(&revision)?,
                    checkpoint: checkpoint_from_row(&checkpoint)?,
                })
            }

            async fn create_run(&self, manifest: &Manifest, created_by: Option<i64>) -> StoreResult<LaunchedRun> {
                let manifest_hash = manifest.content_hash();
                let manifest_json = serde_json::to_string(manifest).expect("manifests always serialize");
                let expected = manifest.expected_results() as i64;
                let mut tx = self.pool.begin_with($begin).await?;
                let inserted: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO runs (manifest_hash, manifest_json, eval_id, revision_id, checkpoint_id, expected_count, status, created_by, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8) ON CONFLICT (manifest_hash) DO NOTHING RETURNING id",
                )
                .bind(&manifest_hash)
                .bind(&manifest_json)
                .bind(manifest.eval_id)
                .bind(manifest.dataset_revision_id)
                .bind(manifest.checkpoint_id)
                .bind(expected)
                .bind(created_by)
                .bind(now_ms())
                .fetch_optional(&mut *tx)
                .await?;
                let Some(run_id) = inserted else {
                    let run_id: i64 = sqlx::query_scalar("SELECT id FROM runs WHERE manifest_hash = $1")
                        .bind(&manifest_hash)
                        .fetch_one(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    return Ok(LaunchedRun { run_id, created: false });
                };
                // Expansion happens inside the database: a million-item run streams from
                // dataset_items into work_items without passing through this process.
                // Ordered repetition-major so every case gets a first answer early.
                let expanded = sqlx::query(
                    "WITH RECURSIVE reps(r) AS (SELECT 0 UNION ALL SELECT r + 1 FROM reps WHERE r + 1 < $1) \
                     INSERT INTO work_items (run_id, revision_id, case_id, checkpoint_id, repetition, state) \
                     SELECT $2, i.revision_id, i.case_id, $3, reps.r, 'queued' \
                     FROM dataset_items i CROSS JOIN reps WHERE i.revision_id = $4 \
                     ORDER BY reps.r, i.position",
                )
                .bind(i64::from(manifest.eval.repetitions))
                .bind(run_id)
                .bind(manifest.checkpoint_id)
                .bind(manifest.dataset_revision_id)
                .execute(&mut *tx)
                .await?;
                if expanded.rows_affected() as i64 != expected {
                    return Err(StoreError::Conflict(format!(
                        "the dataset revision changed while launching: expected {expected} result identities, expanded {}",
                        expanded.rows_affected()
                    )));
                }
                tx.commit().await?;
                Ok(LaunchedRun { run_id, created: true })
            }

            async fn list_runs(&self) -> StoreResult<Vec<RunSummary>> {
                let rows = sqlx::query(
                    "SELECT r.id, r.eval_id, e.name AS eval_name, c.name AS checkpoint_name, r.expected_count, r.created_at, \
                     (SELECT COUNT(*) FROM work_items w WHERE w.run_id = r.id AND w.state = 'done') AS done_count \
                     FROM runs r JOIN evals e ON e.id = r.eval_id JOIN checkpoints c ON c.id = r.checkpoint_id \
                     ORDER BY r.id DESC",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        let expected_count: i64 = row.try_get("expected_count")?;
                        let done_count: i64 = row.try_get("done_count")?;
                        Ok(RunSummary {
                            id: row.try_get("id")?,
                            eval_id: row.try_get("eval_id")?,
                            eval_name: row.try_get("eval_name")?,
                            checkpoint_name: row.try_get("checkpoint_name")?,
                            status: run_status(done_count, expected_count).to_string(),
                            expected_count,
                            done_count,
                            created_at: row.try_get("created_at")?,
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::from)
            }

            async fn run_progress(&self, run_id: i64) -> StoreResult<Option<RunProgress>> {
                let run = sqlx::query(
                    "SELECT r.id, r.eval_id, e.name AS eval_name, c.name AS checkpoint_name, en.base_url, r.manifest_hash, \
                     dr.content_hash, r.status, r.expected_count, r.created_at, r.finished_at \
                     FROM runs r JOIN evals e ON e.id = r.eval_id JOIN checkpoints c ON c.id = r.checkpoint_id \
                     JOIN endpoints en ON en.id = c.endpoint_id JOIN dataset_revisions dr ON dr.id = r.revision_id \
                     WHERE r.id = $1",
                )
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?;
                let Some(run) = run else { return Ok(None) };
                let counts = sqlx::query(
                    "SELECT COUNT(*) FILTER (WHERE state = 'done') AS done, \
                     COUNT(*) FILTER (WHERE state = 'leased') AS in_flight, \
                     COUNT(*) FILTER (WHERE verdict = 'pass') AS passed, \
                     COUNT(*) FILTER (WHERE verdict = 'fail') AS failed, \
                     COUNT(*) FILTER (WHERE verdict = 'uncertain') AS uncertain, \
                     COUNT(*) FILTER (WHERE verdict = 'error') AS errors \
                     FROM work_items WHERE run_id = $1",
                )
                .bind(run_id)
                .fetch_one(&self.pool)
                .await?;
                let last_error: Option<String> = sqlx::query_scalar(
                    "SELECT g.error FROM generations g JOIN work_items w ON w.id = g.work_item_id \
                     WHERE w.run_id = $1 AND g.error IS NOT NULL ORDER BY g.created_at DESC LIMIT 1",
                )
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?
                .flatten();
                let expected: i64 = run.try_get("expected_count")?;
                let done: i64 = counts.try_get("done")?;
                let mut status: String = run.try_get("status")?;
                let mut finished_at: Option<i64> = run.try_get("finished_at")?;
                // Completion is derived from the counts rather than flipped by the last worker,
                // which two concurrent workers could each miss; any reader records it once.
                if status == "running" && done == expected {
                    let now = now_ms();
                    sqlx::query("UPDATE runs SET status = 'completed', finished_at = $1 WHERE id = $2 AND status = 'running'")
                        .bind(now)
                        .bind(run_id)
                        .execute(&self.pool)
                        .await?;
                    status = "completed".into();
                    finished_at = finished_at.or(Some(now));
                }
                Ok(Some(RunProgress {
                    id: run.try_get("id")?,
                    eval_id: run.try_get("eval_id")?,
                    eval_name: run.try_get("eval_name")?,
                    checkpoint_name: run.try_get("checkpoint_name")?,
                    endpoint_url: run.try_get("base_url")?,
                    manifest_hash: run.try_get("manifest_hash")?,
                    dataset_revision: run.try_get("content_hash")?,
                    status,
                    expected,
                    done,
                    in_flight: counts.try_get("in_flight")?,
                    passed: counts.try_get("passed")?,
                    failed: counts.try_get("failed")?,
                    uncertain: counts.try_get("uncertain")?,
                    errors: counts.try_get("errors")?,
                    last_error,
                    created_at: run.try_get("created_at")?,
                    finished_at,
                }))
            }

            async fn run_results(&self, run_id: i64, limit: i64) -> StoreResult<Vec<ResultRow>> {
                let rows = sqlx::query(&format!("{RESULT_SELECT} LIMIT $2"))
                    .bind(run_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.iter().map(result_from_row).collect::<Result<_, _>>()?)
            }

            async fn run_outcomes(&self, run_id: i64) -> StoreResult<Vec<ResultRow>> {
                let rows = sqlx::query(RESULT_SELECT)
                    .bind(run_id)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.iter().map(result_from_row).collect::<Result<_, _>>()?)
            }

            async fn claim_work(&self, worker: &str, limit: i64, lease_ms: i64) -> StoreResult<Vec<i64>> {
                let now = now_ms();
                let mut tx = self.pool.begin_with($begin).await?;
                let ids: Vec<i64> = sqlx::query_scalar(concat!(
                    "UPDATE work_items SET state = 'leased', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1 \
                     WHERE id IN (SELECT id FROM work_items \
                                  WHERE state = 'queued' OR (state = 'leased' AND lease_expires_at < $3) \
                                  ORDER BY id LIMIT $4 ",
                    $skip_locked,
                    ") RETURNING id"
                ))
                .bind(worker)
                .bind(now + lease_ms)
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(ids)
            }

            async fn load_job(&self, work_item_id: i64) -> StoreResult<Job> {
                let row = sqlx::query(
                    "SELECT w.id, w.run_id, w.case_id, w.repetition, i.input, i.target, r.manifest_json \
                     FROM work_items w JOIN runs r ON r.id = w.run_id \
                     JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                     WHERE w.id = $1",
                )
                .bind(work_item_id)
                .fetch_optional(&self.pool)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("no work item with id {work_item_id}")))?;
                let manifest_json: String = row.try_get("manifest_json")?;
                let manifest: Manifest = serde_json::from_str(&manifest_json)
                    .map_err(|err| sqlx::Error::Decode(err.into()))?;
                Ok(Job {
                    work_item_id: row.try_get("id")?,
                    run_id: row.try_get("run_id")?,
                    case_id: row.try_get("case_id")?,
                    repetition: row.try_get("repetition")?,
                    input: row.try_get("input")?,
                    target: row.try_get("target")?,
                    prompt_template: manifest.eval.prompt_template,
                    grader: manifest.eval.grader,
                    max_tokens: i64::from(manifest.eval.generation.max_tokens),
                    temperature: manifest.eval.generation.temperature,
                    seed: manifest.eval.generation.seed as i64,
                    base_url: manifest.endpoint_url,
                    model: manifest.served_model,
                })
            }

            async fn record_result(&self, work_item_id: i64, generation: &Generation, grade: Option<&Grade>) -> StoreResult<bool> {
                let now = now_ms();
                let mut tx = self.pool.begin_with($begin).await?;
                let inserted = sqlx::query(
                    "INSERT INTO generations (work_item_id, outcome, output, finish_reason, error, latency_ms, attempts, \
                     prompt_tokens, completion_tokens, logprobs_json, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (work_item_id) DO NOTHING",
                )
                .bind(work_item_id)
                .bind(generation.outcome.as_str())
                .bind(&generation.output)
                .bind(&generation.finish_reason)
                .bind(&generation.error)
                .bind(generation.latency_ms)
                .bind(generation.attempts)
                .bind(generation.prompt_tokens)
                .bind(generation.completion_tokens)
                .bind(&generation.logprobs_json)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                if inserted.rows_affected() == 0 {
                    // Another worker committed this identity first (its lease had expired here).
                    tx.rollback().await?;
                    return Ok(false);
                }
                let verdict = match grade {
                    Some(grade) => {
                        sqlx::query(
                            "INSERT INTO grades (work_item_id, grader, verdict, extracted_answer, reason, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6)",
                        )
                        .bind(work_item_id)
                        .bind(&grade.grader)
                        .bind(grade.verdict.as_str())
                        .bind(&grade.extracted_answer)
                        .bind(&grade.reason)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                        grade.verdict.as_str()
                    }
                    None => "error",
                };
                sqlx::query(
                    "UPDATE work_items SET state = 'done', verdict = $1, lease_owner = NULL, lease_expires_at = NULL WHERE id = $2",
                )
                .bind(verdict)
                .bind(work_item_id)
                .execute(&mut *tx)
                .await?;
                if let Some(grade) = grade.filter(|grade| grade.verdict == Verdict::Uncertain) {
                    sqlx::query(
                        "INSERT INTO annotation_tasks (work_item_id, reason, state, created_at) VALUES ($1, $2, 'open', $3) \
                         ON CONFLICT (work_item_id) DO NOTHING",
                    )
                    .bind(work_item_id)
                    .bind(&grade.reason)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn next_annotation_task(&self, user_id: i64, lease_ms: i64) -> StoreResult<Option<AnnotationTask>> {
                let now = now_ms();
                let mut tx = self.pool.begin_with($begin).await?;
                // Renew the rater's own live lease first, so "next" never hands out a second item.
                let mut task: Option<(i64, i64)> = sqlx::query_as(
                    "UPDATE annotation_tasks SET lease_expires_at = $1 \
                     WHERE id = (SELECT id FROM annotation_tasks WHERE state = 'leased' AND leased_by = $2 ORDER BY id LIMIT 1) \
                     RETURNING id, lease_expires_at",
                )
                .bind(now + lease_ms)
                .bind(user_id)
                .fetch_optional(&mut *tx)
                .await?;
                if task.is_none() {
                    task = sqlx::query_as(concat!(
                        "UPDATE annotation_tasks SET state = 'leased', leased_by = $1, lease_expires_at = $2 \
                         WHERE id = (SELECT t.id FROM annotation_tasks t \
                                     WHERE (t.state = 'open' OR (t.state = 'leased' AND t.lease_expires_at < $3)) \
                                     AND NOT EXISTS (SELECT 1 FROM annotation_skips s WHERE s.task_id = t.id AND s.user_id = $1) \
                                     ORDER BY t.id LIMIT 1 ",
                        $skip_locked,
                        ") RETURNING id, lease_expires_at"
                    ))
                    .bind(user_id)
                    .bind(now + lease_ms)
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                }
                let Some((task_id, lease_expires_at)) = task else {
                    tx.commit().await?;
                    return Ok(None);
                };
                let row = sqlx::query(
                    "SELECT i.input, i.target, g.output FROM annotation_tasks t \
                     JOIN work_items w ON w.id = t.work_item_id \
                     JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                     JOIN generations g ON g.work_item_id = w.id WHERE t.id = $1",
                )
                .bind(task_id)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(Some(AnnotationTask {
                    task_id,
                    input: row.try_get("input")?,
                    target: row.try_get("target")?,
                    output: row.try_get("output")?,
                    lease_expires_at,
                }))
            }

            async fn submit_label(&self, task_id: i64, user_id: i64, pass: bool, rationale: &str) -> StoreResult<()> {
                let now = now_ms();
                let verdict = if pass { Verdict::Pass } else { Verdict::Fail };
                let mut tx = self.pool.begin_with($begin).await?;
                let work_item_id: Option<i64> = sqlx::query_scalar(
                    "UPDATE annotation_tasks SET state = 'done', completed_at = $1, lease_expires_at = NULL \
                     WHERE id = $2 AND state = 'leased' AND leased_by = $3 RETURNING work_item_id",
                )
                .bind(now)
                .bind(task_id)
                .bind(user_id)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(work_item_id) = work_item_id else {
                    tx.rollback().await?;
                    return Err(StoreError::Conflict(
                        "this item is not leased to you (it was labelled, skipped or reassigned); take the next item".into(),
                    ));
                };
                sqlx::query("INSERT INTO labels (task_id, annotator_id, verdict, rationale, created_at) VALUES ($1, $2, $3, $4, $5)")
                    .bind(task_id)
                    .bind(user_id)
                    .bind(verdict.as_str())
                    .bind(rationale)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let reason = if rationale.trim().is_empty() {
                    "human label".to_string()
                } else {
                    format!("human label: {}", rationale.trim())
                };
                sqlx::query(
                    "INSERT INTO grades (work_item_id, grader, verdict, extracted_answer, reason, created_at) \
                     VALUES ($1, 'human', $2, NULL, $3, $4)",
                )
                .bind(work_item_id)
                .bind(verdict.as_str())
                .bind(reason)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                sqlx::query("UPDATE work_items SET verdict = $1 WHERE id = $2")
                    .bind(verdict.as_str())
                    .bind(work_item_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn skip_task(&self, task_id: i64, user_id: i64) -> StoreResult<()> {
                let mut tx = self.pool.begin_with($begin).await?;
                let released = sqlx::query(
                    "UPDATE annotation_tasks SET state = 'open', leased_by = NULL, lease_expires_at = NULL \
                     WHERE id = $1 AND state = 'leased' AND leased_by = $2",
                )
                .bind(task_id)
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
                if released.rows_affected() == 0 {
                    tx.rollback().await?;
                    return Err(StoreError::Conflict("this item is not leased to you; take the next item".into()));
                }
                sqlx::query("INSERT INTO annotation_skips (task_id, user_id, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING")
                    .bind(task_id)
                    .bind(user_id)
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn annotation_queue_counts(&self) -> StoreResult<QueueCounts> {
                let row = sqlx::query(
                    "SELECT COUNT(*) FILTER (WHERE state = 'open') AS open, COUNT(*) FILTER (WHERE state = 'leased') AS leased, \
                     COUNT(*) FILTER (WHERE state = 'done') AS done FROM annotation_tasks",
                )
                .fetch_one(&self.pool)
                .await?;
                Ok(QueueCounts {
                    open: row.try_get("open")?,
                    leased: row.try_get("leased")?,
                    done: row.try_get("done")?,
                })
            }
        }

        fn run_status(done: i64, expected: i64) -> &'static str {
            if done >= expected {
                "completed"
            } else {
                "running"
            }
        }
    };
}

pub(super) use sql_store;
