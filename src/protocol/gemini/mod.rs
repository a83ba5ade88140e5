//! The Gemini API (Google's `generativelanguage` API): `POST /v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent` (SSE with `?alt=sse`, else a JSON array streamed), `:countTokens`, the same under
//! `/v1/`, and `GET /v1beta/models`. The codec ([`CODEC`]) and what it is made of: `route.rs` (the paths:
//! the model and the method are in them; base-URL mistakes), `decode.rs` (client requests into canonical
//! form), `schema.rs` (Gemini's `Schema` and JSON Schema), `reply.rs` (answers, streams, usage and the models
//! list to clients), `upstream.rs` (requests to Gemini upstreams, their answers and streams decoded),
//! `relay.rs` (a relayed stream read for usage, errors and its end), `client.rs` (the doctor's minimal
//! request and how the SDKs read the answer).

mod client;
mod decode;
mod embed;
mod names;
mod relay;
mod reply;
mod route;
mod schema;
mod upstream;

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::canon;
use super::codec::{Codec, Credential, IdsIn, KeyIn, LimitFields, TokenCounting};
use super::edit::{Edit, Put};
use super::hosted::{self, Rules};
use super::ApiError;

/// The Gemini API codec's interfaces (each implemented in the file that holds its code).
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

/// The Gemini API.
pub static CODEC: Codec = Codec {
    name: "gemini",
    title: "Gemini API",
    vendor: "Google",
    clients: "Gemini clients (Gemini CLI, the google-genai SDKs)",
    upstream_kind: "gemini",
    path: "/v1beta/models/{model}:generateContent",
    base_url_has_v1: false,
    count_tokens_path: Some("/v1beta/models/{model}:countTokens"),
    models_list_path: Some("/v1beta/models"),
    embed_path: None,
    complete_path: None,

    key: KeyIn {
        header: "x-goog-api-key",
        query: Some("key"),
        how: HOW,
    },
    // Its model paths recognise its clients and its paths.
    sdk_header: None,
    paths_contain: None,
    id_header: None,
    challenge: None,
    // A blank line: the SDKs skip it between events, and it is white space in a JSON array (they would
    // fail on an SSE comment).
    keepalive: b"\n",
    usage_asked_at: None,
    numbered: None,
    failed_tail: None,
    response_id_prefix: "",
    required_header: None,
    account_headers: None,
    read_as_one: Some(names::read_as_one),

    limit: LimitFields {
        fields: &["maxOutputTokens"],
        parent: Some("generationConfig"),
        upstream: ("maxOutputTokens", "maxOutputTokens"),
        choices: None,
        required: false,
    },
    // Nothing: a Gemini request is keyed as sent.
    carried: &[],
    hosted: &HOSTED,
    hosted_cap: None,
    // Gemini answers do not count hosted uses in a way they are priced by.
    reports_tool_uses: false,
    reports_rate_tier: true,
    store_nothing: None,
    reasoning_inline: None,
    stream_usage_on: None,
    passed_on: None,

    upstream_path: "/v1beta/models/{model}:generateContent",
    upstream_count_path: Some("/v1beta/models/{model}:countTokens"),
    model_in_body: false,
    usage_field: "usageMetadata",
    // Every model in one page.
    models_path: "/v1beta/models?pageSize=1000",
    // `models[].name` without its `models/`.
    ids_in: IdsIn {
        array: "models",
        field: "name",
        prefix: "models/",
    },
    credential: Credential {
        header: Some("x-goog-api-key"),
        version: None,
    },
    stream_terminal: "a chunk with finishReason",

    request: &Gemini,
    reply: &Gemini,
    list: &Gemini,
    upstream: &Gemini,
    relay: &Gemini,
    probe: &Gemini,
    counting: Some(&Gemini),
    model_paths: Some(&Gemini),
    embedder: Some(&Gemini),
    completions: None,
};

impl TokenCounting for Gemini {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpRequest;
    use crate::protocol::codec::Framing;
    use crate::protocol::edit::Edits;
    use crate::protocol::request::{Endpoint, Forward};
    use crate::protocol::Protocol;

    fn req(path: &str, query: &str, headers: &[(&str, &str)]) -> HttpRequest {
        HttpRequest {
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
            CODEC.upstream_endpoint("gemini 2", true),
            "/v1beta/models/gemini%202:streamGenerateContent?alt=sse"
        );
        assert_eq!(Protocol::for_errors_at(Some("/v1beta/models")), gemini);
    }

    #[test]
    fn the_key_comes_from_its_header_the_query_or_bearer() {
        let g = &CODEC;
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
            completion: false,
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
        let v: Value = serde_json::from_slice(&CODEC.reply.error_body(&e, "req_1")).unwrap();
        assert_eq!(v["error"]["code"], 401);
        assert_eq!(v["error"]["status"], "UNAUTHENTICATED");
        assert!(v["error"]["message"].as_str().unwrap().contains("req_1"));
        let ev = String::from_utf8(CODEC.reply.error_event(&ApiError::bad_gateway("x"), "r", None)).unwrap();
        assert!(ev.starts_with("data: {\"error\":"), "{ev}");
        let hosted = CODEC
            .hosted_asks(&json!({"tools": [{"functionDeclarations": []}, {"googleSearch": {}}]}))
            .unwrap();
        assert_eq!(hosted.tools.len(), 1);
        assert_eq!(hosted.tools[0].family, "google_search");
    }
}
