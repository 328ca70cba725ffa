//! The catalog researchers build runs from: datasets and their content-addressed revisions
//! (items in file order), checkpoints with their endpoints, prices and keys, and evals.

use arbiter_domain::checkpoint::Endpoint;
use arbiter_domain::dataset::{DatasetItem, DatasetRevision, StreamedDataset};
use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId, RevisionId, RunId, UploadId, UserId};
use async_trait::async_trait;

/// Rows per multi-row statement. SQLite allows 32,766 bound variables per statement; each
/// constant keeps rows × columns well under that.
pub(crate) const ITEM_INSERT_BATCH: usize = 1000;

#[async_trait]
pub trait CatalogStore: Send + Sync + 'static {
    // Checkpoints and their endpoints.
    async fn register_checkpoint(
        &self,
        new: &NewCheckpoint,
        created_by: Option<UserId>,
    ) -> StoreResult<CheckpointId>;

    async fn list_checkpoints(&self) -> StoreResult<Vec<Checkpoint>>;

    /// Retracts a checkpoint with `reason` and cancels its unfinished runs, in one
    /// transaction; returns the runs cancelled. `NotFound` for an unknown checkpoint,
    /// `Conflict` for one retracted already; nothing changed then.
    async fn retract_checkpoint(
        &self,
        checkpoint_id: CheckpointId,
        reason: &str,
        by: Option<UserId>,
        now: i64,
    ) -> StoreResult<Vec<RunId>>;

    /// Sets a checkpoint's prices; `NotFound` for an unknown checkpoint.
    async fn set_checkpoint_prices(
        &self,
        checkpoint_id: CheckpointId,
        prices: &TokenPrices,
    ) -> StoreResult<()>;

    /// Every endpoint with its owner and how many checkpoints it serves, by URL.
    async fn list_endpoints(&self) -> StoreResult<Vec<Endpoint>>;

    /// Sets an endpoint's in-flight limit; `NotFound` for an unknown endpoint.
    async fn set_endpoint_max_in_flight(&self, endpoint_id: i64, limit: i64) -> StoreResult<()>;

    /// The in-flight limit and token budget of the endpoint at `base_url` (defaults if unknown).
    async fn endpoint_limits(&self, base_url: &str) -> StoreResult<EndpointLimits>;

    // Datasets.
    /// Starts a streamed upload: its items are staged, invisible, until [`finish_upload`]
    /// makes them a revision. Clears the stages of uploads abandoned more than a day ago.
    ///
    /// [`finish_upload`]: CatalogStore::finish_upload
    async fn begin_upload(
        &self,
        source_name: &str,
        created_by: Option<UserId>,
    ) -> StoreResult<UploadId>;

    /// Stages a chunk of an upload's items, the first at `first_position` (file order).
    async fn stage_items(
        &self,
        upload: UploadId,
        first_position: i64,
        items: &[DatasetItem],
    ) -> StoreResult<()>;

    /// Makes a fully staged upload a revision of the named dataset, in one transaction (as
    /// [`store_dataset_revision`] does for a parsed one), and clears its stage.
    ///
    /// [`store_dataset_revision`]: CatalogStore::store_dataset_revision
    async fn finish_upload(
        &self,
        upload: UploadId,
        name: &str,
        content: &StreamedDataset,
        created_by: Option<UserId>,
    ) -> StoreResult<DatasetRevision>;

    /// Clears the stage of a refused or interrupted upload.
    async fn abandon_upload(&self, upload: UploadId) -> StoreResult<()>;

    /// Stores a parsed upload as a revision of the named dataset (creating the dataset on first
    /// upload). Re-uploading identical content returns the existing revision and makes it the
    /// latest again.
    async fn store_dataset_revision(
        &self,
        name: &str,
        source_name: &str,
        parsed: &ParsedDataset,
        created_by: Option<UserId>,
    ) -> StoreResult<DatasetRevision>;

    async fn list_datasets(&self) -> StoreResult<Vec<DatasetSummary>>;

    async fn get_dataset(&self, id: DatasetId) -> StoreResult<Option<DatasetSummary>>;

    async fn list_revisions(&self, dataset_id: DatasetId) -> StoreResult<Vec<DatasetRevision>>;

    async fn list_items(
        &self,
        revision_id: RevisionId,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Vec<DatasetItem>>;

    /// One item of a revision by its case id.
    async fn dataset_item(
        &self,
        revision_id: RevisionId,
        case_id: &str,
    ) -> StoreResult<Option<DatasetItem>>;

    /// Items after `after_position` in file order: keyset pages for streaming expansion, of at
    /// most `limit` items and, past the first, at most about `max_bytes` of inputs and targets
    /// (so a page of long items stays small in memory).
    async fn items_after(
        &self,
        revision_id: RevisionId,
        after_position: i64,
        limit: i64,
        max_bytes: i64,
    ) -> StoreResult<Vec<(i64, DatasetItem)>>;

    // Evals.
    async fn create_eval(
        &self,
        dataset_id: DatasetId,
        spec: &EvalSpec,
        created_by: Option<UserId>,
    ) -> StoreResult<EvalId>;

    async fn list_evals(&self) -> StoreResult<Vec<EvalSummary>>;

    async fn get_eval(&self, id: EvalId) -> StoreResult<Option<EvalSummary>>;

    /// The stored reference to the API key of the endpoint at `base_url` (`None`: no key).
    async fn endpoint_api_key_ref(&self, base_url: &str) -> StoreResult<Option<String>>;

    /// The team of whoever defined the eval: `None` for an unknown eval, `Some(None)` for one
    /// defined by the operator or a tool (no user).
    async fn eval_team(&self, eval_id: EvalId) -> StoreResult<Option<Option<String>>>;

    /// Host lists leads and admins bound operator keys to: (variable, hosts).
    async fn key_bindings(&self) -> StoreResult<Vec<(String, String)>>;

    /// Binds an operator key's variable to hosts (`None` removes the binding).
    async fn set_key_binding(
        &self,
        variable: &str,
        hosts: Option<&str>,
        set_by: Option<UserId>,
    ) -> StoreResult<()>;
}

