//! Arbiter's browser UI: the page shell, the routes, and one module per page.
//!
//! Compiled twice: with `ssr` into the server (where server functions run against the engine)
//! and with `hydrate` into the browser's wasm (where they become HTTP calls).
#![recursion_limit = "512"]
// A server function takes one argument per form field, and `#[server]` generates the browser's
// stub without carrying an item-level `allow`, so the lint is relaxed for the crate.
#![allow(clippy::too_many_arguments)]

pub mod account_api;
pub mod annotation_api;
pub mod api;
mod components;
pub mod grading_api;
#[cfg(feature = "ssr")]
pub mod guard;
pub mod health_api;
mod pages;
pub mod report_api;
pub mod suites_api;
pub mod trend_api;
pub mod views;
pub mod webhooks_api;

use components::Nav;
use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::path;
use pages::*;

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
                    <Route path=path!("/review") view=ReviewPage/>
                    <Route path=path!("/raters") view=RatersPage/>
                    <Route path=path!("/queue") view=QueuePage/>
                    <Route path=path!("/compare") view=ComparePage/>
                    <Route path=path!("/trends") view=TrendsPage/>
                    <Route path=path!("/account") view=AccountPage/>
                    <Route path=path!("/system") view=SystemPage/>
                </Routes>
            </main>
        </Router>
    }
}
