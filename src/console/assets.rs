//! The console's static files, embedded in the binary: no CDN, no fonts, no build step. They hold no data:
//! everything comes from the admin API with the token the operator signs in with. The script is a set of
//! ES modules (`ui/app.js` is the entry; one module per view and the shared ones it imports).

use crate::http::Exchange;

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file the console serves: path under `/console/`, body, content type.
const FILES: &[(&str, &str, &str)] = &[
    ("index.html", include_str!("ui/index.html"), HTML),
    ("app.css", include_str!("ui/app.css"), CSS),
    ("app.js", include_str!("ui/app.js"), JS),
    ("api.js", include_str!("ui/api.js"), JS),
    ("dom.js", include_str!("ui/dom.js"), JS),
    ("format.js", include_str!("ui/format.js"), JS),
    ("dialogs.js", include_str!("ui/dialogs.js"), JS),
    ("nav.js", include_str!("ui/nav.js"), JS),
    ("overview.js", include_str!("ui/overview.js"), JS),
    ("usage.js", include_str!("ui/usage.js"), JS),
    ("keys.js", include_str!("ui/keys.js"), JS),
    ("groups.js", include_str!("ui/groups.js"), JS),
    ("models.js", include_str!("ui/models.js"), JS),
    ("audit.js", include_str!("ui/audit.js"), JS),
    ("chart.js", include_str!("ui/chart.js"), JS),
];

/// The Content-Security-Policy of every console file: only this origin, no inline scripts.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The file at `path` (`/console` and `/console/` are the page itself).
fn find(path: &str) -> Option<&'static (&'static str, &'static str, &'static str)> {
    let name = match path {
        "/console" | "/console/" => "index.html",
        p => p.strip_prefix("/console/")?,
    };
    FILES.iter().find(|(n, _, _)| *n == name)
}

/// Serves the console's files under `/console/`. Returns false for other paths.
pub(crate) fn serve(ex: &mut Exchange) -> bool {
    let Some((_, body, ty)) = find(&ex.request.path) else {
        return false;
    };
    let headers = [
        ("content-type", *ty),
        ("cache-control", "no-cache"),
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
    ];
    let _ = ex.response().send(200, &headers, body.as_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every module a served module imports is served too, and the page loads the entry as a module.
    #[test]
    fn every_imported_module_is_served() {
        for (name, body, ty) in FILES.iter().filter(|(_, _, ty)| *ty == JS) {
            assert_eq!(*ty, JS);
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let target = line
                    .split("from './")
                    .nth(1)
                    .and_then(|rest| rest.split('\'').next())
                    .unwrap_or_else(|| {
                        panic!("{name}: an import not of the form from './x.js': {line}")
                    });
                assert!(
                    find(&format!("/console/{target}")).is_some(),
                    "{name} imports {target}, which is not served"
                );
            }
        }
        let (_, index, _) = find("/console/").unwrap();
        assert!(index.contains(r#"<script type="module" src="/console/app.js">"#));
        assert!(find("/console/nothing.js").is_none());
        assert!(find("/consoleapp.js").is_none());
    }
}
