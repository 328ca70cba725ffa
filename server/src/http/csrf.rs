//! Cross-site request forgery protection for everything a session cookie can authorise: form
//! posts and server functions.
//!
//! Session cookies are `SameSite=Lax`, so browsers already leave them off cross-site POSTs; this
//! layer is the second, independent check that OWASP recommends for cookie-authenticated state
//! changes: a request that changes state must come from a page of this site, as the browser's
//! `Sec-Fetch-Site`, `Origin` or `Referer` header says. Clients that send none of them (curl,
//! scripts, the CLI) are not browsers and cannot be forged by a third-party page. The REST API
//! authenticates by bearer token, never by cookie, so it needs no such check.

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// Origins allowed besides the request's own host, e.g. `https://arbiter.example.com` behind
/// a proxy that rewrites `Host` (comma-separated in `ARBITER_TRUSTED_ORIGINS`).
pub fn trusted_origins_from_env() -> Vec<String> {
    std::env::var("ARBITER_TRUSTED_ORIGINS")
        .unwrap_or_default()
        .split(',')
        .map(|origin| origin.trim().trim_end_matches('/').to_ascii_lowercase())
        .filter(|origin| !origin.is_empty())
        .collect()
}

/// The `scheme://host[:port]` part of a URL, lowercased.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}").to_ascii_lowercase())
}

/// Why a state-changing request is refused as cross-site; `None` when it may proceed.
pub fn cross_site_reason(
    method: &Method,
    headers: &HeaderMap,
    trusted: &[String],
) -> Option<String> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    let text = |name: header::HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
    // Fetch metadata, sent by every current browser, is the most direct answer.
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if site == "cross-site" || site == "same-site" {
            return Some(format!(
                "this request came from another site ({site}); Arbiter only accepts changes made from its own pages"
            ));
        }
    }
    let claimed = match (text(header::ORIGIN), text(header::REFERER)) {
        // Some privacy settings send `Origin: null`; fall back to the referrer then.
        (Some(origin), _) if origin != "null" => origin_of(origin),
        (_, Some(referer)) => origin_of(referer),
        (Some(_), None) => {
            return Some("this request has an opaque origin; reload the page and try again".into())
        }
        (None, None) => return None,
    };
    let Some(claimed) = claimed else {
        return Some("this request's origin could not be read".into());
    };
    let host = text(header::HOST).unwrap_or_default().to_ascii_lowercase();
    let same_host = claimed
        .split_once("://")
        .is_some_and(|(_, authority)| authority == host);
    if same_host || trusted.contains(&claimed) {
        None
    } else {
        Some(format!(
            "this request came from {claimed}, not from this site; Arbiter only accepts changes made from its own pages"
        ))
    }
}

/// Refuses cross-site state changes with 403, except on the token-authenticated REST API.
pub async fn refuse_cross_site(request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with("/api/v1/") {
        let trusted = request
            .extensions()
            .get::<TrustedOrigins>()
            .map(|trusted| trusted.0.as_slice())
            .unwrap_or_default();
        if let Some(reason) = cross_site_reason(request.method(), request.headers(), trusted) {
            tracing::warn!(path = %request.uri().path(), %reason, "cross-site request refused");
            return (StatusCode::FORBIDDEN, Json(json!({ "error": reason }))).into_response();
        }
    }
    next.run(request).await
}

/// The configured [`trusted_origins_from_env`], as a request extension.
#[derive(Clone, Debug, Default)]
pub struct TrustedOrigins(pub Vec<String>);

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn same_origin_posts_pass_and_foreign_ones_are_refused() {
        let post = Method::POST;
        let own = headers(&[
            ("host", "127.0.0.1:3000"),
            ("origin", "http://127.0.0.1:3000"),
        ]);
        assert_eq!(cross_site_reason(&post, &own, &[]), None);
        let foreign = headers(&[
            ("host", "127.0.0.1:3000"),
            ("origin", "https://evil.example"),
        ]);
        assert!(cross_site_reason(&post, &foreign, &[])
            .unwrap()
            .contains("https://evil.example"));
        // A subdomain or another port is another origin.
        let port = headers(&[
            ("host", "127.0.0.1:3000"),
            ("origin", "http://127.0.0.1:3001"),
        ]);
        assert!(cross_site_reason(&post, &port, &[]).is_some());
    }

    #[test]
    fn fetch_metadata_wins_and_reads_are_never_checked() {
        let cross = headers(&[
            ("host", "a"),
            ("origin", "http://a"),
            ("sec-fetch-site", "cross-site"),
        ]);
        assert!(cross_site_reason(&Method::POST, &cross, &[]).is_some());
        assert_eq!(cross_site_reason(&Method::GET, &cross, &[]), None);
        let own = headers(&[("host", "a"), ("sec-fetch-site", "same-origin")]);
        assert_eq!(cross_site_reason(&Method::POST, &own, &[]), None);
    }

    #[test]
    fn the_referrer_stands_in_for_a_missing_or_null_origin() {
        let referred = headers(&[
            ("host", "a:1"),
            ("origin", "null"),
            ("referer", "http://a:1/runs/3?x=1"),
        ]);
        assert_eq!(cross_site_reason(&Method::POST, &referred, &[]), None);
        let foreign = headers(&[("host", "a:1"), ("referer", "http://b:1/page")]);
        assert!(cross_site_reason(&Method::POST, &foreign, &[]).is_some());
        let opaque = headers(&[("host", "a:1"), ("origin", "null")]);
        assert!(cross_site_reason(&Method::POST, &opaque, &[]).is_some());
        // Non-browser clients send neither and are not forgeable by a web page.
        assert_eq!(
            cross_site_reason(&Method::POST, &headers(&[("host", "a")]), &[]),
            None
        );
    }

    #[test]
    fn trusted_origins_cover_a_proxy_that_rewrites_the_host() {
        let proxied = headers(&[
            ("host", "10.0.0.5:3000"),
            ("origin", "https://arbiter.example.com"),
        ]);
        assert!(cross_site_reason(&Method::POST, &proxied, &[]).is_some());
        let trusted = vec!["https://arbiter.example.com".to_string()];
        assert_eq!(cross_site_reason(&Method::POST, &proxied, &trusted), None);
    }
}
