//! Rater pay: pay pools, their rates and raters' pools (each from a given day on), and each
//! rater's answers summed per day with time on task capped, which
//! [`arbiter_domain::annotation::pay`] prices into the ledger.
//!
//! Invariants: a pool's rate, and a rater's pool, is set at most once per day (setting it again
//! for that day replaces it, in one statement); a rater can only be put in a pool that exists.

use crate::StoreResult;
use arbiter_domain::annotation::pay::{PayAssignment, PayBasis, PayRate, WorkDay};
use arbiter_domain::ids::UserId;
use async_trait::async_trait;

/// A rate a lead sets for a pool from a day on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPayRate {
    pub pool_id: i64,
    pub basis: PayBasis,
    pub rate_minor: i64,
    pub currency: String,
    pub idle_cap_minutes: i64,
    pub effective_day: i64,
}

#[async_trait]
pub trait PayStore: Send + Sync {
    /// A new pool; a conflict when the name is taken.
    async fn create_pay_pool(&self, name: &str, now: i64) -> StoreResult<i64>;

    /// Every pool as (id, name), by name.
    async fn pay_pools(&self) -> StoreResult<Vec<(i64, String)>>;

    /// Sets a pool's rate from a day on (replacing one set for that day); not found when the
    /// pool does not exist.
    async fn set_pay_rate(&self, rate: &NewPayRate, set_by: UserId, now: i64) -> StoreResult<()>;

    /// Every rate ever set, by pool and day.
    async fn pay_rates(&self) -> StoreResult<Vec<PayRate>>;

    /// Puts a rater in a pool (or none) from a day on, replacing one set for that day; not
    /// found when the rater or the pool does not exist.
    async fn assign_pay_pool(
        &self,
        rater_id: UserId,
        pool_id: Option<i64>,
        effective_day: i64,
        set_by: UserId,
        now: i64,
    ) -> StoreResult<()>;

    /// Every rater's pool changes (one rater's with `Some`), by rater and day.
    async fn pay_assignments(&self, rater_id: Option<UserId>) -> StoreResult<Vec<PayAssignment>>;

    /// Each rater's answers (labels, gold answers, pair preferences) per UTC day and kind from
    /// `from_day` to `until_day` (exclusive), each answer's time on task capped at `cap_ms`;
    /// one rater's with `Some`.
    async fn work_days(
        &self,
        from_day: i64,
        until_day: i64,
        cap_ms: i64,
        rater_id: Option<UserId>,
    ) -> StoreResult<Vec<WorkDay>>;
}

