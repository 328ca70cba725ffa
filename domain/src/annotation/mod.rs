//! Human annotation: how an item's labels become its verdict (adjudication), how labels are
//! drawn for QC review, gold items and training, SLA deadlines and the queue's forecast, and
//! agreement between raters. Pure: the queue itself (claims, leases, overlap) lives in the
//! store.

pub mod adjudication;
pub mod agreement;
pub mod consensus;
pub mod decided;
pub mod gold;
pub mod pay;
pub mod pool;
pub mod preference;
pub mod pushed;
pub mod queue_scan;
pub mod review;
pub mod rubric;
pub mod shown;
pub mod sla;
pub mod task;
