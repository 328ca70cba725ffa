//! Rubrics raters answer, versioned like judges (a changed rubric is the next version of its
//! name, and versions never change), and their guidelines, versioned apart.

use crate::StoreResult;
use arbiter_domain::annotation::rubric::{Guidelines, Rubric, RubricVersion};
use arbiter_domain::ids::UserId;
use async_trait::async_trait;

#[async_trait]
pub trait RubricStore: Send + Sync + 'static {
    /// Stores `rubric` (checked by the caller) as the next version of `name` (1 for a new name).
    async fn create_rubric(
        &self,
        name: &str,
        rubric: &Rubric,
        note: &str,
        created_by: Option<UserId>,
    ) -> StoreResult<RubricVersion>;

    /// Every rubric version, newest version of each name first, names in order.
    async fn list_rubrics(&self) -> StoreResult<Vec<RubricVersion>>;

    async fn get_rubric(&self, id: i64) -> StoreResult<Option<RubricVersion>>;

    /// The newest version of `name`.
    async fn latest_rubric(&self, name: &str) -> StoreResult<Option<RubricVersion>>;

    /// Stores the next version of the guidelines for rubric `name` (which must exist).
    async fn add_guidelines(
        &self,
        rubric_name: &str,
        markdown: &str,
        note: &str,
        created_by: Option<UserId>,
    ) -> StoreResult<Guidelines>;

    /// The guidelines versions of rubric `name`, newest first.
    async fn guidelines(&self, rubric_name: &str) -> StoreResult<Vec<Guidelines>>;
}

