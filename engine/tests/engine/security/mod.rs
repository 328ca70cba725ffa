//! Security stories on both backends, one module per weakness they prevent (issue 19's
//! object-level checks): each fails on the code before its fix.

mod a_new_secret_key_keeps_sealed_secrets;
mod leads_never_act_on_admins;
mod raters_never_see_task_ids;
mod researchers_see_only_their_own_webhook_urls;
mod reviewers_decide_only_what_they_were_served;
