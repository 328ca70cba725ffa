//! Arbiter's browser UI: the page shell, the routes, and one folder per area of the pipeline
//! (the engine's stages), each with its pages and its server functions (`api`).
//!
//! Compiled twice: with `ssr` into the server (where server functions run against the engine)
//! and with `hydrate` into the browser's wasm (where they become HTTP calls). Pages show the
//! domain's own types; a view type exists only where a page must not see some fields (an
//! annotator's task) or needs something the server computes beside them.
//!
//! - [`accounts`]: sign-in and the Account page;
//! - [`catalog`]: datasets, checkpoints, evals;
//! - [`runs`]: runs and their pages;
//! - [`grading`]: judges, triage policies;
//! - [`annotation`]: labelling, review, raters, the queue;
//! - [`reports`]: comparisons and trends;
//! - [`operations`]: system health, suites, webhooks.
#![recursion_limit = "512"]
// A server function takes one argument per form field, and `#[server]` generates the browser's
// stub without carrying an item-level `allow`, so the lint is relaxed for the crate.
#![allow(clippy::too_many_arguments)]

// One build never holds both: the server would run the browser's effects while it renders a
// page (tokio's `spawn_local` outside a `LocalSet`: a panic, and a dropped connection).
#[cfg(all(feature = "ssr", feature = "hydrate"))]
compile_error!("arbiter-app's `ssr` and `hydrate` were unified: build `frontend` for wasm32 only (scripts/build-site)");

pub mod accounts;
pub mod annotation;
pub mod catalog;
mod components;
mod format;
pub mod grading;
#[cfg(feature = "ssr")]
pub mod guard;
mod home;
mod keys;
mod nav;
pub mod operations;
pub mod reports;
pub mod runs;
mod shown;

use accounts::{AccountPage, LoginPage, PasswordPage};
use annotation::{
    AnnotatePage, FeedbackPage, PayPage, PreferencesPage, QueuePage, RatersPage, ReviewPage,
    RubricsPage,
};
use catalog::{CheckpointsPage, DatasetPage, DatasetsPage, EvalsPage};
use grading::{EvalPage, JudgePage, JudgesPage};
use home::HomePage;
use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::path;
use nav::Nav;
use operations::SystemPage;
use reports::{ComparePage, TrendsPage};
use runs::{RunPage, RunsPage};

/// The HTML document around the app, rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" type="image/svg+xml" href="/favicon.svg"/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="leptos" href="/pkg/arbiter.css"/>
        <Title text="Arbiter"/>
        <Router>
            <Nav/>
            <main>
                <Routes fallback=|| view! { <h1>"Page not found"</h1> }>
                    <Route path=path!("/") view=HomePage/>
                    <Route path=path!("/login") view=LoginPage/>
                    <Route path=path!("/datasets") view=DatasetsPage/>
                    <Route path=path!("/datasets/:id") view=DatasetPage/>
                    <Route path=path!("/checkpoints") view=CheckpointsPage/>
                    <Route path=path!("/evals") view=EvalsPage/>
                    <Route path=path!("/evals/:id") view=EvalPage/>
                    <Route path=path!("/judges") view=JudgesPage/>
                    <Route path=path!("/judges/:id") view=JudgePage/>
                    <Route path=path!("/runs") view=RunsPage/>
                    <Route path=path!("/runs/:id") view=RunPage/>
                    <Route path=path!("/annotate") view=AnnotatePage/>
                    <Route path=path!("/annotate/mine") view=FeedbackPage/>
                    <Route path=path!("/review") view=ReviewPage/>
                    <Route path=path!("/raters") view=RatersPage/>
                    <Route path=path!("/pay") view=PayPage/>
                    <Route path=path!("/rubrics") view=RubricsPage/>
                    <Route path=path!("/queue") view=QueuePage/>
                    <Route path=path!("/compare") view=ComparePage/>
                    <Route path=path!("/preferences") view=PreferencesPage/>
                    <Route path=path!("/trends") view=TrendsPage/>
                    <Route path=path!("/account") view=AccountPage/>
                    <Route path=path!("/account/password") view=PasswordPage/>
                    <Route path=path!("/system") view=SystemPage/>
                </Routes>
            </main>
        </Router>
    }
}
