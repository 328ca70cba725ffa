//! The browser entry point: hydrates the server-rendered page. Nothing else lives here.
//! Built for wasm32 only (`scripts/build-site`); on other targets the crate is empty.
#![cfg(target_arch = "wasm32")]
#![recursion_limit = "512"]

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(arbiter_app::App);
}