/// The SQL of [`PayStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! pay_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::pay::NewPayRate;
        use $crate::{StoreError, StoreResult};
        use arbiter_domain::annotation::pay::{
            PayAssignment, PayBasis, PayRate, WorkDay, WorkKind, DAY_MS,
        };
        use arbiter_domain::ids::UserId;

        /// A reference to a missing pool or rater, as the person should read it.
        fn missing_reference(err: sqlx::Error, what: &str) -> StoreError {
            match &err {
                sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::ForeignKeyViolation => {
                    StoreError::NotFound(what.to_string())
                }
                _ => StoreError::from(err),
            }
        }

        async fn insert_pool(writer: &sqlx::Pool<$db>, name: &str, now: i64) -> StoreResult<i64> {
            sqlx::query_scalar("INSERT INTO pay_pools (name, created_at) VALUES ($1, $2) RETURNING id")
                .bind(name)
                .bind(now)
                .fetch_one(writer)
                .await
                .map_err(|err| {
                    $crate::conflict_on($backend, err, "pay_pools_name_key",
                        &format!("a pay pool named `{name}` exists already"))
                })
        }

        async fn upsert_rate(writer: &sqlx::Pool<$db>, rate: &NewPayRate, set_by: UserId, now: i64) -> StoreResult<()> {
            sqlx::query(
                "INSERT INTO pay_rates (pool_id, basis, rate_minor, currency, idle_cap_minutes, effective_day, set_by, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (pool_id, effective_day) DO UPDATE SET basis = excluded.basis, \
                   rate_minor = excluded.rate_minor, currency = excluded.currency, \
                   idle_cap_minutes = excluded.idle_cap_minutes, set_by = excluded.set_by, created_at = excluded.created_at",
            )
            .bind(rate.pool_id)
            .bind(rate.basis.as_str())
            .bind(rate.rate_minor)
            .bind(&rate.currency)
            .bind(rate.idle_cap_minutes)
            .bind(rate.effective_day)
            .bind(set_by.get())
            .bind(now)
            .execute(writer)
            .await
            .map_err(|err| missing_reference(err, &format!("no pay pool {}", rate.pool_id)))?;
            Ok(())
        }

        async fn list_rates(pool: &sqlx::Pool<$db>) -> StoreResult<Vec<PayRate>> {
            let rows: Vec<(i64, i64, String, String, i64, String, i64, i64)> = sqlx::query_as(
                "SELECT r.id, p.id, p.name, r.basis, r.rate_minor, r.currency, r.idle_cap_minutes, r.effective_day \
                 FROM pay_rates r JOIN pay_pools p ON p.id = r.pool_id ORDER BY p.name, r.effective_day",
            )
            .fetch_all(pool)
            .await?;
            rows.into_iter()
                .map(|(rate_id, pool_id, pool, basis, rate_minor, currency, idle_cap_minutes, effective_day)| {
                    let basis = PayBasis::parse(&basis).ok_or_else(|| {
                        StoreError::from(sqlx::Error::Decode(format!("unknown pay basis `{basis}`").into()))
                    })?;
                    Ok(PayRate { rate_id, pool_id, pool, basis, rate_minor, currency, idle_cap_minutes, effective_day })
                })
                .collect()
        }

        async fn upsert_assignment(
            writer: &sqlx::Pool<$db>,
            rater_id: UserId,
            pool_id: Option<i64>,
            effective_day: i64,
            set_by: UserId,
            now: i64,
        ) -> StoreResult<()> {
            sqlx::query(
                "INSERT INTO pay_assignments (rater_id, pool_id, effective_day, set_by, created_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (rater_id, effective_day) DO UPDATE SET pool_id = excluded.pool_id, \
                   set_by = excluded.set_by, created_at = excluded.created_at",
            )
            .bind(rater_id.get())
            .bind(pool_id)
            .bind(effective_day)
            .bind(set_by.get())
            .bind(now)
            .execute(writer)
            .await
            .map_err(|err| missing_reference(err, "no such rater or pay pool"))?;
            Ok(())
        }

        async fn list_assignments(pool: &sqlx::Pool<$db>, rater_id: Option<UserId>) -> StoreResult<Vec<PayAssignment>> {
            let rows: Vec<(i64, Option<i64>, i64)> = sqlx::query_as(
                "SELECT rater_id, pool_id, effective_day FROM pay_assignments \
                 WHERE $1 IS NULL OR rater_id = $1 ORDER BY rater_id, effective_day",
            )
            .bind(rater_id.map(UserId::get))
            .fetch_all(pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(rater_id, pool_id, effective_day)| PayAssignment {
                    rater_id: UserId(rater_id),
                    pool_id,
                    effective_day,
                })
                .collect())
        }

        async fn sum_work_days(
            pool: &sqlx::Pool<$db>,
            from_day: i64,
            until_day: i64,
            cap_ms: i64,
            rater_id: Option<UserId>,
        ) -> StoreResult<Vec<WorkDay>> {
            // Each answer's day, time on task and whether a reviewer rejected it, from the three
            // kinds of answer; summed per rater, day and kind with the time capped per answer.
            let answers = |table: &str, rater: &str, kind: &str, rejected: &str| {
                format!(
                    "SELECT {rater} AS rater_id, created_at / {DAY_MS} AS day, '{kind}' AS kind, duration_ms, \
                            {rejected} AS rejected FROM {table} \
                     WHERE created_at >= $1 AND created_at < $2 AND ($4 IS NULL OR {rater} = $4)"
                )
            };
            let sql = format!(
                "SELECT a.rater_id, u.username, a.day, a.kind, COUNT(*), \
                        CAST(SUM(CASE WHEN a.duration_ms IS NULL THEN 1 ELSE 0 END) AS BIGINT), \
                        CAST(SUM(a.rejected) AS BIGINT), \
                        CAST(COALESCE(SUM(CASE WHEN a.duration_ms > $3 THEN $3 WHEN a.duration_ms < 0 THEN 0 \
                                               ELSE a.duration_ms END), 0) AS BIGINT) \
                 FROM ({} UNION ALL {} UNION ALL {}) a JOIN users u ON u.id = a.rater_id \
                 GROUP BY a.rater_id, u.username, a.day, a.kind ORDER BY u.username, a.day, a.kind",
                answers("labels", "annotator_id", "label", "CASE WHEN state = 'rejected' THEN 1 ELSE 0 END"),
                answers("gold_answers", "rater_id", "gold", "0"),
                answers("preference_labels", "rater_id", "pair", "CASE WHEN state = 'rejected' THEN 1 ELSE 0 END"),
            );
            let rows: Vec<(i64, String, i64, String, i64, i64, i64, i64)> = sqlx::query_as(&sql)
                .bind(from_day * DAY_MS)
                .bind(until_day * DAY_MS)
                .bind(cap_ms)
                .bind(rater_id.map(UserId::get))
                .fetch_all(pool)
                .await?;
            let count = |value: i64| value.max(0) as u64;
            Ok(rows
                .into_iter()
                .map(|(rater, username, day, kind, answers, untimed, rejected, capped_ms)| WorkDay {
                    rater_id: UserId(rater),
                    rater: username,
                    day,
                    kind: match kind.as_str() {
                        "gold" => WorkKind::Gold,
                        "pair" => WorkKind::Pair,
                        _ => WorkKind::Label,
                    },
                    answers: count(answers),
                    untimed: count(untimed),
                    rejected: count(rejected),
                    capped_ms: count(capped_ms),
                })
                .collect())
        }

        #[async_trait::async_trait]
        impl $crate::pay::PayStore for $store {
            async fn create_pay_pool(&self, name: &str, now: i64) -> StoreResult<i64> {
                insert_pool(&self.writer, name, now).await.map_err(|err| err.during("create_pay_pool"))
            }

            async fn pay_pools(&self) -> StoreResult<Vec<(i64, String)>> {
                let pools: Result<Vec<(i64, String)>, sqlx::Error> =
                    sqlx::query_as("SELECT id, name FROM pay_pools ORDER BY name")
                        .fetch_all(&self.pool)
                        .await;
                pools.map_err(|err| StoreError::from(err).during("pay_pools"))
            }

            async fn set_pay_rate(&self, rate: &NewPayRate, set_by: UserId, now: i64) -> StoreResult<()> {
                upsert_rate(&self.writer, rate, set_by, now).await.map_err(|err| err.during("set_pay_rate"))
            }

            async fn pay_rates(&self) -> StoreResult<Vec<PayRate>> {
                list_rates(&self.pool).await.map_err(|err| err.during("pay_rates"))
            }

            async fn assign_pay_pool(
                &self,
                rater_id: UserId,
                pool_id: Option<i64>,
                effective_day: i64,
                set_by: UserId,
                now: i64,
            ) -> StoreResult<()> {
                upsert_assignment(&self.writer, rater_id, pool_id, effective_day, set_by, now)
                    .await
                    .map_err(|err| err.during("assign_pay_pool"))
            }

            async fn pay_assignments(&self, rater_id: Option<UserId>) -> StoreResult<Vec<PayAssignment>> {
                list_assignments(&self.pool, rater_id).await.map_err(|err| err.during("pay_assignments"))
            }

            async fn work_days(
                &self,
                from_day: i64,
                until_day: i64,
                cap_ms: i64,
                rater_id: Option<UserId>,
            ) -> StoreResult<Vec<WorkDay>> {
                sum_work_days(&self.pool, from_day, until_day, cap_ms, rater_id)
                    .await
                    .map_err(|err| err.during("work_days"))
            }
        }
    };
}
pub(crate) use pay_sql;
