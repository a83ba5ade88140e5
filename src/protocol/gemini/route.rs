//! The Gemini API's paths: the model and the method are in them (`/v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent`, `:countTokens`, the same under `/v1/`), and the mistakes its clients' base URLs
//! make (a doubled `/v1beta`, an endpoint path in the base URL).

use std::borrow::Cow;

use super::{Gemini, VERSION};
use crate::http::HttpRequest;
use crate::protocol::codec::{Framing, ModelPaths, Serves};
use crate::protocol::{ApiError, Cause};

/// The API versions a path may start with (the SDKs' default is `v1beta`; `v1alpha` is theirs to choose
/// too).
const VERSIONS: [&str; 3] = ["/v1beta/", "/v1/", "/v1alpha/"];

/// The methods the gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    Generate,
    Stream,
    CountTokens,
    /// `:embedContent`: one content's vector.
    Embed,
    /// `:batchEmbedContents`: a vector per request of the batch.
    BatchEmbed,
}

impl Method {
    fn named(name: &str) -> Option<Method> {
        match name {
            "generateContent" => Some(Method::Generate),
            "streamGenerateContent" => Some(Method::Stream),
            "countTokens" => Some(Method::CountTokens),
            "embedContent" => Some(Method::Embed),
            "batchEmbedContents" => Some(Method::BatchEmbed),
            _ => None,
        }
    }
}

/// A path the gateway serves, taken apart: the model as written (a tuned model's `tunedModels/` kept, so it
/// can be refused by name) and the method.
pub(super) struct PathTarget<'p> {
    pub model: Cow<'p, str>,
    pub method: Method,
}

/// `path` taken apart, if it is `/{version}/models/{model}:{method}` (or `tunedModels/`) of a method the
/// gateway serves. The model is percent-decoded; a second `models/` before it is left off.
pub(super) fn target(path: &str) -> Option<PathTarget<'_>> {
    let rest = VERSIONS.iter().find_map(|v| path.strip_prefix(v))?;
    let (collection, rest) = match rest.strip_prefix("models/") {
        Some(r) => ("", r),
        None => ("tunedModels/", rest.strip_prefix("tunedModels/")?),
    };
    let (model, method) = rest.rsplit_once(':')?;
    let method = Method::named(method)?;
    let model = model.strip_prefix("models/").unwrap_or(model);
    // A model's name may hold a `/` (`Qwen/Qwen2.5-7B-Instruct`, as vLLM names them: the SDKs put it in the
    // path as it is); one holding another endpoint's path is a base URL's mistake (see `hint`).
    if model.is_empty() || model.contains("models/") || model.contains("/v1") {
        return None;
    }
    let decoded = if model.contains('%') {
        Cow::Owned(crate::http::decode_path_segment(model).ok()?)
    } else {
        Cow::Borrowed(model)
    };
    let model = if collection.is_empty() {
        decoded
    } else {
        Cow::Owned(format!("{collection}{decoded}"))
    };
    Some(PathTarget { model, method })
}

/// A hint for a path no endpoint serves that a Gemini client's base URL made: a doubled version
/// (`/v1beta/v1beta/…`, the base URL given with its version) or an endpoint path inside the base URL.
pub(super) fn hint(path: &str) -> Option<String> {
    // A Gemini client given an OpenAI-style base URL (`http://<host>/v1`) puts its own version after it.
    for v in ["/v1beta/", "/v1alpha/"] {
        if let Some(rest) = path.strip_prefix("/v1").filter(|r| r.starts_with(v)) {
            return Some(format!(
                "The path has `/v1` before the Gemini API's own `{}` (did you mean `{rest}`?): a Gemini client \
                 (the google-genai SDKs, Gemini CLI's GOOGLE_GEMINI_BASE_URL) takes the base URL `http://<host>` \
                 without a version, and adds `{v}models/…` itself.",
                v.trim_end_matches('/')
            ));
        }
    }
    for v in VERSIONS {
        let doubled = format!("{}{}", v.trim_end_matches('/'), v);
        let fixed = path.replacen(&doubled, v, 1);
        // A doubled `/v1` is Gemini's mistake only where the path is then one of its endpoints.
        if path.contains(&doubled) && (target(&fixed).is_some() || v == VERSIONS[0]) {
            return Some(format!(
                "The path has a doubled `{}` (did you mean `{fixed}`?). Gemini clients (the google-genai SDKs, \
                 Gemini CLI's GOOGLE_GEMINI_BASE_URL) take the base URL `http://<host>` without a version: they \
                 add `{v}models/…` themselves.",
                v.trim_end_matches('/')
            ));
        }
    }
    let methods = [
        ":generateContent",
        ":streamGenerateContent",
        ":countTokens",
        ":embedContent",
        ":batchEmbedContents",
    ];
    let inner = methods
        .iter()
        .any(|m| path.find(m).is_some_and(|at| at + m.len() < path.len()));
    if inner && path.matches("/models/").count() > 1 {
        return Some(
            "The path has a Gemini endpoint inside it: the client was given a base URL that already contains \
             `/v1beta/models/{model}:generateContent` and appended its own. Set the client's base URL to \
             `http://<host>` (no version, no endpoint); it appends `/v1beta/models/{model}:…` itself."
                .into(),
        );
    }
    None
}

