//! The Gemini API (Google's `generativelanguage` API): `POST /v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent` (SSE with `?alt=sse`, else a JSON array streamed), `:countTokens`, the same under
//! `/v1/`, and `GET /v1beta/models`. The codec ([`Gemini`]) and what it is made of: `route.rs` (the paths:
//! the model and the method are in them; base-URL mistakes), `decode.rs` (client requests into canonical
//! form), `schema.rs` (Gemini's `Schema` and JSON Schema), `reply.rs` (answers, streams, usage and the models
//! list to clients), `upstream.rs` (requests to Gemini upstreams, their answers and streams decoded),
//! `relay.rs` (a relayed stream read for usage, errors and its end), `client.rs` (the doctor's minimal
//! request and how the SDKs read the answer).

mod client;
mod decode;
mod names;
mod relay;
mod reply;
mod route;
mod schema;
mod upstream;

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::canon::{self, Usage};
use super::client::{ClientEvent, NoText};
use super::codec::{Codec, Framing, Headers, Listed, Serves};
use super::edit::{Edit, Put};
use super::hosted::{self, Asks, Rules};
use super::relay::Seen;
use super::sse::{push_event, SseEvent};
use super::{auth, ApiError, EgressOptions, StreamDecoder, StreamEncoder};
use crate::http::Request;
use route::Method;

/// The Gemini API codec.
pub struct Gemini;

/// The API version tollgate speaks to Gemini upstreams (and the doctor to gateways): the SDKs' default.
const VERSION: &str = "v1beta";

/// How Gemini clients are told to send their key.
const HOW: &str = "`x-goog-api-key: <key>` (or the `key` query parameter, or `Authorization: Bearer <key>`)";

/// Paid features in Gemini requests: its hosted tools (Google Search grounding, Maps, URL context, code
/// execution, computer use), each a key of a `Tool` object. Their uses are not counted in answers in a way
/// that prices them, so a request that offers one is billed its worst case. No tiers.
const HOSTED: Rules = Rules {
    families,
    forced: hosted::never_forced,
    with_tools: &["toolConfig"],
    shared_limit: None,
    search_option: None,
    tiers: &[],
    surcharges: &[],
    capped: &[],
};

/// The hosted tools of a Gemini `Tool` object: every key that is not `functionDeclarations` (which the
/// client runs), each by the name the rules give it; a key not known here is a tool Google runs too, named
/// as it came (so a model allows it only by that name).
fn families(t: &Map<String, Value>) -> hosted::Families<'_> {
    t.iter()
        .filter(|(k, v)| !v.is_null() && *k != "functionDeclarations")
        .map(|(k, _)| {
            let family = decode::hosted_family(k).map_or(Cow::Borrowed(k.as_str()), Cow::Borrowed);
            (family, Some(k.as_str()))
        })
        .collect()
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
fn method_path(model: &str, method: &str) -> Cow<'static, str> {
    Cow::Owned(format!("/{VERSION}/models/{}:{method}", segment(model)))
}

