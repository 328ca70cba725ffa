//! The model file the tests read: `scripts/fetch-model` puts it in the cache folder looked in
//! here (or set ARBITER_TEST_GGUF). Without it a test says so and passes, unless
//! ARBITER_REQUIRE_MODEL=1, which `scripts/test` sets once it has fetched the file.

use std::path::PathBuf;

pub fn model_file() -> Option<PathBuf> {
    let path = match std::env::var_os("ARBITER_TEST_GGUF") {
        Some(path) => PathBuf::from(path),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache"))
                })?;
            cache.join("arbiter/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        }
    };
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var("ARBITER_REQUIRE_MODEL").as_deref() != Ok("1"),
        "ARBITER_REQUIRE_MODEL=1 but there is no model file at {}",
        path.display()
    );
    eprintln!(
        "skipping: no model file at {} (run scripts/fetch-model)",
        path.display()
    );
    None
}
