//! Datasets: the list with an upload form, and one dataset's revisions and items.
//!
//! The upload is a plain multipart form posting to `/datasets/upload` (a server route, since
//! server functions take no files before hydration); errors come back in `?error=`.

use crate::catalog::api::{dataset_detail, list_datasets};
use crate::components::ErrorNote;
use crate::format::short_hash;
use crate::format::{format_time, route_id};
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

#[component]
pub fn DatasetsPage() -> impl IntoView {
    let datasets = Resource::new(|| (), |_| list_datasets());
    let query = use_query_map();
    let error = move || query.read().get("error");
    view! {
        <h1>"Datasets"</h1>
        <section class="card">
            <h2>"Upload a dataset"</h2>
            <p class="hint">
                "JSONL (one object per line with " <code>"id"</code> ", " <code>"input"</code> ", "
                <code>"target"</code> " and optional " <code>"category"</code>
                ", or any fields an eval maps), CSV, Parquet, gzip-compressed JSONL or CSV, or a .zip "
                "of one data file and the images its items name. Uploading to an existing name adds a revision."
            </p>
            {move || error().map(|message| view! { <p class="error" role="alert">{message}</p> })}
            <form method="post" action="/datasets/upload" enctype="multipart/form-data" class="stack">
                <label>"Name" <input name="name" required maxlength="200"/></label>
                <label>"File" <input type="file" name="file" accept=".jsonl,.json,.csv,.txt,.gz,.parquet,.pq,.zip" required/></label>
                <button type="submit">"Upload"</button>
            </form>
        </section>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match datasets.await {
                    Ok(datasets) => view! {
                        <table>
                            <thead><tr><th>"Name"</th><th>"Latest revision"</th><th>"Items"</th><th>"Revisions"</th></tr></thead>
                            <tbody>
                                {datasets.into_iter().map(|dataset| {
                                    let (hash, items) = dataset.latest_revision.as_ref()
                                        .map(|r| (r.content_hash.clone(), r.item_count))
                                        .unwrap_or_default();
                                    view! {
                                        <tr>
                                            <td><a href=format!("/datasets/{}", dataset.id)>{dataset.name}</a></td>
                                            <td><code>{short_hash(&hash)}</code></td>
                                            <td>{items}</td>
                                            <td>{dataset.revision_count}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn DatasetPage() -> impl IntoView {
    let id = route_id();
    let detail = Resource::new(id, dataset_detail);
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(detail) => view! {
                        <h1>"Dataset " {detail.dataset.name.clone()}</h1>
                        <section class="card">
                            <h2>"Revisions"</h2>
                            <table>
                                <thead><tr><th>"Revision (content hash)"</th><th>"Items"</th><th>"File"</th><th>"Uploaded"</th></tr></thead>
                                <tbody>
                                    {detail.revisions.into_iter().map(|revision| view! {
                                        <tr>
                                            <td><code data-testid="revision-hash">{revision.content_hash}</code></td>
                                            <td>{revision.item_count}</td>
                                            <td>{revision.source_name}</td>
                                            <td>{format_time(revision.created_at)}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                        </section>
                        <section class="card">
                            <h2>"Items of the latest revision"</h2>
                            <table>
                                <thead><tr><th>"Case id"</th><th>"Input"</th><th>"Target"</th><th>"Category"</th></tr></thead>
                                <tbody>
                                    {detail.items.into_iter().map(|item| view! {
                                        <tr>
                                            <td><code>{item.case_id}</code></td>
                                            <td>{item.input}</td>
                                            <td>{item.target}</td>
                                            <td>{item.category}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                        </section>
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Suspense>
    }
}
