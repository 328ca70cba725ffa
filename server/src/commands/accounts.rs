//! `arbiter user`, `arbiter team` and `arbiter token`: accounts administered on the host.

use super::open;
use crate::{TeamAction, TokenAction, UserAction};
use anyhow::Context;
use arbiter_domain::accounts::Role;
use arbiter_store::Database;

/// `arbiter token`.
pub async fn token(args: crate::TokenArgs) -> anyhow::Result<()> {
    let crate::TokenArgs {
        database_url,
        action,
    } = args;
    token_action(&open(&database_url).await?, action).await
}

/// `arbiter user`.
pub async fn user(args: crate::UserArgs) -> anyhow::Result<()> {
    let crate::UserArgs {
        database_url,
        action,
    } = args;
    let database = open(&database_url).await?;
    let store = database.store();
    match action {
        UserAction::Create {
            username,
            role,
            password,
        } => {
            let role: Role = role.parse().map_err(anyhow::Error::msg)?;
            arbiter_engine::accounts::create_user(store.as_ref(), &username, &password, role)
                .await?;
            println!("created {role} `{username}`");
        }
        UserAction::SetTeam { username, team } => {
            arbiter_engine::accounts::set_team(store.as_ref(), &username, &team).await?;
            println!("`{username}` is in team `{team}`");
        }
        UserAction::ResetPassword { username, password } => {
            let revoked = arbiter_engine::accounts::reset_password(
                store.as_ref(),
                &username,
                &password,
                arbiter_store::now_ms(),
            )
            .await?;
            println!(
                "password of `{username}` reset; their sessions are ended and {revoked} API token(s) revoked"
            );
        }
    }
    Ok(())
}

/// `arbiter team`.
pub async fn team(args: crate::TeamArgs) -> anyhow::Result<()> {
    let crate::TeamArgs {
        database_url,
        action,
    } = args;
    let database = open(&database_url).await?;
    let store = database.store();
    match action {
        TeamAction::SetWeight { team, weight } => {
            arbiter_engine::accounts::set_team_weight(store.as_ref(), &team, weight).await?;
            println!("team `{team}` now weighs {weight} in fair share");
        }
    }
    Ok(())
}

async fn token_action(database: &Database, action: TokenAction) -> anyhow::Result<()> {
    use arbiter_engine::accounts::api_tokens;
    let store = database.store();
    let now = arbiter_store::now_ms();
    match action {
        TokenAction::Create {
            username,
            name,
            days,
        } => {
            let user = store
                .find_user_credentials(&username)
                .await?
                .with_context(|| format!("no user named `{username}`"))?
                .user;
            let (token, plaintext) =
                api_tokens::create_token(store.as_ref(), &user, &name, days, now).await?;
            eprintln!(
                "token {} (`{}`) for {username}; it is shown only now:",
                token.id, token.name
            );
            println!("{plaintext}");
        }
        TokenAction::List => {
            for token in store.api_tokens(None).await? {
                let state = if token.is_live(now) {
                    "live"
                } else if token.revoked_at.is_some() {
                    "revoked"
                } else {
                    "expired"
                };
                println!(
                    "{:>5}  {:<16} {:<20} {}…  {state}",
                    token.id, token.username, token.name, token.prefix
                );
            }
        }
        TokenAction::Revoke { id } => {
            if store.revoke_api_token(id, None, now).await? {
                println!("token {id} revoked");
            } else {
                anyhow::bail!("no live token with id {id}");
            }
        }
    }
    Ok(())
}