/// The SQL of [`CatalogStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! catalog_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::ReadColumn as _;
        use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId, RevisionId, RunId, UploadId, UserId};
        use arbiter_domain::checkpoint::{Checkpoint, Endpoint, EndpointLimits, NewCheckpoint, TokenPrices};
        use arbiter_domain::dataset::{DatasetItem, DatasetRevision, DatasetSummary, ParsedDataset};
        use arbiter_domain::manifest::EvalSummary;
        use $crate::{StoreError, StoreResult, now_ms};

        pub(super) const REVISION_COLUMNS: &str =
            "id, dataset_id, content_hash, item_count, source_name, created_at";

        /// Creates the named dataset if it is new, and a revision of it for this content unless
        /// one exists (which then becomes current again: a revert). Returns the dataset and the
        /// new revision's id (`None` for known content).
        async fn create_revision(
            tx: &mut sqlx::Transaction<'_, $db>,
            name: &str,
            source_name: &str,
            content_hash: &str,
            item_count: i64,
            created_by: Option<UserId>,
        ) -> Result<(DatasetId, Option<i64>), sqlx::Error> {
            let now = now_ms();
            sqlx::query("INSERT INTO datasets (name, created_by, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
                .bind(name)
                .bind(created_by.map(i64::from))
                .bind(now)
                .execute(&mut **tx)
                .await?;
            let dataset_id = DatasetId(
                sqlx::query_scalar("SELECT id FROM datasets WHERE name = $1")
                    .bind(name)
                    .fetch_one(&mut **tx)
                    .await?,
            );
            let inserted: Option<i64> = sqlx::query_scalar(
                "INSERT INTO dataset_revisions (dataset_id, content_hash, item_count, source_name, created_by, created_at, uploaded_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (dataset_id, content_hash) DO NOTHING RETURNING id",
            )
            .bind(dataset_id.get())
            .bind(content_hash)
            .bind(item_count)
            .bind(source_name)
            .bind(created_by.map(i64::from))
            .bind(now)
            .fetch_optional(&mut **tx)
            .await?;
            if inserted.is_none() {
                sqlx::query("UPDATE dataset_revisions SET uploaded_at = $1 WHERE dataset_id = $2 AND content_hash = $3")
                    .bind(now)
                    .bind(dataset_id.get())
                    .bind(content_hash)
                    .execute(&mut **tx)
                    .await?;
            }
            Ok((dataset_id, inserted))
        }

        /// Inserts items into `table_and_key` (`dataset_items (revision_id` or
        /// `staged_items (upload_id`) under `key`, the first at `first_position`.
        async fn insert_items(
            tx: &mut sqlx::Transaction<'_, $db>,
            table_and_key: &str,
            key: i64,
            first_position: i64,
            items: &[DatasetItem],
        ) -> Result<(), sqlx::Error> {
            let mut insert = sqlx::QueryBuilder::<$db>::new(format!(
                "INSERT INTO {table_and_key}, case_id, position, input, target, category, fields) "
            ));
            insert.push_values(items.iter().enumerate(), |mut row, (index, item)| {
                row.push_bind(key)
                    .push_bind(item.case_id.clone())
                    .push_bind(first_position + index as i64)
                    .push_bind(item.input.clone())
                    .push_bind(item.target.clone())
                    .push_bind(item.category.clone())
                    .push_bind(item.structured.as_ref().map(|fields| serde_json::Value::Object(fields.clone()).to_string()));
            });
            insert.build().execute(&mut **tx).await?;
            Ok(())
        }

        async fn revision_by_hash(
            tx: &mut sqlx::Transaction<'_, $db>,
            dataset_id: DatasetId,
            content_hash: &str,
        ) -> Result<DatasetRevision, sqlx::Error> {
            let row = sqlx::query(&format!(
                "SELECT {REVISION_COLUMNS} FROM dataset_revisions WHERE dataset_id = $1 AND content_hash = $2"
            ))
            .bind(dataset_id.get())
            .bind(content_hash)
            .fetch_one(&mut **tx)
            .await?;
            revision_from_row(&row)
        }

        async fn clear_upload(tx: &mut sqlx::Transaction<'_, $db>, upload: arbiter_domain::ids::UploadId) -> Result<(), sqlx::Error> {
            sqlx::query("DELETE FROM staged_items WHERE upload_id = $1")
                .bind(upload.get())
                .execute(&mut **tx)
                .await?;
            sqlx::query("DELETE FROM dataset_uploads WHERE id = $1")
                .bind(upload.get())
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        pub(super) fn revision_from_row(row: &<$db as sqlx::Database>::Row) -> Result<DatasetRevision, sqlx::Error> {
            Ok($crate::read_columns!(row, DatasetRevision {
                id,
                dataset_id,
                content_hash,
                item_count,
                source_name,
                created_at,
            }))
        }

        pub(super) const EVAL_SELECT: &str = "SELECT e.id, e.name, e.dataset_id, d.name AS dataset_name, \
            e.prompt_template, e.prompt_options, e.grader, e.max_tokens, e.temperature, e.repetitions, e.seed, \
            e.sampling_options, e.created_at FROM evals e JOIN datasets d ON d.id = e.dataset_id";

        pub(super) fn eval_from_row(row: &<$db as sqlx::Database>::Row) -> Result<EvalSummary, sqlx::Error> {
            let options: Option<String> = row.read("prompt_options")?;
            let sampling: Option<String> = row.read("sampling_options")?;
            let sampling = arbiter_domain::manifest::SamplingOptions::from_column(sampling.as_deref())
                .map_err(|err| sqlx::Error::Decode(err.into()))?;
            Ok(EvalSummary {
                id: row.read("id")?,
                name: row.read("name")?,
                dataset_id: row.read("dataset_id")?,
                dataset_name: row.read("dataset_name")?,
                prompt: arbiter_domain::prompt::PromptSpec::from_columns(row.read("prompt_template")?, options.as_deref())
                    .map_err(|err| sqlx::Error::Decode(err.into()))?,
                grader: {
                    let stored: String = row.read("grader")?;
                    arbiter_domain::manifest::parse_stored_grader(&stored)
                        .map_err(|err| sqlx::Error::Decode(err.into()))?
                },
                max_tokens: row.read("max_tokens")?,
                temperature: row.read("temperature")?,
                repetitions: row.read("repetitions")?,
                seed: row.read("seed")?,
                sampling,
                created_at: row.read("created_at")?,
            })
        }

        const CHECKPOINT_SELECT: &str = "SELECT c.id, c.name, e.base_url, c.model, c.engine_build, \
            c.parallel_layout, c.fallback_checkpoint_id, e.max_in_flight, c.input_usd_per_mtok, \
            c.output_usd_per_mtok, c.training_run, c.training_step, c.created_at, e.api_key_ref, \
            u.team AS owner_team, c.retracted_at, c.retracted_reason, ru.username AS retracted_by \
            FROM checkpoints c JOIN endpoints e ON e.id = c.endpoint_id LEFT JOIN users u ON u.id = c.created_by \
            LEFT JOIN users ru ON ru.id = c.retracted_by";

/// A served checkpoint's launcher and ports, reserved in its registration's transaction.
        struct ReservedPorts {
            launcher_id: String,
            ports: Vec<i64>,
            urls: Vec<String>,
        }

        /// Picks a live launcher offering the engine and reserves the lowest free ports of its
        /// range, one per replica (on PostgreSQL the launcher's row is locked meanwhile, so two
        /// registrations never pick the same port; SQLite has one writer).
        async fn reserve_ports(
            tx: &mut sqlx::Transaction<'_, $db>,
            checkpoint: &str,
            serving: &arbiter_domain::serving::Serving,
            now: i64,
        ) -> StoreResult<ReservedPorts> {
            let lock = if $backend == "postgres" { " FOR UPDATE" } else { "" };
            let launchers: Vec<(String, String, String, i64, i64, String)> = sqlx::query_as(&format!(
                "SELECT id, host, engines, port_first, port_last, replica_url FROM serving_launchers \
                 WHERE heartbeat_at >= $1 ORDER BY id{lock}"
            ))
            .bind(now - arbiter_domain::serving::LAUNCHER_LIVE_MS)
            .fetch_all(&mut **tx)
            .await?;
            let engine = serving.engine.as_str();
            let Some((launcher_id, host, _, first, last, url_rule)) = launchers.into_iter().find(|(_, _, engines, _, _, _)| {
                serde_json::from_str::<Vec<String>>(engines).is_ok_and(|engines| engines.iter().any(|name| name == engine))
            }) else {
                return Err(StoreError::Conflict(format!(
                    "no running launcher starts `{engine}` servers: start `arbiter serve --launchers FILE` with that engine, or register the checkpoint at its URL"
                )));
            };
            let taken: std::collections::HashSet<i64> =
                sqlx::query_scalar::<_, i64>("SELECT port FROM served_ports WHERE launcher_id = $1")
                    .bind(&launcher_id)
                    .fetch_all(&mut **tx)
                    .await?
                    .into_iter()
                    .collect();
            // A URL someone registered a checkpoint at stays theirs: serving there would share
            // their endpoint's owner, key and limit.
            let registered: std::collections::HashSet<String> = sqlx::query_scalar("SELECT base_url FROM endpoints")
                .fetch_all(&mut **tx)
                .await?
                .into_iter()
                .collect();
            let url_of = |port: i64| arbiter_domain::serving::replica_url_from(&url_rule, &host, checkpoint, port as u16);
            let wanted = serving.plan.replicas as usize;
            let ports: Vec<i64> = (first..=last)
                .filter(|port| !taken.contains(port) && !registered.contains(&url_of(*port)))
                .take(wanted)
                .collect();
            if ports.len() < wanted {
                return Err(StoreError::Conflict(format!(
                    "the launcher `{launcher_id}` has {} free ports of {first}–{last} and this plan needs {wanted}: widen its port range",
                    ports.len()
                )));
            }
            let urls = ports.iter().map(|port| url_of(*port)).collect();
            Ok(ReservedPorts { launcher_id, ports, urls })
        }

        /// Records how a served checkpoint is started and its ports.
        async fn record_serving(
            tx: &mut sqlx::Transaction<'_, $db>,
            checkpoint_id: i64,
            serving: &arbiter_domain::serving::Serving,
            reserved: &ReservedPorts,
        ) -> Result<(), sqlx::Error> {
            sqlx::query("INSERT INTO served_checkpoints (checkpoint_id, launcher_id, engine, model_path, plan) VALUES ($1, $2, $3, $4, $5)")
                .bind(checkpoint_id)
                .bind(&reserved.launcher_id)
                .bind(serving.engine.as_str())
                .bind(&serving.model_path)
                .bind(serde_json::to_string(&serving.plan).expect("plans serialize"))
                .execute(&mut **tx)
                .await?;
            for (replica, (port, url)) in reserved.ports.iter().zip(&reserved.urls).enumerate() {
                sqlx::query("INSERT INTO served_ports (launcher_id, port, checkpoint_id, replica, url) VALUES ($1, $2, $3, $4, $5)")
                    .bind(&reserved.launcher_id)
                    .bind(port)
                    .bind(checkpoint_id)
                    .bind(replica as i64)
                    .bind(url)
                    .execute(&mut **tx)
                    .await?;
            }
            // No launch yet: the first run on it requests one (see `ServingStore::request_launch`).
            Ok(())
        }

        fn checkpoint_from_row(row: &<$db as sqlx::Database>::Row) -> Result<Checkpoint, sqlx::Error> {
            Ok(Checkpoint {
                id: row.read("id")?,
                name: row.read("name")?,
                base_url: row.read("base_url")?,
                model: row.read("model")?,
                replica_urls: Vec::new(),
                engine_build: row.read("engine_build")?,
                parallel_layout: row.read("parallel_layout")?,
                fallback_checkpoint_id: row.read("fallback_checkpoint_id")?,
                max_in_flight: row.read("max_in_flight")?,
                prices: $crate::read_columns!(row, TokenPrices {
                    input_usd_per_mtok,
                    output_usd_per_mtok,
                }),
                training_run: row.read("training_run")?,
                training_step: row.read("training_step")?,
                created_at: row.read("created_at")?,
                owner_team: row.read("owner_team")?,
                api_key_ref: row.read("api_key_ref")?,
                retraction: match row.read::<Option<i64>>("retracted_at")? {
                    Some(at) => Some(arbiter_domain::checkpoint::Retraction {
                        at,
                        reason: row.read::<Option<String>>("retracted_reason")?.unwrap_or_default(),
                        by: row.read("retracted_by")?,
                    }),
                    None => None,
                },
            })
        }

        #[async_trait::async_trait]
        impl $crate::catalog::CatalogStore for $store {
            async fn register_checkpoint(&self, new: &NewCheckpoint, created_by: Option<UserId>) -> StoreResult<CheckpointId> {
                let result: StoreResult<i64> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let now = now_ms();
                    let reserved = match &new.serving {
                        Some(serving) => Some(reserve_ports(&mut tx, &new.name, serving, now).await?),
                        None => None,
                    };
                    let urls: Vec<String> = match &reserved {
                        Some(reserved) => reserved.urls.clone(),
                        None => std::iter::once(&new.base_url).chain(&new.replica_urls).cloned().collect(),
                    };
                    let mut endpoint_ids = Vec::with_capacity(urls.len());
                    for url in &urls {
                        let inserted = sqlx::query(
                            "INSERT INTO endpoints (base_url, created_by, created_at) VALUES ($1, $2, $3) ON CONFLICT (base_url) DO NOTHING",
                        )
                        .bind(url)
                        .bind(created_by.map(i64::from))
                        .bind(now)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                            == 1;
                        if let Some(limit) = new.max_in_flight {
                            // A new endpoint takes the limit it is registered with. An existing
                            // one is shared with other checkpoints (and teams): registering one
                            // more may not change what they all get.
                            let current: i64 = sqlx::query_scalar("SELECT max_in_flight FROM endpoints WHERE base_url = $1")
                                .bind(url)
                                .fetch_one(&mut *tx)
                                .await?;
                            if inserted {
                                sqlx::query("UPDATE endpoints SET max_in_flight = $1 WHERE base_url = $2")
                                    .bind(limit)
                                    .bind(url)
                                    .execute(&mut *tx)
                                    .await?;
                            } else if current != limit {
                                return Err(StoreError::Conflict(format!(
                                    "the endpoint {url} is shared and allows {current} requests in flight, not {limit}; \
                                     leave the limit empty, or have its owner or a lead change it under Endpoints"
                                )));
                            }
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
                                None if !inserted => {
                                    // A shared endpoint's key goes to every checkpoint and team
                                    // on it: only its owner adds one by registering.
                                    let owner: Option<i64> = sqlx::query_scalar("SELECT created_by FROM endpoints WHERE base_url = $1")
                                        .bind(url)
                                        .fetch_one(&mut *tx)
                                        .await?;
                                    if owner != created_by.map(i64::from) {
                                        return Err(StoreError::Conflict(format!(
                                            "the endpoint {url} is shared and has no API key; only its owner may give it one \
                                             (register this checkpoint without a key, or on a URL of its own)"
                                        )));
                                    }
                                    sqlx::query("UPDATE endpoints SET api_key_ref = $1 WHERE base_url = $2")
                                        .bind(key)
                                        .bind(url)
                                        .execute(&mut *tx)
                                        .await?;
                                }
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
                    .bind(created_by.map(i64::from))
                    .bind(now)
                    .bind(&new.training_run)
                    .bind(new.training_step)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|err| {
                        $crate::conflict_on($backend, err, "checkpoints_name_key", &format!("a checkpoint named `{}` exists already", new.name))
                    })?;
                    for endpoint_id in endpoint_ids.iter().skip(1).filter(|&&replica| replica != endpoint_ids[0]) {
                        sqlx::query("INSERT INTO checkpoint_replicas (checkpoint_id, endpoint_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                            .bind(id)
                            .bind(endpoint_id)
                            .execute(&mut *tx)
                            .await?;
                    }
                    if let (Some(serving), Some(reserved)) = (&new.serving, &reserved) {
                        record_serving(&mut tx, id, serving, reserved).await?;
                    }
                    tx.commit().await?;
                    Ok(id)
                }
                .await;
                result.map(CheckpointId).map_err(|err| err.during("register_checkpoint"))
            }

            async fn list_checkpoints(&self) -> StoreResult<Vec<Checkpoint>> {
                let result: StoreResult<Vec<Checkpoint>> = async move {
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
                        if let Some(checkpoint) = checkpoints.iter_mut().find(|c| c.id == CheckpointId(checkpoint_id)) {
                            checkpoint.replica_urls.push(url);
                        }
                    }
                    Ok(checkpoints)
                }
                .await;
                result.map_err(|err| err.during("list_checkpoints"))
            }

            async fn retract_checkpoint(
                &self,
                checkpoint_id: CheckpointId,
                reason: &str,
                by: Option<UserId>,
                now: i64,
            ) -> StoreResult<Vec<RunId>> {
                let result: StoreResult<Vec<RunId>> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    // One statement decides between two retractions at once: the second finds
                    // the checkpoint retracted.
                    let retracted = sqlx::query(
                        "UPDATE checkpoints SET retracted_at = $1, retracted_reason = $2, retracted_by = $3 \
                         WHERE id = $4 AND retracted_at IS NULL",
                    )
                    .bind(now)
                    .bind(reason)
                    .bind(by.map(|user| user.get()))
                    .bind(checkpoint_id.get())
                    .execute(&mut *tx)
                    .await?;
                    if retracted.rows_affected() == 0 {
                        let known: Option<i64> = sqlx::query_scalar("SELECT id FROM checkpoints WHERE id = $1")
                            .bind(checkpoint_id.get())
                            .fetch_optional(&mut *tx)
                            .await?;
                        return Err(match known {
                            None => StoreError::NotFound(format!("no checkpoint with id {checkpoint_id}")),
                            Some(_) => StoreError::Conflict(format!("checkpoint {checkpoint_id} is retracted already")),
                        });
                    }
                    // Its ports go back to its launcher's range, unless servers still hold them
                    // (their retirement frees them).
                    sqlx::query(
                        "DELETE FROM served_ports WHERE checkpoint_id = $1 AND NOT EXISTS (SELECT 1 FROM server_launches l \
                         WHERE l.checkpoint_id = $1 AND l.state IN ('requested', 'starting', 'healthy', 'restarting'))",
                    )
                    .bind(checkpoint_id.get())
                    .execute(&mut *tx)
                    .await?;
                    // Its unfinished runs stop here: workers claim from running runs only.
                    let cancelled: Vec<i64> = sqlx::query_scalar(
                        "UPDATE runs SET status = 'cancelled' WHERE checkpoint_id = $1 \
                         AND status IN ('expanding', 'running', 'paused') RETURNING id",
                    )
                    .bind(checkpoint_id.get())
                    .fetch_all(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    Ok(cancelled.into_iter().map(RunId).collect())
                }
                .await;
                result.map_err(|err| err.during("retract_checkpoint"))
            }

            async fn set_checkpoint_prices(&self, checkpoint_id: CheckpointId, prices: &TokenPrices) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    let updated = sqlx::query(
                        "UPDATE checkpoints SET input_usd_per_mtok = $1, output_usd_per_mtok = $2 WHERE id = $3",
                    )
                    .bind(prices.input_usd_per_mtok)
                    .bind(prices.output_usd_per_mtok)
                    .bind(checkpoint_id.get())
                    .execute(&self.writer)
                    .await?;
                    if updated.rows_affected() == 0 {
                        return Err(StoreError::NotFound(format!("no checkpoint with id {checkpoint_id}")));
                    }
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("set_checkpoint_prices"))
            }

            async fn list_endpoints(&self) -> StoreResult<Vec<Endpoint>> {
                let result: StoreResult<Vec<Endpoint>> = async move {
                    let rows = sqlx::query(
                        "SELECT e.id, e.base_url, e.max_in_flight, e.created_by, u.username, \
                         (SELECT COUNT(*) FROM checkpoints c WHERE c.endpoint_id = e.id) \
                         + (SELECT COUNT(*) FROM checkpoint_replicas r WHERE r.endpoint_id = e.id) AS checkpoints \
                         FROM endpoints e LEFT JOIN users u ON u.id = e.created_by ORDER BY e.base_url",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(Endpoint {
                                id: row.read("id")?,
                                base_url: row.read("base_url")?,
                                max_in_flight: row.read("max_in_flight")?,
                                owner_id: row.read("created_by")?,
                                owner: row.read("username")?,
                                checkpoints: row.read("checkpoints")?,
                            })
                        })
                        .collect::<Result<Vec<_>, sqlx::Error>>()
                        .map_err(Into::into)
                }
                .await;
                result.map_err(|err| err.during("list_endpoints"))
            }

            async fn set_endpoint_max_in_flight(&self, endpoint_id: i64, limit: i64) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    let updated = sqlx::query("UPDATE endpoints SET max_in_flight = $1 WHERE id = $2")
                        .bind(limit)
                        .bind(endpoint_id)
                        .execute(&self.writer)
                        .await?;
                    if updated.rows_affected() == 0 {
                        return Err(StoreError::NotFound(format!("no endpoint with id {endpoint_id}")));
                    }
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("set_endpoint_max_in_flight"))
            }

            async fn endpoint_limits(&self, base_url: &str) -> StoreResult<EndpointLimits> {
                let result: StoreResult<EndpointLimits> = async move {
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
                .await;
                result.map_err(|err| err.during("endpoint_limits"))
            }

            async fn store_dataset_revision(
                &self,
                name: &str,
                source_name: &str,
                parsed: &ParsedDataset,
                created_by: Option<UserId>,
            ) -> StoreResult<DatasetRevision> {
                let result: StoreResult<DatasetRevision> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let (dataset_id, inserted) = create_revision(
                        &mut tx, name, source_name, &parsed.content_hash, parsed.items.len() as i64, created_by,
                    )
                    .await?;
                    if let Some(revision_id) = inserted {
                        for (chunk_index, chunk) in parsed.items.chunks($crate::catalog::ITEM_INSERT_BATCH).enumerate() {
                            let offset = (chunk_index * $crate::catalog::ITEM_INSERT_BATCH) as i64;
                            insert_items(&mut tx, "dataset_items (revision_id", revision_id, offset, chunk).await?;
                        }
                    }
                    let revision = revision_by_hash(&mut tx, dataset_id, &parsed.content_hash).await?;
                    tx.commit().await?;
                    Ok(revision)
                }
                .await;
                result.map_err(|err| err.during("store_dataset_revision"))
            }

            async fn begin_upload(&self, source_name: &str, created_by: Option<UserId>) -> StoreResult<UploadId> {
                let result: StoreResult<UploadId> = async move {
                    let now = now_ms();
                    let mut tx = self.writer.begin_with($begin).await?;
                    // Stages a crashed process left behind.
                    let stale = "SELECT id FROM dataset_uploads WHERE started_at < $1";
                    sqlx::query(&format!("DELETE FROM staged_items WHERE upload_id IN ({stale})"))
                        .bind(now - 24 * 3_600_000)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("DELETE FROM dataset_uploads WHERE started_at < $1")
                        .bind(now - 24 * 3_600_000)
                        .execute(&mut *tx)
                        .await?;
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO dataset_uploads (source_name, created_by, started_at) VALUES ($1, $2, $3) RETURNING id",
                    )
                    .bind(source_name)
                    .bind(created_by.map(i64::from))
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    Ok(UploadId(id))
                }
                .await;
                result.map_err(|err| err.during("begin_upload"))
            }

            async fn stage_items(&self, upload: UploadId, first_position: i64, items: &[DatasetItem]) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    for (chunk_index, chunk) in items.chunks($crate::catalog::ITEM_INSERT_BATCH).enumerate() {
                        let offset = first_position + (chunk_index * $crate::catalog::ITEM_INSERT_BATCH) as i64;
                        insert_items(&mut tx, "staged_items (upload_id", upload.get(), offset, chunk).await?;
                    }
                    tx.commit().await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("stage_items"))
            }

            async fn finish_upload(
                &self,
                upload: UploadId,
                name: &str,
                content: &arbiter_domain::dataset::StreamedDataset,
                created_by: Option<UserId>,
            ) -> StoreResult<DatasetRevision> {
                let result: StoreResult<DatasetRevision> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let source_name: String = sqlx::query_scalar("SELECT source_name FROM dataset_uploads WHERE id = $1")
                        .bind(upload.get())
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or_else(|| StoreError::NotFound(format!("no upload {upload} in progress")))?;
                    let (dataset_id, inserted) = create_revision(
                        &mut tx, name, &source_name, &content.content_hash, content.item_count as i64, created_by,
                    )
                    .await?;
                    if let Some(revision_id) = inserted {
                        let copied = sqlx::query(
                            "INSERT INTO dataset_items (revision_id, case_id, position, input, target, category, fields) \
                             SELECT $1, case_id, position, input, target, category, fields FROM staged_items WHERE upload_id = $2",
                        )
                        .bind(revision_id)
                        .bind(upload.get())
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                        if copied != content.item_count as u64 {
                            return Err(StoreError::Conflict(format!(
                                "upload {upload} staged {copied} items of {}; nothing was stored",
                                content.item_count
                            )));
                        }
                    }
                    clear_upload(&mut tx, upload).await?;
                    let revision = revision_by_hash(&mut tx, dataset_id, &content.content_hash).await?;
                    tx.commit().await?;
                    Ok(revision)
                }
                .await;
                result.map_err(|err| err.during("finish_upload"))
            }

            async fn abandon_upload(&self, upload: UploadId) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    clear_upload(&mut tx, upload).await?;
                    tx.commit().await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("abandon_upload"))
            }

            async fn list_datasets(&self) -> StoreResult<Vec<DatasetSummary>> {
                let result: StoreResult<Vec<DatasetSummary>> = async move {
                    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM datasets ORDER BY name")
                        .fetch_all(&self.pool)
                        .await?;
                    let mut summaries = Vec::with_capacity(ids.len());
                    for id in ids {
                        if let Some(summary) = self.get_dataset(DatasetId(id)).await? {
                            summaries.push(summary);
                        }
                    }
                    Ok(summaries)
                }
                .await;
                result.map_err(|err| err.during("list_datasets"))
            }

            async fn get_dataset(&self, id: DatasetId) -> StoreResult<Option<DatasetSummary>> {
                let result: StoreResult<Option<DatasetSummary>> = async move {
                    let row = sqlx::query(
                        "SELECT d.id, d.name, (SELECT COUNT(*) FROM dataset_revisions r WHERE r.dataset_id = d.id) AS revision_count \
                         FROM datasets d WHERE d.id = $1",
                    )
                    .bind(id.get())
                    .fetch_optional(&self.pool)
                    .await?;
                    let Some(row) = row else { return Ok(None) };
                    let latest = sqlx::query(&format!(
                        "SELECT {REVISION_COLUMNS} FROM dataset_revisions WHERE dataset_id = $1 ORDER BY uploaded_at DESC, id DESC LIMIT 1"
                    ))
                    .bind(id.get())
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(Some($crate::read_columns!(row, DatasetSummary {
                        id,
                        name,
                        revision_count,
                        ;
                        latest_revision: latest.as_ref().map(revision_from_row).transpose()?,
                    })))
                }
                .await;
                result.map_err(|err| err.during("get_dataset"))
            }

            async fn list_revisions(&self, dataset_id: DatasetId) -> StoreResult<Vec<DatasetRevision>> {
                let result: StoreResult<Vec<DatasetRevision>> = async move {
                    let rows = sqlx::query(&format!(
                        "SELECT {REVISION_COLUMNS} FROM dataset_revisions WHERE dataset_id = $1 ORDER BY uploaded_at DESC, id DESC"
                    ))
                    .bind(dataset_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows.iter().map(revision_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("list_revisions"))
            }

            async fn list_items(&self, revision_id: RevisionId, limit: i64, offset: i64) -> StoreResult<Vec<DatasetItem>> {
                let result: StoreResult<Vec<DatasetItem>> = async move {
                    let rows = sqlx::query(
                        "SELECT case_id, input, target, category, fields FROM dataset_items \
                         WHERE revision_id = $1 ORDER BY position LIMIT $2 OFFSET $3",
                    )
                    .bind(revision_id.get())
                    .bind(limit)
                    .bind(offset)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| Ok($crate::item_from_row!(row)))
                        .collect::<Result<_, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("list_items"))
            }

            async fn dataset_item(&self, revision_id: RevisionId, case_id: &str) -> StoreResult<Option<DatasetItem>> {
                let result: StoreResult<Option<DatasetItem>> = async move {
                    let row = sqlx::query(
                        "SELECT case_id, input, target, category, fields FROM dataset_items \
                         WHERE revision_id = $1 AND case_id = $2",
                    )
                    .bind(revision_id.get())
                    .bind(case_id)
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(match row {
                        Some(row) => Some($crate::item_from_row!(row)),
                        None => None,
                    })
                }
                .await;
                result.map_err(|err| err.during("dataset_item"))
            }

            async fn items_after(&self, revision_id: RevisionId, after_position: i64, limit: i64, max_bytes: i64) -> StoreResult<Vec<(i64, DatasetItem)>> {
                let result: StoreResult<Vec<(i64, DatasetItem)>> = async move {
                    // The page is cut to `limit` rows first and only then summed, so each page
                    // costs its own rows, never the rest of the revision. A row is kept while the
                    // bytes before it are under the budget: the first always is.
                    let rows = sqlx::query(
                        "SELECT position, case_id, input, target, category, fields FROM ( \
                           SELECT page.*, SUM(bytes) OVER (ORDER BY position) AS running FROM ( \
                             SELECT position, case_id, input, target, category, fields, \
                                    octet_length(input) + octet_length(target) + COALESCE(octet_length(fields), 0) AS bytes \
                             FROM dataset_items WHERE revision_id = $1 AND position > $2 \
                             ORDER BY position LIMIT $3) page) sized \
                         WHERE running - bytes < $4 ORDER BY position",
                    )
                    .bind(revision_id.get())
                    .bind(after_position)
                    .bind(limit)
                    .bind(max_bytes)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok((row.read("position")?, $crate::item_from_row!(row)))
                        })
                        .collect::<Result<_, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("items_after"))
            }

            async fn create_eval(&self, dataset_id: DatasetId, spec: &arbiter_domain::manifest::EvalSpec, created_by: Option<UserId>) -> StoreResult<EvalId> {
                let result: StoreResult<i64> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let inserted = sqlx::query_scalar::<_, i64>(
                        "INSERT INTO evals (name, dataset_id, prompt_template, grader, max_tokens, temperature, repetitions, seed, created_by, created_at, prompt_options, sampling_options) \
                         SELECT $1, d.id, $2, $3, $4, $5, $6, $7, $8, $9, $11, $12 FROM datasets d WHERE d.id = $10 RETURNING id",
                    )
                    .bind(&spec.name)
                    .bind(&spec.prompt.template)
                    .bind(serde_json::to_string(&spec.grader).expect("grader specs always serialize"))
                    .bind(i64::from(spec.generation.max_tokens))
                    .bind(spec.generation.temperature)
                    .bind(i64::from(spec.repetitions))
                    .bind(spec.generation.seed as i64)
                    .bind(created_by.map(i64::from))
                    .bind(now_ms())
                    .bind(dataset_id.get())
                    .bind(spec.prompt.options_column())
                    .bind(spec.generation.sampling.to_column())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|err| {
                        $crate::conflict_on($backend, err, "evals_name_key", &format!("an eval named `{}` exists already", spec.name))
                    })?;
                    let id = inserted.ok_or_else(|| StoreError::NotFound(format!("no dataset with id {dataset_id}")))?;
                    tx.commit().await?;
                    Ok(id)
                }
                .await;
                result.map(EvalId).map_err(|err| err.during("create_eval"))
            }

            async fn list_evals(&self) -> StoreResult<Vec<EvalSummary>> {
                let result: StoreResult<Vec<EvalSummary>> = async move {
                    let rows = sqlx::query(&format!("{EVAL_SELECT} ORDER BY e.id DESC"))
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows.iter().map(eval_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("list_evals"))
            }

            async fn get_eval(&self, id: EvalId) -> StoreResult<Option<EvalSummary>> {
                let result: StoreResult<Option<EvalSummary>> = async move {
                    let row = sqlx::query(&format!("{EVAL_SELECT} WHERE e.id = $1"))
                        .bind(id.get())
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(row.as_ref().map(eval_from_row).transpose()?)
                }
                .await;
                result.map_err(|err| err.during("get_eval"))
            }

            async fn endpoint_api_key_ref(&self, base_url: &str) -> $crate::StoreResult<Option<String>> {
                let result: $crate::StoreResult<Option<String>> = async move {
                    let stored: Option<Option<String>> =
                        sqlx::query_scalar("SELECT api_key_ref FROM endpoints WHERE base_url = $1")
                            .bind(base_url)
                            .fetch_optional(&self.pool)
                            .await?;
                    Ok(stored.flatten())
                }
                .await;
                result.map_err(|err| err.during("endpoint_api_key_ref"))
            }

            async fn eval_team(&self, eval_id: EvalId) -> $crate::StoreResult<Option<Option<String>>> {
                sqlx::query_scalar::<_, Option<String>>(
                    "SELECT u.team FROM evals e LEFT JOIN users u ON u.id = e.created_by WHERE e.id = $1",
                )
                .bind(eval_id.get())
                .fetch_optional(&self.pool)
                .await
                .map_err(|err| $crate::StoreError::from(err).during("eval_team"))
            }

            async fn key_bindings(&self) -> $crate::StoreResult<Vec<(String, String)>> {
                sqlx::query_as::<_, (String, String)>("SELECT variable, hosts FROM endpoint_key_bindings ORDER BY variable")
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|err| $crate::StoreError::from(err).during("key_bindings"))
            }

            async fn set_key_binding(&self, variable: &str, hosts: Option<&str>, set_by: Option<UserId>) -> $crate::StoreResult<()> {
                let result: $crate::StoreResult<()> = async move {
                    match hosts {
                        Some(hosts) => {
                            sqlx::query(
                                "INSERT INTO endpoint_key_bindings (variable, hosts, set_by, set_at) VALUES ($1, $2, $3, $4) \
                                 ON CONFLICT (variable) DO UPDATE SET hosts = excluded.hosts, set_by = excluded.set_by, set_at = excluded.set_at",
                            )
                            .bind(variable)
                            .bind(hosts)
                            .bind(set_by.map(i64::from))
                            .bind(now_ms())
                            .execute(&self.writer)
                            .await?;
                        }
                        None => {
                            sqlx::query("DELETE FROM endpoint_key_bindings WHERE variable = $1")
                                .bind(variable)
                                .execute(&self.writer)
                                .await?;
                        }
                    }
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("set_key_binding"))
            }
        }
    };
}

use crate::StoreResult;
use arbiter_domain::checkpoint::{Checkpoint, EndpointLimits, NewCheckpoint, TokenPrices};
use arbiter_domain::dataset::{DatasetSummary, ParsedDataset};
use arbiter_domain::manifest::{EvalSpec, EvalSummary};
pub(crate) use catalog_sql;
