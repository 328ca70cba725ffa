//! Security stories, one module per weakness they prevent (issue 19): each fails on the code
//! before its fix. Those that involve the store run on both backends.

mod a_new_secret_key_keeps_sealed_secrets;
mod leads_bind_operator_keys_to_hosts;
mod leads_never_act_on_admins;
mod mail_never_goes_out_in_clear_text;
mod prompts_stay_within_their_bounds;
mod raters_never_see_task_ids;
mod researchers_change_only_their_teams_objects;
mod researchers_see_only_their_own_webhook_urls;
mod reviewers_decide_only_what_they_were_served;