/// A model name as a path segment: characters outside `[A-Za-z0-9._-]` percent-encoded.
fn segment(model: &str) -> Cow<'_, str> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if model.bytes().all(plain) {
        return Cow::Borrowed(model);
    }
    let mut out = String::with_capacity(model.len() + 8);
    for b in model.bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Cow::Owned(out)
}

/// The path of `method` for `model` under a base URL.
pub(super) fn method_path(model: &str, method: &str) -> Cow<'static, str> {
    Cow::Owned(format!("/{VERSION}/models/{}:{method}", segment(model)))
}

/// `/v1beta/models/{model}:generateContent`, `:streamGenerateContent` and `:countTokens`, also under `/v1/`.
impl ModelPaths for Gemini {
    fn serves(&self, path: &str) -> Option<Serves> {
        target(path).map(|t| match t.method {
            Method::Generate | Method::Stream => Serves::Generate,
            Method::CountTokens => Serves::CountTokens,
            Method::Embed | Method::BatchEmbed => Serves::Embed,
        })
    }

    fn path_model<'p>(&self, path: &'p str) -> Option<Cow<'p, str>> {
        target(path).map(|t| t.model)
    }

    fn path_stream(&self, path: &str) -> Option<bool> {
        target(path).map(|t| t.method == Method::Stream)
    }

    fn request_path(&self, model: &str, stream: bool) -> Cow<'static, str> {
        if stream {
            Cow::Owned(format!("{}?alt=sse", method_path(model, "streamGenerateContent")))
        } else {
            method_path(model, "generateContent")
        }
    }

    fn count_path(&self, model: &str) -> Cow<'static, str> {
        method_path(model, "countTokens")
    }

    fn path_hint(&self, path: &str) -> Option<String> {
        hint(path)
    }

    /// The Gemini API's paths (`/v1beta/…`, or a method after a colon).
    fn shapes_errors_at(&self, path: &str) -> bool {
        path.starts_with("/v1beta/") || target(path).is_some()
    }

    /// Google's SDKs send `x-goog-api-key` (or `x-goog-api-client`), or the key as a query parameter.
    fn recognizes(&self, req: &HttpRequest) -> bool {
        req.header("x-goog-api-key").is_some()
            || req.header("x-goog-api-client").is_some()
            || req.query.split('&').any(|p| p.starts_with("key="))
            || req.path.starts_with("/v1beta/")
    }

    /// A tuned model lives in the account the gateway's upstream key belongs to.
    fn refuse_path(&self, path: &str) -> Result<(), ApiError> {
        match target(path).map(|t| t.model) {
            Some(m) if m.starts_with("tunedModels/") => Err(ApiError::invalid_param(
                "model",
                format!(
                    "`{m}` is a tuned model, kept in the operator's upstream account, which is shared by every key \
                     of this gateway; it is not served here. GET /v1beta/models lists the models your key may use."
                ),
            )
            .with_cause(Cause::AccountFeatureRefused)),
            _ => Ok(()),
        }
    }

    /// `?alt=sse` asks for SSE; without it, Google streams a JSON array.
    fn framing(&self, req: &HttpRequest) -> Framing {
        let sse = req.query.split('&').any(|p| p == "alt=sse");
        if sse || self.path_stream(&req.path) != Some(true) {
            Framing::Sse
        } else {
            Framing::JsonArray
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_apart() {
        let t = target("/v1beta/models/gemini-2.5-flash:streamGenerateContent").unwrap();
        assert_eq!((t.model.as_ref(), t.method), ("gemini-2.5-flash", Method::Stream));
        let t = target("/v1/models/m%40x:countTokens").unwrap();
        assert_eq!((t.model.as_ref(), t.method), ("m@x", Method::CountTokens));
        let t = target("/v1beta/models/models/g:generateContent").unwrap();
        assert_eq!(t.model, "g");
        let t = target("/v1beta/tunedModels/mine:generateContent").unwrap();
        assert_eq!(t.model, "tunedModels/mine");
        let t = target("/v1beta/models/Qwen/Qwen2.5-7B-Instruct:generateContent").unwrap();
        assert_eq!(t.model, "Qwen/Qwen2.5-7B-Instruct");
        let t = target("/v1alpha/models/hf.co/org/m:Q4_K_M:streamGenerateContent").unwrap();
        assert_eq!((t.model.as_ref(), t.method), ("hf.co/org/m:Q4_K_M", Method::Stream));
        for bad in [
"/v1beta/models/g:predict",
            "/v1beta/models/:generateContent",
            "/v1beta/models",
            "/v2/models/g:generateContent",
            "/v1/chat/completions",
            "/v1beta/models/g:generateContent/v1beta/models/g:generateContent",
        ] {
            assert!(target(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn base_url_mistakes_are_named() {
        assert!(hint("/v1beta/v1beta/models/g:generateContent")
            .unwrap()
            .contains("doubled `/v1beta`"));
        let h = hint("/v1beta/models/g:generateContent/v1beta/models/g:generateContent").unwrap();
        assert!(h.contains("endpoint inside it"), "{h}");
        assert!(hint("/v1beta/models/g:embedContent").is_none());
        assert!(hint("/v1/v1/chat/completions").is_none(), "OpenAI's doubled /v1 is not Gemini's");
        assert!(hint("/v1/v1/models/g:countTokens").unwrap().contains("doubled `/v1`"));
    }
}