/// The SQL of [`RubricStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! rubrics_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::ReadColumn as _;
        use arbiter_domain::annotation::rubric::{Guidelines, Rubric, RubricVersion};
        use arbiter_domain::ids::UserId;
        use $crate::{StoreError, StoreResult, now_ms};

        pub(crate) const RUBRIC_SELECT: &str = "SELECT r.id, r.name, r.version, r.definition, r.content_hash, r.note, \
            u.username AS created_by, r.created_at FROM rubrics r LEFT JOIN users u ON u.id = r.created_by";

        pub(crate) fn rubric_from_row(row: &<$db as sqlx::Database>::Row) -> Result<RubricVersion, sqlx::Error> {
            let definition: String = row.read("definition")?;
            let rubric: Rubric = serde_json::from_str(&definition).map_err(|err| sqlx::Error::ColumnDecode {
                index: "definition".into(),
                source: Box::new(err),
            })?;
            Ok($crate::read_columns!(row, RubricVersion {
                id,
                name,
                version,
                content_hash,
                note,
                created_by,
                created_at;
                rubric: rubric,
            }))
        }

        pub(crate) const GUIDELINES_SELECT: &str = "SELECT g.rubric_name, g.version, g.markdown, g.note, \
            u.username AS created_by, g.created_at FROM rubric_guidelines g LEFT JOIN users u ON u.id = g.created_by";

        pub(crate) fn guidelines_from_row(row: &<$db as sqlx::Database>::Row) -> Result<Guidelines, sqlx::Error> {
            Ok($crate::read_columns!(row, Guidelines {
                rubric_name,
                version,
                markdown,
                note,
                created_by,
                created_at,
            }))
        }

        #[async_trait::async_trait]
        impl $crate::rubrics::RubricStore for $store {
            async fn create_rubric(
                &self,
                name: &str,
                rubric: &Rubric,
                note: &str,
                created_by: Option<UserId>,
            ) -> StoreResult<RubricVersion> {
                let result: StoreResult<RubricVersion> = async move {
                    let definition = serde_json::to_string(rubric).expect("rubrics always serialize");
                    let mut tx = self.writer.begin_with($begin).await?;
                    let version: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) + 1 FROM rubrics WHERE name = $1")
                        .bind(name)
                        .fetch_one(&mut *tx)
                        .await?;
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO rubrics (name, version, definition, content_hash, note, created_by, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                    )
                    .bind(name)
                    .bind(version)
                    .bind(&definition)
                    .bind(rubric.content_hash())
                    .bind(note)
                    .bind(created_by.map(i64::from))
                    .bind(now_ms())
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|err| $crate::conflict_on($backend, err, "rubrics_name_version_key", "another version of this rubric was saved at the same moment; save again"))?;
                    let row = sqlx::query(&format!("{RUBRIC_SELECT} WHERE r.id = $1"))
                        .bind(id)
                        .fetch_one(&mut *tx)
                        .await?;
                    let stored = rubric_from_row(&row)?;
                    tx.commit().await?;
                    Ok(stored)
                }
                .await;
                result.map_err(|err| err.during("create_rubric"))
            }

            async fn list_rubrics(&self) -> StoreResult<Vec<RubricVersion>> {
                let result: StoreResult<Vec<RubricVersion>> = async move {
                    let rows = sqlx::query(&format!("{RUBRIC_SELECT} ORDER BY r.name, r.version DESC"))
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows.iter().map(rubric_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("list_rubrics"))
            }

            async fn get_rubric(&self, id: i64) -> StoreResult<Option<RubricVersion>> {
                let result: StoreResult<Option<RubricVersion>> = async move {
                    let row = sqlx::query(&format!("{RUBRIC_SELECT} WHERE r.id = $1"))
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(row.as_ref().map(rubric_from_row).transpose()?)
                }
                .await;
                result.map_err(|err| err.during("get_rubric"))
            }

            async fn latest_rubric(&self, name: &str) -> StoreResult<Option<RubricVersion>> {
                let result: StoreResult<Option<RubricVersion>> = async move {
                    let row = sqlx::query(&format!("{RUBRIC_SELECT} WHERE r.name = $1 ORDER BY r.version DESC LIMIT 1"))
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(row.as_ref().map(rubric_from_row).transpose()?)
                }
                .await;
                result.map_err(|err| err.during("latest_rubric"))
            }

            async fn add_guidelines(
                &self,
                rubric_name: &str,
                markdown: &str,
                note: &str,
                created_by: Option<UserId>,
            ) -> StoreResult<Guidelines> {
                let result: StoreResult<Guidelines> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM rubrics WHERE name = $1 LIMIT 1")
                        .bind(rubric_name)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if exists.is_none() {
                        return Err(StoreError::NotFound(format!("no rubric named `{rubric_name}`")));
                    }
                    let version: i64 = sqlx::query_scalar(
                        "SELECT COALESCE(MAX(version), 0) + 1 FROM rubric_guidelines WHERE rubric_name = $1",
                    )
                    .bind(rubric_name)
                    .fetch_one(&mut *tx)
                    .await?;
                    sqlx::query(
                        "INSERT INTO rubric_guidelines (rubric_name, version, markdown, note, created_by, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(rubric_name)
                    .bind(version)
                    .bind(markdown)
                    .bind(note)
                    .bind(created_by.map(i64::from))
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await
                    .map_err(|err| $crate::conflict_on($backend, err, "rubric_guidelines_name_version_key", "other guidelines for this rubric were saved at the same moment; save again"))?;
                    let row = sqlx::query(&format!("{GUIDELINES_SELECT} WHERE g.rubric_name = $1 AND g.version = $2"))
                        .bind(rubric_name)
                        .bind(version)
                        .fetch_one(&mut *tx)
                        .await?;
                    let stored = guidelines_from_row(&row)?;
                    tx.commit().await?;
                    Ok(stored)
                }
                .await;
                result.map_err(|err| err.during("add_guidelines"))
            }

            async fn guidelines(&self, rubric_name: &str) -> StoreResult<Vec<Guidelines>> {
                let result: StoreResult<Vec<Guidelines>> = async move {
                    let rows = sqlx::query(&format!("{GUIDELINES_SELECT} WHERE g.rubric_name = $1 ORDER BY g.version DESC"))
                        .bind(rubric_name)
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows.iter().map(guidelines_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("guidelines"))
            }
        }
    };
}
pub(crate) use rubrics_sql;
