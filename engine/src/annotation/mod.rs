//! Use cases of the human queue beyond labelling (the queue itself lives in the store): senior
//! review of labels and spot checks of reviewers ([`review`]), gold items and the QC rates
//! ([`quality`]), the rater pool ([`raters`]), agreement between raters on a run or a queue
//! ([`agreement`]), the lead's queue report ([`queue`]), rater hours and pay ([`pay`]), and
//! items pushed from outside ([`pushed`]).
//!
//! Callers have checked the session's role; this layer checks input.

pub mod agreement;
pub mod pay;
pub mod pushed;
pub mod quality;
pub mod queue;
pub mod raters;
pub mod review;
