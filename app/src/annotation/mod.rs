//! The human queue: labelling, a rater's feedback, senior review, the rater pool, rater pay and
//! the lead's queue page.

pub(crate) mod annotate;
pub mod api;
pub(crate) mod feedback;
pub mod pay;
pub mod preferences;
pub(crate) mod queue;
pub(crate) mod raters;
pub(crate) mod review;
pub(crate) mod rubric_form;
pub(crate) mod rubrics;

pub use annotate::AnnotatePage;
pub use feedback::FeedbackPage;
pub use pay::PayPage;
pub use preferences::PreferencesPage;
pub use queue::QueuePage;
pub use raters::RatersPage;
pub use review::ReviewPage;
pub use rubrics::RubricsPage;
