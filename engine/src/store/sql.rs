//! The SQL body shared by both backends.
//!
//! `sql_store!` expands the whole `Store` implementation once per backend, so every query is
//! written once. Placeholders are `$n` (both SQLite and PostgreSQL accept them); times are Unix
//! milliseconds; counts use `COUNT(*) FILTER (...)`, which both dialects support. The dialect
//! parameters are the statement that opens a write transaction (SQLite takes the write lock up
//! front with `BEGIN IMMEDIATE`, avoiding lock-upgrade failures) and the row-lock clause for
//! claims (`FOR UPDATE SKIP LOCKED` on PostgreSQL, nothing on SQLite's single writer).

/// Rows per multi-row statement. SQLite allows 32,766 bound variables per statement; each
/// constant keeps rows × columns well under that.
pub(super) const ITEM_INSERT_BATCH: usize = 1000;
pub(super) const IDENTITY_INSERT_BATCH: usize = 1000;
pub(super) const RESULT_INSERT_BATCH: usize = 500;
/// Grades (16 columns) and grade cache entries (8) per statement.
pub(super) const GRADE_INSERT_BATCH: usize = 1000;
pub(super) const KEY_LOOKUP_BATCH: usize = 1000;

/// One run with its eval, checkpoint, endpoint and dataset revision (`$1`: the run id).
pub(crate) const RUN_HEADER_SELECT: &str = "SELECT r.id, r.eval_id, e.name AS eval_name, c.name AS checkpoint_name, en.base_url, r.manifest_hash, \
     dr.content_hash, r.status, r.priority, r.team, r.expected_count, r.done_count, r.created_at, r.finished_at, \
     c.created_at AS checkpoint_created_at \
     FROM runs r JOIN evals e ON e.id = r.eval_id JOIN checkpoints c ON c.id = r.checkpoint_id \
     JOIN endpoints en ON en.id = c.endpoint_id JOIN dataset_revisions dr ON dr.id = r.revision_id \
     WHERE r.id = $1";

