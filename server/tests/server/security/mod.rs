//! Security tests, one module per weakness they prevent (issue 19's areas): each fails on the
//! code before its fix.

#[cfg(feature = "local-model")]
mod answers_cannot_write_a_judges_turns;
mod outbound_requests_reach_only_what_the_operator_allows;
mod sessions_end_when_they_should;
mod the_login_throttle_holds_under_a_burst;