impl Codec for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }
    fn title(&self) -> &'static str {
        "Gemini API"
    }
    fn vendor(&self) -> &'static str {
        "Google"
    }
    fn clients(&self) -> &'static str {
        "Gemini clients (Gemini CLI, the google-genai SDKs)"
    }
    fn upstream_kind(&self) -> &'static str {
        "gemini"
    }
    fn path(&self) -> &'static str {
        "/v1beta/models/{model}:generateContent"
    }
    fn base_url_has_v1(&self) -> bool {
        false
    }
    fn count_tokens_path(&self) -> Option<&'static str> {
        Some("/v1beta/models/{model}:countTokens")
    }
    /// `/v1beta/models/{model}:generateContent`, `:streamGenerateContent` and `:countTokens`, also under
    /// `/v1/`.
    fn serves(&self, path: &str) -> Option<Serves> {
        route::target(path).map(|t| match t.method {
            Method::Generate | Method::Stream => Serves::Generate,
            Method::CountTokens => Serves::CountTokens,
        })
    }
    fn path_model<'p>(&self, path: &'p str) -> Option<Cow<'p, str>> {
        route::target(path).map(|t| t.model)
    }
    fn path_stream(&self, path: &str) -> Option<bool> {
        route::target(path).map(|t| t.method == Method::Stream)
    }
    fn sdk_request_path(&self, model: &str, stream: bool) -> Cow<'static, str> {
        if stream {
            Cow::Owned(format!("{}?alt=sse", method_path(model, "streamGenerateContent")))
        } else {
            method_path(model, "generateContent")
        }
    }
    fn models_list_path(&self) -> Option<&'static str> {
        Some("/v1beta/models")
    }
    fn path_hint(&self, path: &str) -> Option<String> {
        route::hint(path)
    }

    /// The Gemini API's paths (`/v1beta/…`, or a method after a colon).
    fn shapes_errors_at(&self, path: &str) -> bool {
        path.starts_with("/v1beta/") || route::target(path).is_some()
    }
    /// Google's SDKs send `x-goog-api-key` (or `x-goog-api-client`), or the key as a query parameter.
    fn recognizes(&self, req: &Request) -> bool {
        req.header("x-goog-api-key").is_some()
            || req.header("x-goog-api-client").is_some()
            || req.query.split('&').any(|p| p.starts_with("key="))
            || req.path.starts_with("/v1beta/")
    }
    fn presented_key<'r>(&self, req: &'r Request) -> Result<&'r str, ApiError> {
        auth::presented_key_in(req, "x-goog-api-key", Some("key"), HOW)
    }
    /// `?alt=sse` asks for SSE; without it, Google streams a JSON array.
    fn framing(&self, req: &Request) -> Framing {
        let sse = req.query.split('&').any(|p| p == "alt=sse");
        if sse || self.path_stream(&req.path) != Some(true) {
            Framing::Sse
        } else {
            Framing::JsonArray
        }
    }
    /// A tuned model lives in the account the gateway's upstream key belongs to.
    fn check_headers(&self, req: &Request) -> Result<(), ApiError> {
        match self.path_model(&req.path) {
            Some(m) if m.starts_with("tunedModels/") => Err(ApiError::invalid_param(
                "model",
                format!(
                    "`{m}` is a tuned model, kept in the operator's upstream account, which is shared by every key \
                     of this gateway; it is not served here. GET /v1beta/models lists the models your key may use."
                ),
            )
            .with_cause(super::Cause::AccountFeatureRefused)),
            _ => Ok(()),
        }
    }
    /// Proto field names become JSON names (`names.rs`), and a `model` in the body goes: the path names
    /// the model, and the upstream is sent its own in the path (a count's whole `generateContentRequest`
    /// names it too, `count_model_edit`).
    fn read_as_one(&self, body: &mut Value, counts: bool) -> Result<(), ApiError> {
        if counts {
            names::count(body)?;
        } else {
            names::generate(body)?;
        }
        if let Value::Object(o) = body {
            o.remove("model");
        }
        Ok(())
    }
    fn validate(&self, body: &Value) -> Result<(), ApiError> {
        decode::validate(body)
    }
    fn decode_request(&self, body: &Value) -> Result<canon::Request, ApiError> {
        decode::decode_request(body)
    }
    fn new_response_id(&self) -> String {
        crate::util::new_id("")
    }
    fn encode_response(&self, resp: &canon::Response, req: &canon::Request) -> Value {
        reply::encode_response(resp, req)
    }
    fn stream_encoder(
        &self,
        req: &canon::Request,
        _include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        Box::new(reply::GeminiStreamEncoder::new(req, request_id))
    }
    /// A blank line: the SDKs skip it between events, and it is white space in a JSON array (they would
    /// fail on an SSE comment).
    fn keepalive(&self) -> &'static [u8] {
        b"\n"
    }
    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8> {
        let v = json!({"error": err.google_object(request_id)});
        serde_json::to_vec(&v).unwrap_or_default()
    }
    /// Google's error object as a chunk of the stream (`google-genai` raises it).
    fn error_event(&self, err: &ApiError, request_id: &str, _next_seq: Option<u64>) -> Vec<u8> {
        let v = json!({"error": err.google_object(request_id)});
        let mut out = Vec::new();
        push_event(&mut out, None, &v.to_string());
        out
    }
    fn models_list(&self, models: &[Listed], _created: u64) -> Value {
        reply::models_list(models)
    }
    fn model_entry(&self, model: &Listed, _created: u64) -> Value {
        reply::model_entry(model)
    }

    fn limit_fields(&self) -> &'static [&'static str] {
        &["maxOutputTokens"]
    }
    fn limit_parent(&self) -> Option<&'static str> {
        Some("generationConfig")
    }
    /// Log probabilities, and audio or images out (`generationConfig`, in its JSON names: `read_as_one`
    /// rewrote the proto ones).
    fn asks_beyond_canon(&self, body: &Value) -> bool {
        let Some(g) = body.get("generationConfig") else {
            return false;
        };
        let media = g
            .get("responseModalities")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|v| v != "TEXT"));
        g.get("responseLogprobs") == Some(&Value::Bool(true))
            || g.get("logprobs").is_some_and(|v| !v.is_null())
            || g.get("speechConfig").is_some_and(|v| !v.is_null())
            || media
    }
    fn hosted_asks(&self, body: &Value) -> Result<Asks, ApiError> {
        hosted::asks(body, &HOSTED)
    }
    /// Gemini answers do not count hosted uses in a way they are priced by.
    fn reports_tool_uses(&self) -> bool {
        false
    }
    fn decode_count_request(&self, body: &Value) -> Result<canon::Request, ApiError> {
        decode::decode_count_request(body)
    }
    fn count_answer(&self, input_tokens: u64) -> Vec<u8> {
        json!({ "totalTokens": input_tokens })
            .to_string()
            .into_bytes()
    }
    fn counted_tokens(&self, raw: &[u8]) -> Option<u64> {
        serde_json::from_slice::<Value>(raw)
            .ok()?
            .get("totalTokens")?
            .as_u64()
    }
    /// A whole `generateContentRequest` names its model (`models/{model}`): the upstream's, as the path.
    fn count_model_edit<'a>(&self, model: &'a str) -> Option<(&'static str, Edit<'a>)> {
        Some((
            "generateContentRequest",
            Edit::ReplaceIn("model", Put::Joined("models/", model)),
        ))
    }

    fn upstream_path(&self) -> &'static str {
        "/v1beta/models/{model}:generateContent"
    }
    fn upstream_count_path(&self) -> Option<&'static str> {
        Some("/v1beta/models/{model}:countTokens")
    }
    fn upstream_endpoint(&self, model: &str, stream: bool) -> Cow<'static, str> {
        self.sdk_request_path(model, stream)
    }
    fn upstream_count_endpoint(&self, model: &str) -> Option<Cow<'static, str>> {
        Some(method_path(model, "countTokens"))
    }
    fn model_in_body(&self) -> bool {
        false
    }
    fn usage_field(&self) -> &'static str {
        "usageMetadata"
    }
    /// Every model in one page.
    fn models_path(&self) -> &'static str {
        "/v1beta/models?pageSize=1000"
    }
    /// `models[].name` without its `models/`.
    fn model_ids(&self, list: &Value) -> Option<Vec<String>> {
        let items = list.get("models")?.as_array()?;
        Some(
            items
                .iter()
                .filter_map(|m| m.get("name").and_then(Value::as_str))
                .map(|n| n.strip_prefix("models/").unwrap_or(n).to_string())
                .collect(),
        )
    }
    fn credentials<'k>(&self, key: Option<&'k str>) -> Headers<'k> {
        [key.map(|k| ("x-goog-api-key", Cow::Borrowed(k))), None, None]
    }
    fn encode_request(&self, req: &canon::Request, opts: &EgressOptions) -> Result<Value, ApiError> {
        upstream::encode_request(req, opts)
    }
    fn decode_response(&self, body: &Value, opts: &EgressOptions) -> Result<canon::Response, ApiError> {
        upstream::decode_response(body, opts)
    }
    fn stream_decoder(&self, _opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        Box::<upstream::GeminiStreamDecoder>::default()
    }
    fn usage_from(&self, usage: &Value) -> Option<Usage> {
        reply::usage_from(usage)
    }
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool {
        relay::observe(ev, seen)
    }
    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
        relay::text_fields(data, edit)
    }

    fn probe_body(&self, _model: &str, prompt: &str, _stream: bool) -> Value {
        client::probe_body(prompt)
    }
    fn client_headers<'k>(&self, key: &'k str) -> Headers<'k> {
        [Some(("x-goog-api-key", Cow::Borrowed(key))), None, None]
    }
    fn answer_text(&self, answer: &Value) -> Result<String, NoText> {
        client::answer_text(answer)
    }
    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str> {
        answer["candidates"][0]["finishReason"].as_str()
    }
    fn stream_terminal(&self) -> &'static str {
        "a chunk with finishReason"
    }
    fn client_event(&self, _event: Option<&str>, data: &str, _first: bool) -> ClientEvent {
        client::event(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::edit::Edits;
    use crate::protocol::request::{Endpoint, Forward};
    use crate::protocol::Protocol;

    fn req(path: &str, query: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: path.into(),
            query: query.into(),
            version: 1,
            headers: headers.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            body: Default::default(),
            keep_alive: true,
        }
    }

    #[test]
    fn paths_name_the_endpoint_the_model_and_the_stream() {
        let gemini = Protocol::named("gemini").unwrap();
        let p = "/v1beta/models/m-gemini:streamGenerateContent";
        assert_eq!(Endpoint::from_path(p), Some(Endpoint::Generate(gemini)));
        assert_eq!(Endpoint::from_path("/v1/models/x:countTokens"), Some(Endpoint::CountTokens(gemini)));
        assert_eq!(gemini.requested_model(p, &json!({"model": "other"})), "m-gemini");
        assert_eq!(gemini.path_stream(p), Some(true));
        let body = json!({"contents": [{"parts": [{"text": "hi"}]}]});
        assert!(gemini.validate_envelope(p, &body, true).unwrap());
        assert_eq!(gemini.framing(&req(p, "alt=sse", &[])), Framing::Sse);
        assert_eq!(gemini.framing(&req(p, "", &[])), Framing::JsonArray);
        assert_eq!(
            Gemini.upstream_endpoint("gemini 2", true),
            "/v1beta/models/gemini%202:streamGenerateContent?alt=sse"
        );
        assert_eq!(Protocol::for_errors_at(Some("/v1beta/models")), gemini);
    }

    #[test]
    fn the_key_comes_from_its_header_the_query_or_bearer() {
        let g = Gemini;
        let p = "/v1beta/models/m:generateContent";
        assert_eq!(g.presented_key(&req(p, "", &[("x-goog-api-key", "k1")])).unwrap(), "k1");
        assert_eq!(g.presented_key(&req(p, "alt=sse&key=k2", &[])).unwrap(), "k2");
        assert_eq!(g.presented_key(&req(p, "", &[("authorization", "Bearer k3")])).unwrap(), "k3");
        let e = g
            .presented_key(&req(p, "key=a", &[("x-goog-api-key", "b")]))
            .unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(!e.message().contains("a`") && !e.message().contains(" b"));
        assert_eq!(g.presented_key(&req(p, "", &[])).unwrap_err().status(), 401);
        assert!(g.recognizes(&req("/v1/models", "", &[("x-goog-api-key", "k")])));
        assert!(!g.recognizes(&req("/v1/models", "", &[("authorization", "Bearer k")])));
    }

    #[test]
    fn the_one_limit_goes_in_generation_config_and_other_fields_stay_out() {
        let gemini = Protocol::named("gemini").unwrap();
        let body = json!({"contents": [], "max_tokens": 5, "max_output_tokens": 7, "n": 3,
                          "generationConfig": {"maxOutputTokens": 900, "temperature": 0.1}});
        assert_eq!(crate::protocol::limits::read(gemini, &body).unwrap(), Some(900));
        let f = Forward {
            model: "real",
            generation: true,
            limit: Some(100),
            max_completion_tokens: false,
            stream: true,
            store_nothing: true,
            reasoning: true,
            hosted_cap: None,
        };
        let sent: Value = serde_json::from_slice(&gemini.upstream_edits(&f).apply(&body).unwrap()).unwrap();
        assert_eq!(
            sent,
            json!({"contents": [], "generationConfig": {"maxOutputTokens": 100, "temperature": 0.1}})
        );
        let unlimited = Forward { limit: None, ..f };
        let sent: Value = serde_json::from_slice(&gemini.upstream_edits(&unlimited).apply(&body).unwrap()).unwrap();
        assert_eq!(sent["generationConfig"]["maxOutputTokens"], 900);
        let _ = Edits::default();
    }

    #[test]
    fn errors_take_googles_shape() {
        let e = ApiError::unauthorized("bad key").with_retry_after(3);
        let v: Value = serde_json::from_slice(&Gemini.error_body(&e, "req_1")).unwrap();
        assert_eq!(v["error"]["code"], 401);
        assert_eq!(v["error"]["status"], "UNAUTHENTICATED");
        assert!(v["error"]["message"].as_str().unwrap().contains("req_1"));
        let ev = String::from_utf8(Gemini.error_event(&ApiError::bad_gateway("x"), "r", None)).unwrap();
        assert!(ev.starts_with("data: {\"error\":"), "{ev}");
        let hosted = Gemini
            .hosted_asks(&json!({"tools": [{"functionDeclarations": []}, {"googleSearch": {}}]}))
            .unwrap();
        assert_eq!(hosted.tools.len(), 1);
        assert_eq!(hosted.tools[0].family, "google_search");
    }
}