macro_rules! sql_store {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use arbiter_domain::accounts::{PasswordHash, Role, User};
        use arbiter_domain::dataset::{DatasetItem, ParsedDataset, DatasetRevision, DatasetSummary};
        use arbiter_domain::grading::Verdict;
        use arbiter_domain::manifest::{Manifest, EvalSummary};
        use arbiter_domain::answer::Outcome;
        use $crate::store::{now_ms, ActiveRun, CachedGeneration, ClaimedJob, FinishedItem, Job, ManifestInputs, NewIdentity, NewRun, RecordOutcome, Store, StoreError, StoreResult, UserCredentials};
        use arbiter_domain::annotation::task::{AnnotationTask, QueueCounts};
        use arbiter_domain::checkpoint::{Checkpoint, EndpointLimits, NewCheckpoint, TokenPrices};
        use arbiter_domain::run::{LaunchedRun, ResultRow, RunProgress, RunSummary, RunCosts};
        use arbiter_domain::grading::judge::{Judge, NewJudge, JudgeCall, HumanCheckedJudgement};
        use arbiter_domain::grading::triage::{PolicyVersion, TriagePolicy};
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
                team: row.try_get("team")?,
                active: row.try_get("active")?,
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
                grader: {
                    let stored: String = row.try_get("grader")?;
                    arbiter_domain::manifest::parse_stored_grader(&stored)
                        .map_err(|err| sqlx::Error::Decode(err.into()))?
                },
                max_tokens: row.try_get("max_tokens")?,
                temperature: row.try_get("temperature")?,
                repetitions: row.try_get("repetitions")?,
                seed: row.try_get("seed")?,
                created_at: row.try_get("created_at")?,
            })
        }

        const JUDGE_SELECT: &str = "SELECT j.id, j.name, j.version, j.checkpoint_id, c.name AS checkpoint_name, \
            j.rubric, j.max_tokens, j.created_at FROM judges j JOIN checkpoints c ON c.id = j.checkpoint_id";

        fn judge_from_row(row: &<$db as sqlx::Database>::Row) -> Result<Judge, sqlx::Error> {
            Ok(Judge {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                version: row.try_get("version")?,
                checkpoint_id: row.try_get("checkpoint_id")?,
                checkpoint_name: row.try_get("checkpoint_name")?,
                rubric: row.try_get("rubric")?,
                max_tokens: row.try_get("max_tokens")?,
                created_at: row.try_get("created_at")?,
            })
        }

        const CHECKPOINT_SELECT: &str = "SELECT c.id, c.name, e.base_url, c.model, c.engine_build, \
            c.parallel_layout, c.fallback_checkpoint_id, e.max_in_flight, c.input_usd_per_mtok, \
            c.output_usd_per_mtok, c.training_run, c.training_step, c.created_at, e.api_key_ref \
            FROM checkpoints c JOIN endpoints e ON e.id = c.endpoint_id";

        fn checkpoint_from_row(row: &<$db as sqlx::Database>::Row) -> Result<Checkpoint, sqlx::Error> {
            Ok(Checkpoint {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                base_url: row.try_get("base_url")?,
                model: row.try_get("model")?,
                replica_urls: Vec::new(),
                engine_build: row.try_get("engine_build")?,
                parallel_layout: row.try_get("parallel_layout")?,
                fallback_checkpoint_id: row.try_get("fallback_checkpoint_id")?,
                max_in_flight: row.try_get("max_in_flight")?,
                prices: TokenPrices {
                    input_usd_per_mtok: row.try_get("input_usd_per_mtok")?,
                    output_usd_per_mtok: row.try_get("output_usd_per_mtok")?,
                },
                training_run: row.try_get("training_run")?,
                training_step: row.try_get("training_step")?,
                created_at: row.try_get("created_at")?,
                api_key_ref: row.try_get("api_key_ref")?,
            })
        }

        // Final results of a run with the latest grade's reason. The grade subquery picks the
        // newest grade, so a human label supersedes the automatic one.
        const RESULT_SELECT: &str = "SELECT w.case_id, w.repetition, i.category, i.input, i.target, \
            COALESCE(g.output, '') AS output, COALESCE(g.outcome, 'pending') AS outcome, \
            COALESCE(w.verdict, 'pending') AS verdict, w.decided_by, g.error, g.error_category, \
            COALESCE(g.attempts, 0) AS attempts, g.attempt_log, COALESCE(g.latency_ms, 0) AS latency_ms, \
            g.served_by, g.model_used, COALESCE(g.fallback_used, FALSE) AS fallback_used, \
            COALESCE(g.from_cache, FALSE) AS from_cache, \
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
                decided_by: row.try_get("decided_by")?,
                error: row.try_get("error")?,
                error_category: row.try_get("error_category")?,
                attempts: row.try_get("attempts")?,
                attempt_log: row.try_get("attempt_log")?,
                latency_ms: row.try_get("latency_ms")?,
                served_by: row.try_get("served_by")?,
                model_used: row.try_get("model_used")?,
                fallback_used: row.try_get("fallback_used")?,
                from_cache: row.try_get("from_cache")?,
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
                .fetch_one(&self.writer)
                .await
                .map_err(|err| {
                    conflict_on(err, "users_username_key", &format!("the username `{username}` is taken"))
                })
            }

            async fn find_user_credentials(&self, username: &str) -> StoreResult<Option<UserCredentials>> {
                let row = sqlx::query("SELECT id, username, role, team, active, password_hash FROM users WHERE username = $1")
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
                let row = sqlx::query("SELECT id, username, role, team, active FROM users WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.as_ref().map(user_from_row).transpose()?)
            }

            async fn set_password(&self, username: &str, hash: &PasswordHash) -> StoreResult<bool> {
                let result = sqlx::query("UPDATE users SET password_hash = $1 WHERE username = $2")
                    .bind(hash.as_phc())
                    .bind(username)
                    .execute(&self.writer)
                    .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn list_users(&self) -> StoreResult<Vec<User>> {
                let rows = sqlx::query("SELECT id, username, role, team, active FROM users ORDER BY username")
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.iter().map(user_from_row).collect::<Result<_, _>>()?)
            }

            async fn set_team(&self, username: &str, team: &str) -> StoreResult<bool> {
                let result = sqlx::query("UPDATE users SET team = $1 WHERE username = $2")
                    .bind(team)
                    .bind(username)
                    .execute(&self.writer)
                    .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn register_checkpoint(&self, new: &NewCheckpoint, created_by: Option<i64>) -> StoreResult<i64> {
                let mut tx = self.writer.begin_with($begin).await?;
                let now = now_ms();
                let mut endpoint_ids = Vec::with_capacity(1 + new.replica_urls.len());
                for url in std::iter::once(&new.base_url).chain(&new.replica_urls) {
                    sqlx::query("INSERT INTO endpoints (base_url, created_at) VALUES ($1, $2) ON CONFLICT (base_url) DO NOTHING")
                        .bind(url)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    if let Some(limit) = new.max_in_flight {
                        sqlx::query("UPDATE endpoints SET max_in_flight = $1 WHERE base_url = $2")
                            .bind(limit)
                            .bind(url)
                            .execute(&mut *tx)
                            .await?;
                    }
                    if let Some(key) = &new.api_key_ref {
                        // An endpoint's key is set once: a later checkpoint on the same
                        // endpoint may not swap it for every checkpoint already using it.
                        let existing: Option<Option<String>> =
                            sqlx::query_scalar("SELECT api_key_ref FROM endpoints WHERE base_url = $1")
                                .bind(url)
                                .fetch_optional(&mut *tx)
                                .await?;
                        match existing.flatten() {
                            Some(existing) if existing != *key => {
                                return Err(StoreError::Conflict(format!(
                                    "the endpoint {url} already has an API key; register this checkpoint without one to use it"
                                )));
                            }
                            Some(_) => {}
                            None => {
                                sqlx::query("UPDATE endpoints SET api_key_ref = $1 WHERE base_url = $2")
                                    .bind(key)
                                    .bind(url)
                                    .execute(&mut *tx)
                                    .await?;
                            }
                        }
                    }
                    let id: i64 = sqlx::query_scalar("SELECT id FROM endpoints WHERE base_url = $1")
                        .bind(url)
                        .fetch_one(&mut *tx)
                        .await?;
                    endpoint_ids.push(id);
                }
                let fallback_id = match &new.fallback_checkpoint {
                    Some(name) => Some(
                        sqlx::query_scalar::<_, i64>("SELECT id FROM checkpoints WHERE name = $1")
                            .bind(name)
                            .fetch_optional(&mut *tx)
                            .await?
                            .ok_or_else(|| StoreError::NotFound(format!("no checkpoint named `{name}` to fall back to")))?,
                    ),
                    None => None,
                };
                let id = sqlx::query_scalar::<_, i64>(
                    "INSERT INTO checkpoints (name, endpoint_id, model, engine_build, parallel_layout, fallback_checkpoint_id, \
                     input_usd_per_mtok, output_usd_per_mtok, created_by, created_at, training_run, training_step) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
                )
                .bind(&new.name)
                .bind(endpoint_ids[0])
                .bind(&new.model)
                .bind(&new.engine_build)
                .bind(&new.parallel_layout)
                .bind(fallback_id)
                .bind(new.prices.input_usd_per_mtok)
                .bind(new.prices.output_usd_per_mtok)
                .bind(created_by)
                .bind(now)
                .bind(&new.training_run)
                .bind(new.training_step)
                .fetch_one(&mut *tx)
                .await
                .map_err(|err| {
                    conflict_on(err, "checkpoints_name_key", &format!("a checkpoint named `{}` exists already", new.name))
                })?;
                for endpoint_id in endpoint_ids.iter().skip(1).filter(|&&replica| replica != endpoint_ids[0]) {
                    sqlx::query("INSERT INTO checkpoint_replicas (checkpoint_id, endpoint_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                        .bind(id)
                        .bind(endpoint_id)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(id)
            }

            async fn list_checkpoints(&self) -> StoreResult<Vec<Checkpoint>> {
                let rows = sqlx::query(&format!("{CHECKPOINT_SELECT} ORDER BY c.name"))
                    .fetch_all(&self.pool)
                    .await?;
                let mut checkpoints = rows.iter().map(checkpoint_from_row).collect::<Result<Vec<_>, _>>()?;
                let replicas: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT r.checkpoint_id, e.base_url FROM checkpoint_replicas r JOIN endpoints e ON e.id = r.endpoint_id ORDER BY e.base_url",
                )
                .fetch_all(&self.pool)
                .await?;
                for (checkpoint_id, url) in replicas {
                    if let Some(checkpoint) = checkpoints.iter_mut().find(|c| c.id == checkpoint_id) {
                        checkpoint.replica_urls.push(url);
                    }
                }
                Ok(checkpoints)
            }

            async fn set_checkpoint_prices(&self, checkpoint_id: i64, prices: &TokenPrices) -> StoreResult<()> {
                let updated = sqlx::query(
                    "UPDATE checkpoints SET input_usd_per_mtok = $1, output_usd_per_mtok = $2 WHERE id = $3",
                )
                .bind(prices.input_usd_per_mtok)
                .bind(prices.output_usd_per_mtok)
                .bind(checkpoint_id)
                .execute(&self.writer)
                .await?;
                if updated.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("no checkpoint with id {checkpoint_id}")));
                }
                Ok(())
            }

            async fn endpoint_limits(&self, base_url: &str) -> StoreResult<EndpointLimits> {
                let row: Option<(i64, Option<i64>)> =
                    sqlx::query_as("SELECT max_in_flight, token_budget FROM endpoints WHERE base_url = $1")
                        .bind(base_url)
                        .fetch_optional(&self.pool)
                        .await?;
                Ok(row.map_or_else(EndpointLimits::default, |(max_in_flight, token_budget)| EndpointLimits {
                    max_in_flight,
                    token_budget,
                }))
            }

            async fn store_dataset_revision(
                &self,
                name: &str,
                source_name: &str,
                parsed: &ParsedDataset,
                created_by: Option<i64>,
            ) -> StoreResult<DatasetRevision> {
                let mut tx = self.writer.begin_with($begin).await?;
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

            async fn items_after(&self, revision_id: i64, after_position: i64, limit: i64) -> StoreResult<Vec<(i64, DatasetItem)>> {
                let rows = sqlx::query(
                    "SELECT position, case_id, input, target, category FROM dataset_items \
                     WHERE revision_id = $1 AND position > $2 ORDER BY position LIMIT $3",
                )
                .bind(revision_id)
                .bind(after_position)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok((
                            row.try_get("position")?,
                            DatasetItem {
                                case_id: row.try_get("case_id")?,
                                input: row.try_get("input")?,
                                target: row.try_get("target")?,
                                category: row.try_get("category")?,
                            },
                        ))
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::from)
            }

            async fn create_eval(&self, dataset_id: i64, spec: &arbiter_domain::manifest::EvalSpec, created_by: Option<i64>) -> StoreResult<i64> {
                let mut tx = self.writer.begin_with($begin).await?;
                let inserted = sqlx::query_scalar::<_, i64>(
                    "INSERT INTO evals (name, dataset_id, prompt_template, grader, max_tokens, temperature, repetitions, seed, created_by, created_at) \
                     SELECT $1, d.id, $2, $3, $4, $5, $6, $7, $8, $9 FROM datasets d WHERE d.id = $10 RETURNING id",
                )
                .bind(&spec.name)
                .bind(&spec.prompt_template)
                .bind(serde_json::to_string(&spec.grader).expect("grader specs always serialize"))
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

            async fn get_eval(&self, id: i64) -> StoreResult<Option<EvalSummary>> {
                let row = sqlx::query(&format!("{EVAL_SELECT} WHERE e.id = $1"))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.as_ref().map(eval_from_row).transpose()?)
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
                tx.commit().await?;
                let checkpoints = self.list_checkpoints().await?;
                let checkpoint = checkpoints
                    .iter()
                    .find(|checkpoint| checkpoint.id == checkpoint_id)
                    .cloned()
                    .ok_or_else(|| StoreError::NotFound(format!("no checkpoint with id {checkpoint_id}")))?;
                let fallback = checkpoint
                    .fallback_checkpoint_id
                    .and_then(|fallback| checkpoints.iter().find(|c| c.id == fallback).cloned());
                Ok(ManifestInputs {
                    eval,
                    revision: revision_from_row(&revision)?,
                    checkpoint,
                    fallback,
                })
            }

            async fn create_run(&self, new: &NewRun<'_>) -> StoreResult<LaunchedRun> {
                let manifest = new.manifest;
                let manifest_hash = manifest.content_hash();
                let manifest_json = serde_json::to_string(manifest).expect("manifests always serialize");
                let mut tx = self.writer.begin_with($begin).await?;
                let inserted: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO runs (manifest_hash, manifest_json, eval_id, revision_id, checkpoint_id, expected_count, status, priority, team, created_by, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, 'expanding', $7, $8, $9, $10) ON CONFLICT (manifest_hash) DO NOTHING RETURNING id",
                )
                .bind(&manifest_hash)
                .bind(&manifest_json)
                .bind(manifest.eval_id)
                .bind(manifest.dataset_revision_id)
                .bind(manifest.checkpoint_id)
                .bind(manifest.expected_results() as i64)
                .bind(new.priority)
                .bind(new.team)
                .bind(new.created_by)
                .bind(now_ms())
                .fetch_optional(&mut *tx)
                .await?;
                let launched = match inserted {
                    Some(run_id) => LaunchedRun { run_id, created: true, status: "expanding".into() },
                    None => {
                        let (run_id, status): (i64, String) =
                            sqlx::query_as("SELECT id, status FROM runs WHERE manifest_hash = $1")
                                .bind(&manifest_hash)
                                .fetch_one(&mut *tx)
                                .await?;
                        LaunchedRun { run_id, created: false, status }
                    }
                };
                tx.commit().await?;
                Ok(launched)
            }

            async fn insert_identities(&self, run_id: i64, manifest: &Manifest, identities: &[NewIdentity]) -> StoreResult<()> {
                let now = now_ms();
                let mut tx = self.writer.begin_with($begin).await?;
                for chunk in identities.chunks(super::sql::IDENTITY_INSERT_BATCH) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO work_items (run_id, revision_id, case_id, checkpoint_id, repetition, state, verdict, decided_by, cost, shard, generation_key, category) ",
                    );
                    insert.push_values(chunk, |mut row, identity| {
                        let (state, verdict, decided_by) = match &identity.cached {
                            Some(hit) => (
                                "done",
                                hit.grading.verdict.map(|verdict| verdict.as_str()),
                                Some(hit.grading.decided_by_label()),
                            ),
                            None => ("queued", None, None),
                        };
                        row.push_bind(run_id)
                            .push_bind(manifest.dataset_revision_id)
                            .push_bind(identity.planned.case_id.clone())
                            .push_bind(manifest.checkpoint_id)
                            .push_bind(identity.planned.repetition)
                            .push_bind(state)
                            .push_bind(verdict)
                            .push_bind(decided_by)
                            .push_bind(identity.planned.cost)
                            .push_bind(identity.planned.shard)
                            .push_bind(identity.planned.generation_key.clone())
                            .push_bind(identity.planned.category.clone());
                    });
                    insert.push(" ON CONFLICT (run_id, revision_id, case_id, checkpoint_id, repetition) DO NOTHING RETURNING id, case_id, repetition");
                    let created: Vec<(i64, String, i64)> = insert.build_query_as().fetch_all(&mut *tx).await?;
                    // Identities answered from the cache get their generation and grade now.
                    let by_identity: std::collections::HashMap<(&str, i64), i64> = created
                        .iter()
                        .map(|(id, case_id, repetition)| ((case_id.as_str(), *repetition), *id))
                        .collect();
                    let finished: Vec<FinishedItem> = chunk
                        .iter()
                        .filter_map(|identity| {
                            let hit = identity.cached.as_ref()?;
                            let id = by_identity.get(&(identity.planned.case_id.as_str(), identity.planned.repetition))?;
                            Some(FinishedItem {
                                work_item_id: *id,
                                generation: hit.generation.clone(),
                                grading: hit.grading.clone(),
                                generation_key: None,
                                cached_from: Some(hit.source_work_item_id),
                            })
                        })
                        .collect();
                    // These identities were inserted finished; only their answers are missing.
                    let recorded = insert_results(&mut tx, &finished, now, false).await?;
                    add_done(&mut tx, run_id, recorded.inserted as i64).await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn set_run_status(&self, run_id: i64, from: &[&str], to: &str) -> StoreResult<bool> {
                let mut update = sqlx::QueryBuilder::<$db>::new("UPDATE runs SET status = ");
                update.push_bind(to);
                if to == "completed" {
                    update.push(", finished_at = ").push_bind(now_ms());
                }
                update.push(" WHERE id = ").push_bind(run_id).push(" AND status IN (");
                let mut statuses = update.separated(", ");
                for status in from {
                    statuses.push_bind(*status);
                }
                statuses.push_unseparated(")");
                let result = update.build().execute(&self.writer).await?;
                Ok(result.rows_affected() == 1)
            }

            async fn run_manifest(&self, run_id: i64) -> StoreResult<Option<Manifest>> {
                let json: Option<String> = sqlx::query_scalar("SELECT manifest_json FROM runs WHERE id = $1")
                    .bind(run_id)
                    .fetch_optional(&self.pool)
                    .await?;
                json.map(|json| serde_json::from_str(&json).map_err(|err| StoreError::Database(sqlx::Error::Decode(err.into()))))
                    .transpose()
            }

            async fn list_runs(&self) -> StoreResult<Vec<RunSummary>> {
                let rows = sqlx::query(
                    "SELECT r.id, r.eval_id, e.name AS eval_name, c.name AS checkpoint_name, r.expected_count, r.created_at, \
                     r.status, r.priority, \
                     r.done_count \
                     FROM runs r JOIN evals e ON e.id = r.eval_id JOIN checkpoints c ON c.id = r.checkpoint_id \
                     ORDER BY r.id DESC",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        let expected_count: i64 = row.try_get("expected_count")?;
                        let done_count: i64 = row.try_get("done_count")?;
                        let status: String = row.try_get("status")?;
                        Ok(RunSummary {
                            id: row.try_get("id")?,
                            priority: row.try_get("priority")?,
                            eval_id: row.try_get("eval_id")?,
                            eval_name: row.try_get("eval_name")?,
                            checkpoint_name: row.try_get("checkpoint_name")?,
                            status: displayed_status(&status, done_count, expected_count),
                            expected_count,
                            done_count,
                            created_at: row.try_get("created_at")?,
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::from)
            }

            async fn run_header(&self, run_id: i64) -> StoreResult<Option<RunProgress>> {
                let Some(run) = sqlx::query(super::sql::RUN_HEADER_SELECT)
                    .bind(run_id)
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                let mut counts = std::collections::HashMap::<(String, String), i64>::new();
                for row in self.run_tallies(run_id).await? {
                    *counts.entry((row.field, row.value)).or_default() += row.count;
                }
                let count = |field: &str, value: &str| counts.get(&(field.to_string(), value.to_string())).copied().unwrap_or(0);
                let finished_at: Option<i64> = run.try_get("finished_at")?;
                Ok(Some(RunProgress {
                    id: run.try_get("id")?,
                    eval_id: run.try_get("eval_id")?,
                    eval_name: run.try_get("eval_name")?,
                    checkpoint_name: run.try_get("checkpoint_name")?,
                    endpoint_url: run.try_get("base_url")?,
                    manifest_hash: run.try_get("manifest_hash")?,
                    dataset_revision: run.try_get("content_hash")?,
                    status: run.try_get("status")?,
                    expected: run.try_get("expected_count")?,
                    done: run.try_get("done_count")?,
                    in_flight: 0,
                    passed: count("verdict", "pass"),
                    failed: count("verdict", "fail"),
                    uncertain: count("verdict", "uncertain"),
                    errors: count("verdict", "error"),
                    last_error: None,
                    priority: run.try_get("priority")?,
                    team: run.try_get("team")?,
                    throughput_per_s: 0.0,
                    from_cache: 0,
                    outcome_mix: arbiter_domain::answer::Outcome::ALL
                        .iter()
                        .map(|o| (o.as_str().to_string(), count("outcome", o.as_str())))
                        .filter(|(_, n)| *n > 0)
                        .collect(),
                    error_mix: Vec::new(),
                    created_at: run.try_get("created_at")?,
                    time_to_results_ms: finished_at
                        .map(|at| at - run.try_get::<i64, _>("checkpoint_created_at").unwrap_or(at)),
                    finished_at,
                }))
            }

            async fn run_progress(&self, run_id: i64) -> StoreResult<Option<RunProgress>> {
                // The heading, then live counts over the run's rows on top of it.
                let Some(header) = self.run_header(run_id).await? else { return Ok(None) };
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
                let mix: Vec<(String, Option<String>, bool, i64)> = sqlx::query_as(
                    "SELECT g.outcome, g.error_category, g.from_cache, COUNT(*) FROM generations g \
                     JOIN work_items w ON w.id = g.work_item_id WHERE w.run_id = $1 GROUP BY g.outcome, g.error_category, g.from_cache",
                )
                .bind(run_id)
                .fetch_all(&self.pool)
                .await?;
                let window_ms = 60_000;
                let recent: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM generations g JOIN work_items w ON w.id = g.work_item_id \
                     WHERE g.created_at > $1 AND w.run_id = $2",
                )
                .bind(now_ms() - window_ms)
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
                let expected = header.expected;
                let done: i64 = counts.try_get("done")?;
                let mut status = header.status.clone();
                let mut finished_at = header.finished_at;
                // Completion is also derived here, so a run whose last worker died between its
                // commit and its completion check is still reported (and recorded) complete.
                if status == "running" && done == expected && self.finish_run_if_done(run_id).await? {
                    status = "completed".into();
                    finished_at = sqlx::query_scalar("SELECT finished_at FROM runs WHERE id = $1")
                        .bind(run_id)
                        .fetch_one(&self.pool)
                        .await?;
                }
                let mut outcome_mix: Vec<(String, i64)> = Vec::new();
                let mut error_mix: Vec<(String, i64)> = Vec::new();
                let mut from_cache = 0;
                for (outcome, category, cached, count) in mix {
                    add_count(&mut outcome_mix, outcome, count);
                    if let Some(category) = category {
                        add_count(&mut error_mix, category, count);
                    }
                    if cached {
                        from_cache += count;
                    }
                }
                // Completed just now (above): registration to completion, read afresh.
                let time_to_results_ms = match finished_at {
                    Some(now) if header.finished_at.is_none() => sqlx::query_scalar::<_, i64>(
                        "SELECT c.created_at FROM runs r JOIN checkpoints c ON c.id = r.checkpoint_id WHERE r.id = $1",
                    )
                    .bind(run_id)
                    .fetch_one(&self.pool)
                    .await
                    .ok()
                    .map(|registered| now - registered),
                    _ => header.time_to_results_ms,
                };
                Ok(Some(RunProgress {
                    status,
                    done,
                    in_flight: counts.try_get("in_flight")?,
                    passed: counts.try_get("passed")?,
                    failed: counts.try_get("failed")?,
                    uncertain: counts.try_get("uncertain")?,
                    errors: counts.try_get("errors")?,
                    last_error,
                    throughput_per_s: recent as f64 / (window_ms as f64 / 1000.0),
                    from_cache,
                    outcome_mix,
                    error_mix,
                    time_to_results_ms,
                    finished_at,
                    ..header
                }))
            }

            async fn finish_run_if_done(&self, run_id: i64) -> StoreResult<bool> {
                // The counter moves in the same transactions as the identities' states, so this
                // check costs the same on a million-item run as on a ten-item one.
                let mut tx = self.writer.begin_with($begin).await?;
                let result = sqlx::query(
                    "UPDATE runs SET status = 'completed', finished_at = $1 WHERE id = $2 AND status = 'running' \
                     AND done_count >= expected_count",
                )
                .bind(now_ms())
                .bind(run_id)
                .execute(&mut *tx)
                .await?;
                if result.rows_affected() == 1 {
                    // Fresh answers only (a cache hit would count its source twice), merged
                    // into the running means as weighted averages.
                    sqlx::query(
                        "INSERT INTO case_lengths (revision_id, case_id, completion_tokens, samples) \
                         SELECT w.revision_id, w.case_id, CAST(AVG(g.completion_tokens) AS DOUBLE PRECISION), COUNT(*) \
                         FROM work_items w JOIN generations g ON g.work_item_id = w.id \
                         WHERE w.run_id = $1 AND g.completion_tokens IS NOT NULL AND g.from_cache = FALSE \
                         GROUP BY w.revision_id, w.case_id \
                         ON CONFLICT (revision_id, case_id) DO UPDATE SET \
                         completion_tokens = (case_lengths.completion_tokens * case_lengths.samples \
                                              + excluded.completion_tokens * excluded.samples) \
                                             / (case_lengths.samples + excluded.samples), \
                         samples = case_lengths.samples + excluded.samples",
                    )
                    .bind(run_id)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    return Ok(true);
                }
                tx.commit().await?;
                let status: Option<String> = sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
                    .bind(run_id)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(status.as_deref() == Some("completed"))
            }

            async fn observed_completion_tokens(
                &self,
                revision_id: i64,
                case_ids: &[String],
            ) -> StoreResult<std::collections::HashMap<String, f64>> {
                let mut found = std::collections::HashMap::new();
                for chunk in case_ids.chunks(super::sql::KEY_LOOKUP_BATCH) {
                    let mut select = sqlx::QueryBuilder::<$db>::new(
                        "SELECT case_id, completion_tokens FROM case_lengths WHERE revision_id = ",
                    );
                    select.push_bind(revision_id).push(" AND case_id IN (");
                    let mut list = select.separated(", ");
                    for case_id in chunk {
                        list.push_bind(case_id.as_str());
                    }
                    list.push_unseparated(")");
                    let rows: Vec<(String, f64)> = select.build_query_as().fetch_all(&self.pool).await?;
                    found.extend(rows);
                }
                Ok(found)
            }

            async fn create_judge(&self, new: &NewJudge, created_by: Option<i64>) -> StoreResult<Judge> {
                let mut tx = self.writer.begin_with($begin).await?;
                let checkpoint: Option<String> = sqlx::query_scalar("SELECT name FROM checkpoints WHERE id = $1")
                    .bind(new.checkpoint_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(checkpoint_name) = checkpoint else {
                    return Err(StoreError::NotFound(format!("no checkpoint with id {}", new.checkpoint_id)));
                };
                let version: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) + 1 FROM judges WHERE name = $1")
                    .bind(&new.name)
                    .fetch_one(&mut *tx)
                    .await?;
                let now = now_ms();
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO judges (name, version, checkpoint_id, rubric, max_tokens, created_by, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                )
                .bind(&new.name)
                .bind(version)
                .bind(new.checkpoint_id)
                .bind(&new.rubric)
                .bind(new.max_tokens)
                .bind(created_by)
                .bind(now)
                .fetch_one(&mut *tx)
                .await
                .map_err(|err| conflict_on(err, "judges_name_version_key", "another version of this judge was saved at the same moment; try again"))?;
                tx.commit().await?;
                Ok(Judge {
                    id,
                    name: new.name.clone(),
                    version,
                    checkpoint_id: new.checkpoint_id,
                    checkpoint_name,
                    rubric: new.rubric.clone(),
                    max_tokens: new.max_tokens,
                    created_at: now,
                })
            }

            async fn list_judges(&self) -> StoreResult<Vec<Judge>> {
                let rows = sqlx::query(&format!("{JUDGE_SELECT} ORDER BY j.name, j.version DESC"))
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.iter().map(judge_from_row).collect::<Result<_, _>>()?)
            }

            async fn get_judge(&self, id: i64) -> StoreResult<Option<Judge>> {
                let row = sqlx::query(&format!("{JUDGE_SELECT} WHERE j.id = $1"))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.as_ref().map(judge_from_row).transpose()?)
            }

            async fn save_grading_policy(
                &self,
                eval_id: i64,
                policy: &TriagePolicy,
                note: &str,
                calibration_json: Option<&str>,
                created_by: Option<i64>,
            ) -> StoreResult<i64> {
                let mut tx = self.writer.begin_with($begin).await?;
                let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM evals WHERE id = $1")
                    .bind(eval_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Err(StoreError::NotFound(format!("no eval with id {eval_id}")));
                }
                for judge in [policy.cheap_judge, policy.strong_judge].into_iter().flatten() {
                    let found: Option<i64> = sqlx::query_scalar("SELECT id FROM judges WHERE id = $1")
                        .bind(judge)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if found.is_none() {
                        return Err(StoreError::NotFound(format!("no judge with id {judge}")));
                    }
                }
                let version: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) + 1 FROM grading_policies WHERE eval_id = $1")
                    .bind(eval_id)
                    .fetch_one(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO grading_policies (eval_id, version, policy_json, note, calibration_json, created_by, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(eval_id)
                .bind(version)
                .bind(serde_json::to_string(policy).expect("policies always serialize"))
                .bind(note)
                .bind(calibration_json)
                .bind(created_by)
                .bind(now_ms())
                .execute(&mut *tx)
                .await
                .map_err(|err| conflict_on(err, "grading_policies_eval_version_key", "the policy was changed at the same moment; reload and try again"))?;
                tx.commit().await?;
                Ok(version)
            }

            async fn grading_policies(&self, eval_id: i64) -> StoreResult<Vec<PolicyVersion>> {
                let rows = sqlx::query(
                    "SELECT p.eval_id, p.version, p.policy_json, p.note, p.calibration_json, u.username, p.created_at \
                     FROM grading_policies p LEFT JOIN users u ON u.id = p.created_by \
                     WHERE p.eval_id = $1 ORDER BY p.version DESC",
                )
                .bind(eval_id)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        let policy_json: String = row.try_get("policy_json")?;
                        Ok(PolicyVersion {
                            eval_id: row.try_get("eval_id")?,
                            version: row.try_get("version")?,
                            policy: serde_json::from_str(&policy_json)
                                .map_err(|err| sqlx::Error::Decode(err.into()))?,
                            note: row.try_get("note")?,
                            calibration_json: row.try_get("calibration_json")?,
                            created_by: row.try_get("username")?,
                            created_at: row.try_get("created_at")?,
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::from)
            }

            async fn cached_judge_call(&self, cache_key: &str) -> StoreResult<Option<JudgeCall>> {
                let row = sqlx::query(
                    "SELECT cache_key, output, verdict, confidence, prompt_tokens, completion_tokens, model_used \
                     FROM grade_cache WHERE cache_key = $1",
                )
                .bind(cache_key)
                .fetch_optional(&self.pool)
                .await?;
                row.map(|row| {
                    let verdict: Option<String> = row.try_get("verdict")?;
                    Ok(JudgeCall {
                        cache_key: row.try_get("cache_key")?,
                        output: row.try_get("output")?,
                        pass: verdict.map(|verdict| verdict == "pass"),
                        confidence: row.try_get("confidence")?,
                        prompt_tokens: row.try_get("prompt_tokens")?,
                        completion_tokens: row.try_get("completion_tokens")?,
                        model_used: row.try_get("model_used")?,
                    })
                })
                .transpose()
                .map_err(|err: sqlx::Error| StoreError::from(err))
            }

            async fn human_checked_judgements(&self, grader_id: &str) -> StoreResult<Vec<HumanCheckedJudgement>> {
                // From the (few) labelled items to their judge grades, never across all grades.
                let rows: Vec<(f64, String, f64, i64, i64, f64)> = sqlx::query_as(
                    "SELECT g.confidence, g.verdict, COALESCE(g.cost_usd, 0.0), h.passes, h.labels, h.sampling_rate \
                     FROM (SELECT t.work_item_id, SUM(CASE WHEN l.verdict = 'pass' THEN 1 ELSE 0 END) AS passes, \
                                  COUNT(*) AS labels, MAX(t.sampling_rate) AS sampling_rate \
                           FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                           WHERE l.state = 'standing' GROUP BY t.work_item_id) h \
                     JOIN grades g ON g.work_item_id = h.work_item_id \
                     WHERE g.grader = $1 AND g.confidence IS NOT NULL AND g.verdict IN ('pass', 'fail') \
                     ORDER BY g.id",
                )
                .bind(grader_id)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .filter(|(_, _, _, passes, labels, _)| passes * 2 != *labels)
                    .map(|(confidence, verdict, cost_usd, passes, labels, sampling_rate)| HumanCheckedJudgement {
                        confidence,
                        judge_pass: verdict == "pass",
                        human_pass: passes * 2 > labels,
                        cost_usd,
                        sampling_rate,
                    })
                    .collect())
            }

            async fn judge_usage(&self, grader_id: &str) -> StoreResult<(i64, f64)> {
                Ok(sqlx::query_as(
                    "SELECT COUNT(*), COALESCE(SUM(cost_usd), 0.0) FROM grades \
                     WHERE grader = $1 AND stage IN ('cheap_judge', 'strong_judge')",
                )
                .bind(grader_id)
                .fetch_one(&self.pool)
                .await?)
            }

            async fn run_costs(&self, run_id: i64) -> StoreResult<RunCosts> {
                let (generation_usd, generation_calls, cached_generations): (f64, i64, i64) = sqlx::query_as(
                    "SELECT COALESCE(SUM(g.cost_usd), 0.0), \
                            COALESCE(SUM(CASE WHEN g.from_cache THEN 0 ELSE 1 END), 0), \
                            COALESCE(SUM(CASE WHEN g.from_cache THEN 1 ELSE 0 END), 0) \
                     FROM generations g JOIN work_items w ON w.id = g.work_item_id WHERE w.run_id = $1",
                )
                .bind(run_id)
                .fetch_one(&self.pool)
                .await?;
                let (judging_usd, judge_grades, cached_judge_grades): (f64, i64, i64) = sqlx::query_as(
                    "SELECT COALESCE(SUM(gr.cost_usd), 0.0), COUNT(*), \
                            COALESCE(SUM(CASE WHEN gr.from_cache THEN 1 ELSE 0 END), 0) \
                     FROM grades gr JOIN work_items w ON w.id = gr.work_item_id \
                     WHERE w.run_id = $1 AND gr.stage IN ('cheap_judge', 'strong_judge')",
                )
                .bind(run_id)
                .fetch_one(&self.pool)
                .await?;
                let human_labels: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                     JOIN work_items w ON w.id = t.work_item_id WHERE w.run_id = $1",
                )
                .bind(run_id)
                .fetch_one(&self.pool)
                .await?;
                let decided_by: Vec<(String, i64)> = sqlx::query_as(
                    "SELECT COALESCE(decided_by, 'unanswered') AS stage, COUNT(*) FROM work_items \
                     WHERE run_id = $1 GROUP BY COALESCE(decided_by, 'unanswered') ORDER BY 1",
                )
                .bind(run_id)
                .fetch_all(&self.pool)
                .await?;
                Ok(RunCosts {
                    generation_usd,
                    judging_usd,
                    human_labels,
                    generation_calls,
                    cached_generations,
                    judge_grades,
                    cached_judge_grades,
                    decided_by,
                })
            }

            async fn cached_generations(&self, keys: &[String]) -> StoreResult<Vec<(String, CachedGeneration)>> {
                let mut found = Vec::new();
                for chunk in keys.chunks(super::sql::KEY_LOOKUP_BATCH) {
                    let mut select = sqlx::QueryBuilder::<$db>::new(
                        "SELECT c.generation_key, c.work_item_id AS source_work_item_id, g.outcome, g.output, g.finish_reason, \
                         g.prompt_tokens, g.completion_tokens, g.model_used \
                         FROM generation_cache c JOIN generations g ON g.work_item_id = c.work_item_id \
                         WHERE c.generation_key IN (",
                    );
                    let mut list = select.separated(", ");
                    for key in chunk {
                        list.push_bind(key.as_str());
                    }
                    list.push_unseparated(")");
                    for row in select.build().fetch_all(&self.pool).await? {
                        found.push((row.try_get("generation_key")?, cached_from_row(&row)?));
                    }
                }
                Ok(found)
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

            async fn active_runs(&self) -> StoreResult<Vec<ActiveRun>> {
                let rows: Vec<(i64, i64, String, f64)> = sqlx::query_as(
                    "SELECT r.id, r.priority, r.team, COALESCE(t.weight, 1.0) FROM runs r \
                     LEFT JOIN team_weights t ON t.team = r.team WHERE r.status = 'running' ORDER BY r.id",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, priority, team, team_weight)| ActiveRun { id, priority, team, team_weight })
                    .collect())
            }

            async fn generation_logprobs(&self, work_item_id: i64) -> StoreResult<Option<Vec<u8>>> {
                Ok(sqlx::query_scalar("SELECT logprobs FROM generation_logprobs WHERE work_item_id = $1")
                    .bind(work_item_id)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn run_tallies(&self, run_id: i64) -> StoreResult<Vec<arbiter_domain::reports::TallyRow>> {
                let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
                    "SELECT category, field, value, count FROM run_tallies WHERE run_id = $1 AND count <> 0 \
                     ORDER BY category, field, value",
                )
                .bind(run_id)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(category, field, value, count)| arbiter_domain::reports::TallyRow { category, field, value, count })
                    .collect())
            }

            async fn stored_snapshot(&self, run_id: i64) -> StoreResult<Option<$crate::store::StoredSnapshot>> {
                let row: Option<(String, String, Vec<u8>, i64)> = sqlx::query_as(
                    "SELECT version, identity_hash, data, build_ms FROM run_snapshots WHERE run_id = $1",
                )
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(|(version, identity_hash, data, build_ms)| $crate::store::StoredSnapshot { version, identity_hash, data, build_ms }))
            }

            async fn save_snapshot(&self, run_id: i64, item_count: i64, snapshot: &$crate::store::StoredSnapshot) -> StoreResult<()> {
                sqlx::query(
                    "INSERT INTO run_snapshots (run_id, version, identity_hash, item_count, data, built_at, build_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (run_id) DO UPDATE SET \
                     version = excluded.version, identity_hash = excluded.identity_hash, item_count = excluded.item_count, \
                     data = excluded.data, built_at = excluded.built_at, build_ms = excluded.build_ms",
                )
                .bind(run_id)
                .bind(&snapshot.version)
                .bind(&snapshot.identity_hash)
                .bind(item_count)
                .bind(&snapshot.data)
                .bind(now_ms())
                .bind(snapshot.build_ms)
                .execute(&self.writer)
                .await?;
                Ok(())
            }

            async fn record_promotion_decision(&self, decision: &arbiter_domain::reports::decision::NewPromotionDecision) -> StoreResult<i64> {
                Ok(sqlx::query_scalar(
                    "INSERT INTO promotion_decisions (baseline_run_id, candidate_run_id, decision, note, summary_json, decided_by, decided_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                )
                .bind(decision.baseline_run_id)
                .bind(decision.candidate_run_id)
                .bind(if decision.promote { "promote" } else { "reject" })
                .bind(&decision.note)
                .bind(&decision.summary_json)
                .bind(decision.decided_by)
                .bind(now_ms())
                .fetch_one(&self.writer)
                .await?)
            }

            async fn promotion_decisions(&self, run_id: i64) -> StoreResult<Vec<arbiter_domain::reports::decision::PromotionDecisionRecord>> {
                let rows = sqlx::query(
                    "SELECT d.id, d.baseline_run_id, d.candidate_run_id, cb.name AS baseline_checkpoint, \
                     cc.name AS candidate_checkpoint, d.decision, d.note, d.summary_json, u.username, d.decided_at \
                     FROM promotion_decisions d \
                     JOIN runs rb ON rb.id = d.baseline_run_id JOIN checkpoints cb ON cb.id = rb.checkpoint_id \
                     JOIN runs rc ON rc.id = d.candidate_run_id JOIN checkpoints cc ON cc.id = rc.checkpoint_id \
                     LEFT JOIN users u ON u.id = d.decided_by \
                     WHERE d.baseline_run_id = $1 OR d.candidate_run_id = $1 ORDER BY d.id DESC",
                )
                .bind(run_id)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(arbiter_domain::reports::decision::PromotionDecisionRecord {
                            id: row.try_get("id")?,
                            baseline_run_id: row.try_get("baseline_run_id")?,
                            candidate_run_id: row.try_get("candidate_run_id")?,
                            baseline_checkpoint: row.try_get("baseline_checkpoint")?,
                            candidate_checkpoint: row.try_get("candidate_checkpoint")?,
                            decision: row.try_get("decision")?,
                            note: row.try_get("note")?,
                            summary_json: row.try_get("summary_json")?,
                            decided_by: row.try_get("username")?,
                            decided_at: row.try_get("decided_at")?,
                        })
                    })
                    .collect()
            }

            async fn trend_runs(&self, eval_id: i64, training_run: &str) -> StoreResult<Vec<arbiter_domain::reports::trend::TrendRun>> {
                let rows: Vec<(i64, i64, String, Option<i64>)> = sqlx::query_as(
                    "SELECT r.id, c.id, c.name, c.training_step FROM checkpoints c \
                     JOIN runs r ON r.id = (SELECT MAX(x.id) FROM runs x \
                         WHERE x.eval_id = $1 AND x.checkpoint_id = c.id AND x.status <> 'cancelled') \
                     WHERE ($2 = '' OR c.training_run = $2) \
                     ORDER BY CASE WHEN c.training_step IS NULL THEN 1 ELSE 0 END, c.training_step, c.created_at, c.id",
                )
                .bind(eval_id)
                .bind(training_run)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(run_id, checkpoint_id, checkpoint_name, training_step)| arbiter_domain::reports::trend::TrendRun {
                        run_id,
                        checkpoint_id,
                        checkpoint_name,
                        training_step,
                    })
                    .collect())
            }

            async fn training_runs(&self) -> StoreResult<Vec<String>> {
                Ok(sqlx::query_scalar(
                    "SELECT DISTINCT training_run FROM checkpoints WHERE training_run <> '' ORDER BY training_run",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn save_trend_watch(&self, watch: &arbiter_domain::reports::trend::TrendWatch, created_by: Option<i64>) -> StoreResult<()> {
                sqlx::query(
                    "INSERT INTO trend_watches (eval_id, training_run, policy, pinned_checkpoint_id, created_by, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (eval_id, training_run) DO UPDATE SET \
                     policy = excluded.policy, pinned_checkpoint_id = excluded.pinned_checkpoint_id, \
                     created_by = excluded.created_by, created_at = excluded.created_at",
                )
                .bind(watch.eval_id)
                .bind(&watch.training_run)
                .bind(&watch.policy)
                .bind(watch.pinned_checkpoint_id)
                .bind(created_by)
                .bind(now_ms())
                .execute(&self.writer)
                .await
                .map_err(|err| match err {
                    sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
                        StoreError::NotFound("no such eval or pinned checkpoint".into())
                    }
                    other => other.into(),
                })?;
                Ok(())
            }

            async fn delete_trend_watch(&self, eval_id: i64, training_run: &str) -> StoreResult<()> {
                sqlx::query("DELETE FROM trend_watches WHERE eval_id = $1 AND training_run = $2")
                    .bind(eval_id)
                    .bind(training_run)
                    .execute(&self.writer)
                    .await?;
                Ok(())
            }

            async fn trend_watches(&self) -> StoreResult<Vec<arbiter_domain::reports::trend::TrendWatch>> {
                let rows: Vec<(i64, String, String, String, Option<i64>)> = sqlx::query_as(
                    "SELECT w.eval_id, e.name, w.training_run, w.policy, w.pinned_checkpoint_id \
                     FROM trend_watches w JOIN evals e ON e.id = w.eval_id ORDER BY e.name, w.training_run",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(eval_id, eval_name, training_run, policy, pinned_checkpoint_id)| arbiter_domain::reports::trend::TrendWatch {
                        eval_id,
                        eval_name,
                        training_run,
                        policy,
                        pinned_checkpoint_id,
                    })
                    .collect())
            }

            async fn runs_needing_snapshots(&self, limit: i64) -> StoreResult<Vec<i64>> {
                Ok(sqlx::query_scalar(
                    "SELECT r.id FROM runs r LEFT JOIN run_snapshots s ON s.run_id = r.id \
                     WHERE r.status = 'completed' AND (s.run_id IS NULL OR s.built_at < r.finished_at) \
                     ORDER BY r.finished_at LIMIT $1",
                )
                .bind(limit)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn scan_run(
                &self,
                run_id: i64,
                sink: &mut (dyn FnMut(arbiter_domain::reports::snapshot::ScanRow) + Send),
            ) -> StoreResult<()> {
                use futures::TryStreamExt;
                // Identity order is id order: a run's identities are inserted in expansion order.
                let mut rows = sqlx::query(
                    "SELECT w.id, w.case_id, w.repetition, w.revision_id, w.category, w.verdict, \
                     g.outcome, g.model_used, g.fallback_used, g.latency_ms \
                     FROM work_items w LEFT JOIN generations g ON g.work_item_id = w.id \
                     WHERE w.run_id = $1 ORDER BY w.id",
                )
                .bind(run_id)
                .fetch(&self.pool);
                while let Some(row) = rows.try_next().await? {
                    sink(arbiter_domain::reports::snapshot::ScanRow {
                        work_item_id: row.try_get("id")?,
                        case_id: row.try_get("case_id")?,
                        repetition: row.try_get("repetition")?,
                        revision_id: row.try_get("revision_id")?,
                        category: row.try_get("category")?,
                        verdict: row.try_get("verdict")?,
                        outcome: row.try_get("outcome")?,
                        model_used: row.try_get("model_used")?,
                        fallback_used: row.try_get::<Option<bool>, _>("fallback_used")?.unwrap_or(false),
                        latency_ms: row.try_get("latency_ms")?,
                    });
                }
                Ok(())
            }

            async fn run_graders(&self, run_id: i64) -> StoreResult<Vec<String>> {
                Ok(sqlx::query_scalar(
                    "SELECT grader FROM run_graders WHERE run_id = $1 AND count > 0 ORDER BY grader",
                )
                .bind(run_id)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn export_rows(&self, run_id: i64, after_id: i64, limit: i64) -> StoreResult<Vec<$crate::store::ExportRow>> {
                let rows = sqlx::query(
                    "SELECT w.run_id, w.id, w.case_id, w.repetition, w.category, c.name AS checkpoint, i.input, i.target, \
                     w.verdict, w.decided_by, g.outcome, g.output, g.finish_reason, g.error, g.error_category, g.model_used, \
                     g.fallback_used, g.from_cache, g.latency_ms, g.attempts, g.prompt_tokens, g.completion_tokens, \
                     g.cost_usd, g.created_at AS answered_at \
                     FROM work_items w JOIN checkpoints c ON c.id = w.checkpoint_id \
                     JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                     LEFT JOIN generations g ON g.work_item_id = w.id \
                     WHERE w.run_id = $1 AND w.id > $2 ORDER BY w.id LIMIT $3",
                )
                .bind(run_id)
                .bind(after_id)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok($crate::store::ExportRow {
                            run_id: row.try_get("run_id")?,
                            work_item_id: row.try_get("id")?,
                            case_id: row.try_get("case_id")?,
                            repetition: row.try_get("repetition")?,
                            category: row.try_get("category")?,
                            checkpoint: row.try_get("checkpoint")?,
                            input: row.try_get("input")?,
                            target: row.try_get("target")?,
                            verdict: row.try_get::<Option<String>, _>("verdict")?.unwrap_or_default(),
                            decided_by: row.try_get::<Option<String>, _>("decided_by")?.unwrap_or_default(),
                            outcome: row.try_get::<Option<String>, _>("outcome")?.unwrap_or_default(),
                            output: row.try_get::<Option<String>, _>("output")?.unwrap_or_default(),
                            finish_reason: row.try_get("finish_reason")?,
                            error: row.try_get("error")?,
                            error_category: row.try_get("error_category")?,
                            model_used: row.try_get("model_used")?,
                            fallback_used: row.try_get::<Option<bool>, _>("fallback_used")?.unwrap_or(false),
                            from_cache: row.try_get::<Option<bool>, _>("from_cache")?.unwrap_or(false),
                            latency_ms: row.try_get("latency_ms")?,
                            attempts: row.try_get("attempts")?,
                            prompt_tokens: row.try_get("prompt_tokens")?,
                            completion_tokens: row.try_get("completion_tokens")?,
                            cost_usd: row.try_get("cost_usd")?,
                            answered_at: row.try_get("answered_at")?,
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::from)
            }

            async fn diff_sides(&self, work_item_ids: &[i64]) -> StoreResult<Vec<arbiter_domain::reports::diff::DiffSide>> {
                if work_item_ids.is_empty() {
                    return Ok(Vec::new());
                }
                let mut select = sqlx::QueryBuilder::<$db>::new(
                    "SELECT w.id, w.case_id, w.repetition, w.category, w.verdict, w.decided_by, i.input, i.target, \
                     g.output, g.outcome, g.error, g.model_used, g.latency_ms, \
                     COALESCE(g.source_work_item_id, g.work_item_id) AS logprobs_id \
                     FROM work_items w JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                     LEFT JOIN generations g ON g.work_item_id = w.id WHERE w.id IN (",
                );
                let mut ids = select.separated(", ");
                for id in work_item_ids {
                    ids.push_bind(*id);
                }
                ids.push_unseparated(")");
                let rows = select.build().fetch_all(&self.pool).await?;
                let mut sides = Vec::with_capacity(rows.len());
                for row in rows {
                    sides.push(arbiter_domain::reports::diff::DiffSide {
                        work_item_id: row.try_get("id")?,
                        case_id: row.try_get("case_id")?,
                        repetition: row.try_get("repetition")?,
                        category: row.try_get("category")?,
                        verdict: row.try_get::<Option<String>, _>("verdict")?.unwrap_or_else(|| "pending".into()),
                        decided_by: row.try_get::<Option<String>, _>("decided_by")?.unwrap_or_default(),
                        input: row.try_get("input")?,
                        target: row.try_get("target")?,
                        output: row.try_get::<Option<String>, _>("output")?.unwrap_or_default(),
                        outcome: row.try_get::<Option<String>, _>("outcome")?.unwrap_or_else(|| "none".into()),
                        error: row.try_get("error")?,
                        model_used: row.try_get("model_used")?,
                        latency_ms: row.try_get("latency_ms")?,
                        logprobs_id: row.try_get("logprobs_id")?,
                        grades: Vec::new(),
                        labels: Vec::new(),
                    });
                }
                // Every grade and human label of these items, oldest first.
                let mut grades = sqlx::QueryBuilder::<$db>::new(
                    "SELECT work_item_id, stage, grader, verdict, reason, confidence FROM grades WHERE work_item_id IN (",
                );
                let mut ids = grades.separated(", ");
                for id in work_item_ids {
                    ids.push_bind(*id);
                }
                ids.push_unseparated(") ORDER BY id");
                for row in grades.build().fetch_all(&self.pool).await? {
                    let id: i64 = row.try_get("work_item_id")?;
                    if let Some(side) = sides.iter_mut().find(|side| side.work_item_id == id) {
                        side.grades.push(arbiter_domain::reports::diff::DiffGrade {
                            stage: row.try_get("stage")?,
                            grader: row.try_get("grader")?,
                            verdict: row.try_get("verdict")?,
                            reason: row.try_get("reason")?,
                            confidence: row.try_get("confidence")?,
                        });
                    }
                }
                let mut labels = sqlx::QueryBuilder::<$db>::new(
                    "SELECT t.work_item_id, u.username, l.verdict, l.rationale FROM labels l \
                     JOIN annotation_tasks t ON t.id = l.task_id JOIN users u ON u.id = l.annotator_id \
                     WHERE t.work_item_id IN (",
                );
                let mut ids = labels.separated(", ");
                for id in work_item_ids {
                    ids.push_bind(*id);
                }
                ids.push_unseparated(") ORDER BY l.id");
                for row in labels.build().fetch_all(&self.pool).await? {
                    let id: i64 = row.try_get("work_item_id")?;
                    if let Some(side) = sides.iter_mut().find(|side| side.work_item_id == id) {
                        let username: String = row.try_get("username")?;
                        let verdict: String = row.try_get("verdict")?;
                        let rationale: Option<String> = row.try_get("rationale")?;
                        side.labels.push(format!(
                            "{username}: {verdict}{}",
                            rationale.filter(|r| !r.is_empty()).map(|r| format!(" — {r}")).unwrap_or_default()
                        ));
                    }
                }
                Ok(sides)
            }

            async fn set_team_weight(&self, team: &str, weight: f64) -> StoreResult<()> {
                sqlx::query(
                    "INSERT INTO team_weights (team, weight) VALUES ($1, $2) \
                     ON CONFLICT (team) DO UPDATE SET weight = excluded.weight",
                )
                .bind(team)
                .bind(weight)
                .execute(&self.writer)
                .await?;
                Ok(())
            }

            async fn claim_jobs(
                &self,
                worker: &str,
                run_id: i64,
                limit: i64,
                lease_ms: i64,
                longest_first: bool,
            ) -> StoreResult<Vec<ClaimedJob>> {
                let now = now_ms();
                // Longest expected first, so the long tail overlaps the bulk.
                let order = if longest_first { "cost DESC, id" } else { "id" };
                let claim = format!(
                    "UPDATE work_items SET state = 'leased', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1 \
                     WHERE id IN (SELECT id FROM work_items WHERE run_id = $3 AND state = 'queued' \
                                  AND EXISTS (SELECT 1 FROM runs WHERE id = $3 AND status = 'running') \
                                  ORDER BY {order} LIMIT $4 {}) RETURNING id",
                    $skip_locked
                );
                // One autocommit statement takes the lease; the identities' inputs are then read
                // on a reader connection (they never change, so no transaction spans both),
                // leaving SQLite's single writer free for commits meanwhile.
                let ids: Vec<i64> = sqlx::query_scalar(&claim)
                    .bind(worker)
                    .bind(now + lease_ms)
                    .bind(run_id)
                    .bind(limit)
                    .fetch_all(&self.writer)
                    .await?;
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let mut select = sqlx::QueryBuilder::<$db>::new(
                    "SELECT w.id, w.run_id, w.case_id, w.repetition, w.cost, w.attempts, w.generation_key, i.input, i.target, \
                     c.work_item_id AS source_work_item_id, g.outcome, g.output, g.finish_reason, g.prompt_tokens, \
                     g.completion_tokens, g.model_used \
                     FROM work_items w JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                     LEFT JOIN generation_cache c ON c.generation_key = w.generation_key \
                     LEFT JOIN generations g ON g.work_item_id = c.work_item_id WHERE w.id IN (",
                );
                let mut list = select.separated(", ");
                for id in &ids {
                    list.push_bind(*id);
                }
                list.push_unseparated(") ORDER BY w.cost DESC, w.id");
                let rows = select.build().fetch_all(&self.pool).await?;
                rows.iter()
                    .map(|row| {
                        let cached_outcome: Option<String> = row.try_get("outcome")?;
                        Ok(ClaimedJob {
                            work_item_id: row.try_get("id")?,
                            run_id: row.try_get("run_id")?,
                            case_id: row.try_get("case_id")?,
                            repetition: row.try_get("repetition")?,
                            input: row.try_get("input")?,
                            target: row.try_get("target")?,
                            cost: row.try_get("cost")?,
                            claims: row.try_get("attempts")?,
                            generation_key: row.try_get("generation_key")?,
                            cached: match cached_outcome {
                                Some(_) => Some(cached_from_row(row)?),
                                None => None,
                            },
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::from)
            }

            async fn claim_work(&self, worker: &str, limit: i64, lease_ms: i64) -> StoreResult<Vec<i64>> {
                let now = now_ms();
                // The run's status is read in a subquery, not a join: on PostgreSQL a joined
                // `FOR UPDATE SKIP LOCKED` would lock the run's row too, and every concurrent
                // claim would then skip the whole run and come back empty.
                let mut tx = self.writer.begin_with($begin).await?;
                let ids: Vec<i64> = sqlx::query_scalar(concat!(
                    "UPDATE work_items SET state = 'leased', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1 \
                     WHERE id IN (SELECT w.id FROM work_items w \
                                  WHERE w.state = 'queued' \
                                  AND EXISTS (SELECT 1 FROM runs r WHERE r.id = w.run_id AND r.status = 'running') \
                                  ORDER BY w.id LIMIT $3 ",
                    $skip_locked,
                    ") RETURNING id"
                ))
                .bind(worker)
                .bind(now + lease_ms)
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
                    grader: manifest.eval.grader.id_version().to_string(),
                    max_tokens: i64::from(manifest.eval.generation.max_tokens),
                    temperature: manifest.eval.generation.temperature,
                    seed: manifest.eval.generation.seed as i64,
                    base_url: manifest.endpoint_urls.first().cloned().unwrap_or_default(),
                    model: manifest.served_model,
                })
            }

            async fn record_results(&self, finished: &[FinishedItem]) -> StoreResult<RecordOutcome> {
                if finished.is_empty() {
                    return Ok(RecordOutcome::default());
                }
                let mut tx = self.writer.begin_with($begin).await?;
                let mut outcome = RecordOutcome::default();
                for chunk in finished.chunks(super::sql::RESULT_INSERT_BATCH) {
                    let recorded = insert_results(&mut tx, chunk, now_ms(), true).await?;
                    outcome.inserted += recorded.inserted;
                    for run in recorded.runs {
                        if !outcome.runs.contains(&run) {
                            outcome.runs.push(run);
                        }
                    }
                }
                tx.commit().await?;
                Ok(outcome)
            }

            async fn heartbeat(&self, worker: &str, in_flight: i64, lease_ms: i64, live_within_ms: i64) -> StoreResult<i64> {
                let now = now_ms();
                let mut tx = self.writer.begin_with($begin).await?;
                sqlx::query("UPDATE work_items SET lease_expires_at = $1 WHERE state = 'leased' AND lease_owner = $2")
                    .bind(now + lease_ms)
                    .bind(worker)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO workers (name, started_at, heartbeat_at, in_flight) VALUES ($1, $2, $2, $3) \
                     ON CONFLICT (name) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, in_flight = excluded.in_flight",
                )
                .bind(worker)
                .bind(now)
                .bind(in_flight)
                .execute(&mut *tx)
                .await?;
                let live: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM workers WHERE heartbeat_at > $1")
                    .bind(now - live_within_ms)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(live.max(1))
            }

            async fn reap_expired_leases(&self) -> StoreResult<u64> {
                let now = now_ms();
                let reaped = sqlx::query(
                    "UPDATE work_items SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL \
                     WHERE state = 'leased' AND lease_expires_at < $1",
                )
                .bind(now)
                .execute(&self.writer)
                .await?;
                // Workers silent for an hour are gone; their rows only clutter the health page.
                sqlx::query("DELETE FROM workers WHERE heartbeat_at < $1")
                    .bind(now - 3_600_000)
                    .execute(&self.writer)
                    .await?;
                Ok(reaped.rows_affected())
            }

            async fn release_lease(&self, worker: &str, work_item_id: i64) -> StoreResult<bool> {
                let released = sqlx::query(
                    "UPDATE work_items SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL \
                     WHERE id = $1 AND lease_owner = $2 AND state = 'leased'",
                )
                .bind(work_item_id)
                .bind(worker)
                .execute(&self.writer)
                .await?;
                Ok(released.rows_affected() == 1)
            }

            async fn deregister_worker(&self, worker: &str) -> StoreResult<()> {
                sqlx::query("DELETE FROM workers WHERE name = $1")
                    .bind(worker)
                    .execute(&self.writer)
                    .await?;
                Ok(())
            }

            async fn next_annotation_task(&self, user_id: i64, lease_ms: i64) -> StoreResult<Option<AnnotationTask>> {
                claim_task(&self.writer, user_id, lease_ms).await
            }

            async fn submit_label(
                &self,
                task_id: i64,
                user_id: i64,
                pass: bool,
                rationale: &str,
            ) -> StoreResult<Option<TrainingFeedback>> {
                submit_task_label(&self.writer, task_id, user_id, pass, rationale).await
            }

            async fn skip_task(&self, task_id: i64, user_id: i64) -> StoreResult<()> {
                skip_leased_task(&self.writer, task_id, user_id).await
            }

            async fn annotation_queue_counts(&self) -> StoreResult<QueueCounts> {
                queue_counts(&self.pool).await
            }

            async fn next_review(&self, reviewer_id: i64) -> StoreResult<Option<ReviewItem>> {
                next_pending_review(&self.pool, reviewer_id).await
            }

            async fn review_label(
                &self,
                label_id: i64,
                reviewer_id: i64,
                decision: ReviewDecision,
                reason: &str,
            ) -> StoreResult<()> {
                decide_review(&self.writer, label_id, reviewer_id, decision, reason).await
            }

            async fn raters(&self) -> StoreResult<Vec<RaterRecord>> {
                rater_records(&self.pool).await
            }

            async fn update_rater(&self, user_id: i64, update: &RaterUpdate) -> StoreResult<()> {
                update_rater(&self.writer, user_id, update).await
            }

            async fn setting(&self, name: &str) -> StoreResult<Option<String>> {
                Ok(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
                    .bind(name)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn set_setting(&self, name: &str, value: &str) -> StoreResult<()> {
                sqlx::query(
                    "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                )
                .bind(name)
                .bind(value)
                .execute(&self.writer)
                .await?;
                Ok(())
            }

            async fn run_labels(&self, run_id: i64) -> StoreResult<Vec<RunLabel>> {
                labels_of_run(&self.pool, run_id).await
            }

            async fn invite_rater(&self, new: &arbiter_domain::annotation::pool::NewRater, hash: &PasswordHash) -> StoreResult<i64> {
                insert_rater(&self.writer, new, hash).await
            }

            async fn check_review(
                &self,
                review_id: i64,
                checker_id: i64,
                overturn_to: Option<bool>,
                reason: &str,
            ) -> StoreResult<()> {
                decide_check(&self.writer, review_id, checker_id, overturn_to, reason).await
            }

            async fn create_gold(&self, task_id: i64, answer_pass: bool, note: &str, created_by: i64) -> StoreResult<i64> {
                insert_gold(&self.writer, task_id, answer_pass, note, created_by).await
            }

            async fn retire_gold(&self, gold_id: i64) -> StoreResult<()> {
                retire_gold_item(&self.writer, gold_id).await
            }

            async fn gold_items(&self) -> StoreResult<Vec<arbiter_domain::annotation::gold::GoldItem>> {
                list_gold(&self.pool).await
            }

            async fn gold_candidates(&self, limit: i64) -> StoreResult<Vec<arbiter_domain::annotation::gold::GoldCandidate>> {
                list_gold_candidates(&self.pool, limit).await
            }

            async fn scan_open_tasks(
                &self,
                visit: &mut (dyn FnMut(arbiter_domain::annotation::sla::OpenTask) + Send),
            ) -> StoreResult<()> {
                visit_open_tasks(&self.pool, visit).await
            }

            async fn labelling_flow(&self, now: i64) -> StoreResult<arbiter_domain::annotation::sla::LabellingFlow> {
                flow_of_labels(&self.pool, now).await
            }

            async fn sla_days(&self, since: i64) -> StoreResult<Vec<arbiter_domain::annotation::sla::SlaDay>> {
                days_of_sla(&self.pool, since).await
            }

            async fn escalate_tasks(&self, task_ids: &[i64], now: i64) -> StoreResult<u64> {
                raise_priority(&self.writer, task_ids, now).await
            }

            async fn queue_labels(&self, since: i64) -> StoreResult<Vec<arbiter_domain::annotation::task::QueueLabel>> {
                labels_by_queue(&self.pool, since).await
            }

            async fn raise_alert(&self, kind: &str, subject: &str, message: &str, now: i64) -> StoreResult<bool> {
                open_alert(&self.writer, kind, subject, message, now).await
            }

            async fn resolve_alerts(&self, kind: &str, still_open: &[String], now: i64) -> StoreResult<u64> {
                close_alerts(&self.writer, kind, still_open, now).await
            }

            async fn claim_alert_email(&self, alert_id: i64, now: i64) -> StoreResult<bool> {
                let claimed = sqlx::query("UPDATE alerts SET emailed_at = $1 WHERE id = $2 AND emailed_at IS NULL")
                    .bind(now)
                    .bind(alert_id)
                    .execute(&self.writer)
                    .await?
                    .rows_affected();
                Ok(claimed == 1)
            }

            async fn release_alert_email(&self, alert_id: i64) -> StoreResult<()> {
                sqlx::query("UPDATE alerts SET emailed_at = NULL WHERE id = $1")
                    .bind(alert_id)
                    .execute(&self.writer)
                    .await?;
                Ok(())
            }

            async fn set_settings(&self, settings: &[(&str, String)]) -> StoreResult<()> {
                let mut tx = self.writer.begin_with($begin).await?;
                for (name, value) in settings {
                    sqlx::query(
                        "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    )
                    .bind(*name)
                    .bind(value)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn alerts(&self, resolved_limit: i64) -> StoreResult<Vec<arbiter_domain::health::Alert>> {
                list_alerts(&self.pool, resolved_limit).await
            }

            async fn lead_emails(&self) -> StoreResult<Vec<String>> {
                Ok(sqlx::query_scalar(
                    "SELECT email FROM users WHERE active AND role IN ('lead', 'admin') \
                     AND email IS NOT NULL AND email <> '' ORDER BY id",
                )
                .fetch_all(&self.pool)
                .await?)
            }
        }

        /// The run status shown to people: a running run whose identities are all finished is
        /// complete even before a worker has recorded it.
        fn displayed_status(status: &str, done: i64, expected: i64) -> String {
            if status == "running" && done >= expected {
                "completed".to_string()
            } else {
                status.to_string()
            }
        }

        fn add_count(counts: &mut Vec<(String, i64)>, key: String, count: i64) {
            match counts.iter_mut().find(|(existing, _)| *existing == key) {
                Some((_, total)) => *total += count,
                None => counts.push((key, count)),
            }
        }

        fn cached_from_row(row: &<$db as sqlx::Database>::Row) -> Result<CachedGeneration, sqlx::Error> {
            let outcome: String = row.try_get("outcome")?;
            Ok(CachedGeneration {
                source_work_item_id: row.try_get("source_work_item_id")?,
                outcome: Outcome::parse(&outcome)
                    .ok_or_else(|| sqlx::Error::Decode(format!("unknown outcome `{outcome}`").into()))?,
                output: row.try_get("output")?,
                finish_reason: row.try_get("finish_reason")?,
                prompt_tokens: row.try_get("prompt_tokens")?,
                completion_tokens: row.try_get("completion_tokens")?,
                model_used: row.try_get("model_used")?,
            })
        }

        /// Counts `count` more identities of `run_id` as done, in the transaction that finished
        /// them (`runs.done_count` must never drift from the identities' states).
        async fn add_done(
            tx: &mut sqlx::Transaction<'_, $db>,
            run_id: i64,
            count: i64,
        ) -> Result<(), sqlx::Error> {
            if count > 0 {
                sqlx::query("UPDATE runs SET done_count = done_count + $1 WHERE id = $2")
                    .bind(count)
                    .bind(run_id)
                    .execute(&mut **tx)
                    .await?;
            }
            Ok(())
        }

        /// Writes finished identities inside `tx`: generations first (the unique key drops
        /// identities that already have one), then grades, work item states, annotation tasks
        /// and cache entries for the ones actually recorded.
        async fn insert_results(
            tx: &mut sqlx::Transaction<'_, $db>,
            finished: &[FinishedItem],
            now: i64,
            finish_work_items: bool,
        ) -> Result<RecordOutcome, sqlx::Error> {
            if finished.is_empty() {
                return Ok(RecordOutcome::default());
            }
            let mut insert = sqlx::QueryBuilder::<$db>::new(
                "INSERT INTO generations (work_item_id, outcome, output, finish_reason, error, error_category, attempt_log, \
                 served_by, model_used, fallback_used, from_cache, source_work_item_id, latency_ms, attempts, prompt_tokens, \
                 completion_tokens, cost_usd, created_at) ",
            );
            insert.push_values(finished, |mut row, item| {
                let generation = &item.generation;
                row.push_bind(item.work_item_id)
                    .push_bind(generation.outcome.as_str())
                    .push_bind(generation.output.as_str())
                    .push_bind(generation.finish_reason.as_deref())
                    .push_bind(generation.error.as_deref())
                    .push_bind(generation.error_category.map(|category| category.as_str()))
                    .push_bind(generation.attempt_log.as_deref())
                    .push_bind(generation.served_by.as_deref())
                    .push_bind(generation.model_used.as_deref())
                    .push_bind(generation.fallback_used)
                    .push_bind(item.cached_from.is_some())
                    .push_bind(item.cached_from)
                    .push_bind(generation.latency_ms)
                    .push_bind(generation.attempts)
                    .push_bind(generation.prompt_tokens)
                    .push_bind(generation.completion_tokens)
                    .push_bind(generation.cost_usd)
                    .push_bind(now);
            });
            insert.push(" ON CONFLICT (work_item_id) DO NOTHING RETURNING work_item_id");
            let inserted: std::collections::HashSet<i64> =
                insert.build_query_scalar().fetch_all(&mut **tx).await?.into_iter().collect();
            let recorded: Vec<&FinishedItem> =
                finished.iter().filter(|item| inserted.contains(&item.work_item_id)).collect();
            if recorded.is_empty() {
                return Ok(RecordOutcome::default());
            }

            let with_logprobs: Vec<(i64, &[u8])> = recorded
                .iter()
                .filter_map(|item| item.generation.logprobs.as_deref().map(|data| (item.work_item_id, data)))
                .collect();
            for chunk in with_logprobs.chunks(super::sql::RESULT_INSERT_BATCH) {
                let mut logprobs = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO generation_logprobs (work_item_id, logprobs) ",
                );
                logprobs.push_values(chunk, |mut row, (work_item_id, data)| {
                    row.push_bind(*work_item_id).push_bind(*data);
                });
                logprobs.build().execute(&mut **tx).await?;
            }

            let grades: Vec<(i64, &arbiter_domain::grading::record::GradeRecord)> = recorded
                .iter()
                .flat_map(|item| item.grading.grades.iter().map(|grade| (item.work_item_id, grade)))
                .collect();
            for chunk in grades.chunks(super::sql::GRADE_INSERT_BATCH) {
                let mut insert = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO grades (work_item_id, grader, verdict, extracted_answer, reason, stage, confidence, \
                     agreement, cost_usd, prompt_tokens, completion_tokens, latency_ms, model_used, fallback_used, \
                     from_cache, created_at) ",
                );
                insert.push_values(chunk, |mut row, (work_item_id, record)| {
                    row.push_bind(*work_item_id)
                        .push_bind(record.grade.grader.as_str())
                        .push_bind(record.grade.verdict.as_str())
                        .push_bind(record.grade.extracted_answer.as_deref())
                        .push_bind(record.grade.reason.as_str())
                        .push_bind(record.stage.as_str())
                        .push_bind(record.confidence)
                        .push_bind(record.agreement)
                        .push_bind(record.cost_usd)
                        .push_bind(record.prompt_tokens)
                        .push_bind(record.completion_tokens)
                        .push_bind(record.latency_ms)
                        .push_bind(record.model_used.as_deref())
                        .push_bind(record.fallback_used)
                        .push_bind(record.from_cache)
                        .push_bind(now);
                });
                insert.build().execute(&mut **tx).await?;
            }

            // One statement finishes every identity with its verdict (errors have none).
            let mut done_per_run: Vec<(i64, i64)> = Vec::new();
            if finish_work_items {
                let mut update = sqlx::QueryBuilder::<$db>::new(
                    "UPDATE work_items SET state = 'done', lease_owner = NULL, lease_expires_at = NULL, \
                     verdict = v.column2, decided_by = v.column3 FROM (",
                );
                update.push_values(&recorded, |mut row, item| {
                    row.push_bind(item.work_item_id)
                        .push_bind(item.grading.verdict.map_or("error", |verdict| verdict.as_str()))
                        .push_bind(item.grading.decided_by_label());
                });
                update.push(") AS v WHERE work_items.id = v.column1 RETURNING work_items.run_id");
                for run in update.build_query_scalar::<i64>().fetch_all(&mut **tx).await? {
                    match done_per_run.iter_mut().find(|(id, _)| *id == run) {
                        Some((_, count)) => *count += 1,
                        None => done_per_run.push((run, 1)),
                    }
                }
            }
            for (run, count) in &done_per_run {
                add_done(tx, *run, *count).await?;
            }
            let runs: Vec<i64> = done_per_run.iter().map(|(run, _)| *run).collect();

            let for_humans: Vec<(i64, &arbiter_domain::grading::record::HumanTask)> = recorded
                .iter()
                .filter_map(|item| item.grading.human.as_ref().map(|task| (item.work_item_id, task)))
                .collect();
            if !for_humans.is_empty() {
                let mut tasks = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO annotation_tasks (work_item_id, reason, kind, sampling_rate, labels_needed, skill, \
                     review_rate, state, created_at) ",
                );
                tasks.push_values(&for_humans, |mut row, (work_item_id, task)| {
                    row.push_bind(*work_item_id)
                        .push_bind(task.reason.as_str())
                        .push_bind(task.kind.as_str())
                        .push_bind(task.sampling_rate)
                        .push_bind(task.routing.labels_needed)
                        .push_bind(task.routing.skill.as_deref())
                        .push_bind(task.routing.review_rate)
                        .push_bind("open")
                        .push_bind(now);
                });
                tasks.push(" ON CONFLICT (work_item_id) DO NOTHING");
                tasks.build().execute(&mut **tx).await?;
                // Priority and SLA deadline follow the run's priority class.
                use arbiter_domain::annotation::adjudication::sla_hours;
                use arbiter_domain::run::{PRIORITY_ABLATION, PRIORITY_PROMOTION, PRIORITY_SCHEDULED};
                let mut schedule = sqlx::QueryBuilder::<$db>::new(format!(
                    "UPDATE annotation_tasks SET priority = r.priority, \
                     due_at = annotation_tasks.created_at + (CASE WHEN r.priority >= {PRIORITY_PROMOTION} THEN {} \
                     WHEN r.priority = {PRIORITY_ABLATION} THEN {} ELSE {} END) * 3600000 \
                     FROM work_items w JOIN runs r ON r.id = w.run_id \
                     WHERE w.id = annotation_tasks.work_item_id AND annotation_tasks.due_at IS NULL AND annotation_tasks.work_item_id IN (",
                    sla_hours(PRIORITY_PROMOTION),
                    sla_hours(PRIORITY_ABLATION),
                    sla_hours(PRIORITY_SCHEDULED),
                ));
                let mut ids = schedule.separated(", ");
                for (work_item_id, _) in &for_humans {
                    ids.push_bind(*work_item_id);
                }
                ids.push_unseparated(")");
                schedule.build().execute(&mut **tx).await?;
            }

            // Judge calls enter the grade cache (the first answer under a key stays).
            let judge_calls: Vec<&arbiter_domain::grading::judge::JudgeCall> =
                recorded.iter().flat_map(|item| &item.grading.judge_calls).collect();
            for chunk in judge_calls.chunks(super::sql::GRADE_INSERT_BATCH) {
                let mut cache = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO grade_cache (cache_key, output, verdict, confidence, prompt_tokens, completion_tokens, model_used, created_at) ",
                );
                cache.push_values(chunk, |mut row, call| {
                    row.push_bind(call.cache_key.as_str())
                        .push_bind(call.output.as_str())
                        .push_bind(call.pass.map(|pass| if pass { "pass" } else { "fail" }))
                        .push_bind(call.confidence)
                        .push_bind(call.prompt_tokens)
                        .push_bind(call.completion_tokens)
                        .push_bind(call.model_used.as_deref())
                        .push_bind(now);
                });
                cache.push(" ON CONFLICT (cache_key) DO NOTHING");
                cache.build().execute(&mut **tx).await?;
            }

            // Answers (never errors) enter the content-addressed cache, by reference.
            let cacheable: Vec<(&str, i64)> = recorded
                .iter()
                .filter(|item| item.cached_from.is_none() && !item.generation.outcome.is_error())
                .filter_map(|item| item.generation_key.as_deref().map(|key| (key, item.work_item_id)))
                .collect();
            if !cacheable.is_empty() {
                let mut cache = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO generation_cache (generation_key, work_item_id, created_at) ",
                );
                cache.push_values(&cacheable, |mut row, (key, work_item_id)| {
                    row.push_bind(*key).push_bind(*work_item_id).push_bind(now);
                });
                cache.push(" ON CONFLICT (generation_key) DO NOTHING");
                cache.build().execute(&mut **tx).await?;
            }
            Ok(RecordOutcome { inserted: recorded.len(), runs })
        }

    };
}

pub(super) use sql_store;
