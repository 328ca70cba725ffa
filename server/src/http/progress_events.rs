//! A run's progress as server-sent events: for `arbiter wait` through the REST API (by
//! token) and for the run page (by session). The run's status and done counter (one row) are
//! read ten times a second and its whole progress only when they move, so a follower hears of
//! the run's end within a tenth of a second instead of at its next poll; the stream ends after
//! the event that shows the run settled.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbiter_app::guard::AppState;
use arbiter_domain::accounts::Permission;
use arbiter_domain::ids::RunId;
use arbiter_domain::run::{RunProgress, RunStatus};
use arbiter_store::Store;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use tower_sessions::Session;

use super::forms::{service_error_response, session_allowed};

/// How often a followed run's status and done counter are read (one row).
const POLL: Duration = Duration::from_millis(100);
/// The most often its whole progress is read while it moves, and the longest between two
/// whole readings (identities in flight and errors change without `done` moving).
const FULL_READ_GAP: Duration = Duration::from_millis(500);
const FULL_READ_EVERY: Duration = Duration::from_secs(2);

/// What makes a new `progress` event: the run's state or counts moved.
fn moved(progress: &RunProgress) -> (RunStatus, i64, i64, i64) {
    (
        progress.status,
        progress.done,
        progress.in_flight,
        progress.errors,
    )
}

/// A follower's reading of the run between events.
struct Following {
    store: Arc<dyn Store>,
    id: RunId,
    /// The last whole reading, when it was read, and what its event showed.
    read: RunProgress,
    read_at: Instant,
    shown: Option<(RunStatus, i64, i64, i64)>,
}

impl Following {
    /// The next reading worth an event: the run's status and done counter every [`POLL`],
    /// its whole progress when its status changed, when `done` moved (at most every
    /// [`FULL_READ_GAP`]) or every [`FULL_READ_EVERY`].
    async fn next(&mut self) -> Result<RunProgress, String> {
        loop {
            if self.shown != Some(moved(&self.read)) {
                self.shown = Some(moved(&self.read));
                return Ok(self.read.clone());
            }
            tokio::time::sleep(POLL).await;
            let state = self
                .store
                .run_state(self.id)
                .await
                .map_err(|err| err.to_string())?;
            let since = self.read_at.elapsed();
            let due = match state {
                Some((status, _)) if status != self.read.status => true,
                Some((_, done)) if done != self.read.done => since >= FULL_READ_GAP,
                _ => since >= FULL_READ_EVERY,
            };
            if due {
                self.read = arbiter_engine::runs::run_progress(self.store.as_ref(), self.id)
                    .await
                    .map_err(|err| err.to_string())?;
                self.read_at = Instant::now();
            }
        }
    }
}

/// The stream of `progress` events of the run whose progress is `first`: `first` at once,
/// then each reading that moved, ending after a settled one. A failed reading sends an
/// `error` event and ends the stream.
pub fn progress_events(
    store: Arc<dyn Store>,
    first: RunProgress,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let following = Following {
        store,
        id: first.id,
        read: first,
        read_at: Instant::now(),
        shown: None,
    };
    let events = futures::stream::unfold(Some(following), |following| async move {
        let mut following = following?;
        match following.next().await {
            Ok(progress) => {
                let event = Event::default()
                    .event("progress")
                    .json_data(&progress)
                    .unwrap_or_else(|_| Event::default().event("progress"));
                let more = (!progress.status.is_settled()).then_some(following);
                Some((Ok(event), more))
            }
            Err(problem) => Some((Ok(Event::default().event("error").data(problem)), None)),
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// The run page's stream: `/runs/{id}/events`, for a signed-in user who may view results.
pub async fn page_events(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<RunId>,
) -> Response {
    if let Err(refused) = session_allowed(&state, &session, Permission::ViewResults).await {
        return refused;
    }
    match arbiter_engine::runs::run_progress(state.store.as_ref(), id).await {
        Ok(first) => progress_events(state.store.clone(), first).into_response(),
        Err(err) => service_error_response(&err),
    }
}
