//! The console's static files, embedded in the binary: no CDN, no fonts, no build step. They hold no data:
//! everything comes from the admin API with the token the operator signs in with.

use crate::http::Exchange;

const INDEX: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const APP_CSS: &str = include_str!("ui/app.css");

/// The Content-Security-Policy of every console file: only this origin, no inline scripts.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Serves `/console`, `/console/`, `/console/app.js`, `/console/app.css`. Returns false for other paths.
pub fn serve(ex: &mut Exchange) -> bool {
    let (body, ty) = match ex.request.path.as_str() {
        "/console" | "/console/" | "/console/index.html" => (INDEX, "text/html; charset=utf-8"),
        "/console/app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "/console/app.css" => (APP_CSS, "text/css; charset=utf-8"),
        _ => return false,
    };
    let headers = [
        ("content-type", ty),
        ("cache-control", "no-cache"),
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
    ];
    let _ = ex.response().send(200, &headers, body.as_bytes());
    true
}
