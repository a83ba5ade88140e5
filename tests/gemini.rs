//! The Gemini API as a client protocol and as an upstream kind (issue 29): its paths (the model and the
//! stream in them, under `/v1beta/` and `/v1/`), its keys (`x-goog-api-key`, `?key=`, Bearer), its models
//! list, its errors in Google's shape, the JSON-array stream without `alt=sse`, token counting, the one
//! output limit (`generationConfig.maxOutputTokens`), account-scoped fields refused, credentials never
//! echoed, records and metrics under protocol `gemini`; and the fixtures of `fixtures/gemini/` replayed
//! through a Gemini upstream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use common::upstream::{FakeUpstream, Fixture, Reply};
use common::*;
use serde_json::{json, Value};

struct Bench {
    gw: Gateway,
    fake: FakeUpstream,
    queue: Arc<Mutex<VecDeque<Reply>>>,
}

/// A gateway with the mock, a Gemini upstream (`m-gemini`) and an Anthropic one (`m-messages`) at a fake
/// upstream; groups `default` (the `m-*` models and the mock), `limited` (one request a minute) and
/// `secret` (`x-secret` only).
fn bench() -> Bench {
    let queue: Arc<Mutex<VecDeque<Reply>>> = Arc::new(Mutex::new(VecDeque::new()));
    let q = queue.clone();
    let fake = FakeUpstream::start(move |_| q.lock().unwrap().pop_front().unwrap_or(Reply::Close));
    let dir = TempDir::new("gemini");
    let f = fake.addr;
    let config = format!(
        r#"{}
{}
[[upstreams]]
name = "mock"
kind = "mock"

[[upstreams]]
name = "anthropic-up"
kind = "anthropic"
base_url = "http://{f}"
api_key_env = "{UPSTREAM_KEY_ENV}"

[[models]]
name = "mock"
upstream = "mock"

[[models]]
name = "m-messages"
upstream = "anthropic-up"
upstream_model = "real-messages-model"
reasoning = true

[[models]]
name = "x-secret"
upstream = "mock"

[[models]]
name = "m-org/model"
upstream = "mock"

[[groups]]
name = "default"
models = ["m-*", "mock"]

[[groups]]
name = "limited"
models = ["*"]
rpm = 1

[[groups]]
name = "secret"
models = ["x-secret"]
"#,
        base_config(
            dir.path(),
            &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")
        ),
        gemini_upstream(f),
    );
    let gw = Gateway::start_with(dir, &config);
    Bench { gw, fake, queue }
}

/// Headers of a Gemini client with `key` in `x-goog-api-key` (as the SDKs and Gemini CLI send it).
fn goog(key: &str) -> [(&str, &str); 2] {
    [
        ("x-goog-api-key", key),
        ("content-type", "application/json"),
    ]
}

fn post_as(gw: &Gateway, key: &str, path: &str, body: &Value) -> Response {
    gw.request("POST", path, &goog(key), body.to_string().as_bytes())
}

fn hello() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]})
}

/// A Gemini answer with `text` and the usage given.
fn answer(text: &str, prompt: u64, candidates: u64) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
           "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": candidates,
                             "totalTokenCount": prompt + candidates},
           "modelVersion": "real-gemini-model", "responseId": "r1"})
}

/// The chunks of a streamed answer: SSE `data:` events (CRLF taken as LF), or the elements of a JSON array.
fn chunks(resp: &Response, framing: &str) -> Vec<Value> {
    match framing {
        "json_array" => serde_json::from_slice::<Vec<Value>>(&resp.body)
            .unwrap_or_else(|e| panic!("not a JSON array ({e}): {}", resp.text())),
        _ => parse_sse(&resp.text().replace("\r\n", "\n"))
            .into_iter()
            .map(|(name, data)| {
                assert!(name.is_none(), "Gemini chunks have no event name");
                serde_json::from_str(&data).unwrap()
            })
            .collect(),
    }
}

fn text_of(v: &Value) -> String {
    v["candidates"][0]["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["thought"] != true)
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// Replays `fixtures/gemini/{case}.json` through the Gemini upstream (passthrough): what the client reads,
/// what the upstream got (the upstream model in the path, SSE asked for, its key and not the client's, the
/// body as sent), and the usage recorded.
fn replay(b: &Bench, case: &str) {
    let dir = fixtures().join("gemini");
    let fx = Fixture::load(&dir, case);
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{case}.json"))).unwrap())
            .unwrap();
    let path = raw["path"].as_str().unwrap();
    b.queue.lock().unwrap().push_back(fx.reply());
    let before = b.fake.received().len();
    let resp = post_as(&b.gw, &b.gw.key, path, &fx.request);
    let ctx = format!("gemini/{case}: {}", resp.text());
    let exp = &fx.expect;
    assert_eq!(resp.status as u64, exp["status"].as_u64().unwrap(), "{ctx}");
    let rid = resp.header("x-request-id").unwrap().to_string();

    let got = b.fake.received();
    assert_eq!(got.len(), before + 1, "{ctx}");
    let up = got.last().unwrap();
    let method = path.rsplit(':').next().unwrap().split('?').next().unwrap();
    let sse = if method == "streamGenerateContent" {
        "?alt=sse"
    } else {
        ""
    };
    assert_eq!(
        up.path,
        format!("/v1beta/models/real-gemini-model:{method}{sse}"),
        "{ctx}"
    );
    assert_eq!(up.header("x-goog-api-key"), Some(UPSTREAM_KEY), "{ctx}");
    assert!(
        !format!("{}{:?}{}", up.path, up.headers, up.json()).contains(&b.gw.key),
        "{ctx}"
    );
    assert_eq!(up.json(), fx.request, "{ctx}: the body goes as it came");

    if let Some(n) = exp["total_tokens"].as_u64() {
        assert_eq!(resp.json()["totalTokens"], n, "{ctx}");
    }
    if let Some(msg) = exp["error"].as_str() {
        let last = match exp["framing"].as_str() {
            Some(f) => chunks(&resp, f).pop().unwrap(),
            None => resp.json(),
        };
        let e = &last["error"];
        assert!(e["message"].as_str().unwrap().contains(msg), "{ctx}");
        assert_eq!(e["status"], exp["error_status"], "{ctx}");
        assert!(e["code"].is_u64(), "{ctx}");
        assert_eq!(
            resp.header("retry-after"),
            exp["retry_after"].as_str(),
            "{ctx}"
        );
        if exp["retry_after"].is_string() {
            let retry = e["details"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["retryDelay"].is_string());
            assert_eq!(retry.unwrap()["retryDelay"], "37s", "{ctx}");
        }
    }
    if let Some(text) = exp["text"].as_str() {
        let read = match exp["framing"].as_str() {
            Some(f) => {
                let want = if f == "json_array" {
                    "application/json"
                } else {
                    "text/event-stream"
                };
                assert!(
                    resp.header("content-type").unwrap().starts_with(want),
                    "{ctx}"
                );
                let all = chunks(&resp, f);
                if let Some(finish) = exp["finish"].as_str() {
                    let last = all.last().unwrap();
                    assert_eq!(last["candidates"][0]["finishReason"], finish, "{ctx}");
                    assert!(last["usageMetadata"].is_object(), "{ctx}");
                }
                all.iter().map(text_of).collect()
            }
            None => text_of(&resp.json()),
        };
        assert_eq!(read, text, "{ctx}");
    }
    let line = b.gw.log_line(&rid);
    assert!(line.contains(" protocol=gemini "), "{ctx}: {line}");
    if let Some(u) = exp.get("usage") {
        assert!(line.contains(&format!(" in={} ", u["in"])), "{ctx}: {line}");
        assert!(
            line.contains(&format!(" out={} ", u["out"])),
            "{ctx}: {line}"
        );
    }
}

#[test]
fn fixtures_replay_through_a_gemini_upstream() {
    let b = bench();
    for case in [
        "text",
        "stream_text",
        "stream_array",
        "stream_error",
        "stream_truncated",
        "upstream_error",
        "rate_limited",
        "error_in_200",
        "count_tokens",
    ] {
        replay(&b, case);
    }
}

/// The paths, under `/v1beta/` and `/v1/`, and the key in each place Google's clients send it.
#[test]
fn endpoints_and_keys() {
    let b = bench();
    let gw = &b.gw;
    for path in [
        "/v1beta/models/mock:generateContent",
        "/v1/models/mock:generateContent",
        "/v1beta/models/models/mock:generateContent",
        "/v1alpha/models/mock:generateContent",
        // A name with a `/` (as vLLM names its models), in the path as the SDKs put it.
        "/v1beta/models/m-org/model:generateContent",
    ] {
        let r = post_as(gw, &gw.key, path, &hello());
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(text_of(&r.json()).contains("mock model"), "{path}");
    }
    // `?key=`: served, and the key appears in no log line and no record.
    let r = gw.request(
        "POST",
        &format!(
            "/v1beta/models/mock:streamGenerateContent?alt=sse&key={}",
            gw.key
        ),
        &[("content-type", "application/json")],
        hello().to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(chunks(&r, "sse")
        .iter()
        .map(text_of)
        .collect::<String>()
        .contains("mock"));
    let auth = format!("Bearer {}", gw.key);
    let r = gw.request(
        "POST",
        "/v1beta/models/mock:generateContent",
        &[("authorization", &auth)],
        hello().to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let rid = r.header("x-request-id").unwrap().to_string();
    let line = gw.log_line(&rid);
    assert!(line.contains(" protocol=gemini "), "{line}");
    let records = gw.admin("/admin/usage?limit=50");
    let rows = records.json()["data"].as_array().unwrap().clone();
    assert!(
        rows.len() >= 5 && rows.iter().all(|r| r["protocol"] == "gemini"),
        "{}",
        records.text()
    );
    assert!(!records.text().contains(&gw.key) && !gw.all_logs().contains(&gw.key));

    // Two different keys are refused; a wrong key is UNAUTHENTICATED, in Google's shape.
    let r = gw.request(
        "POST",
        "/v1beta/models/mock:generateContent?key=tg_other",
        &goog(&gw.key),
        hello().to_string().as_bytes(),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["status"], "INVALID_ARGUMENT");
    let r = post_as(
        gw,
        "tg_wrong",
        "/v1beta/models/mock:generateContent",
        &hello(),
    );
    assert_eq!(r.status, 401);
    let e = &r.json()["error"];
    assert_eq!(
        (e["code"].as_u64(), e["status"].as_str()),
        (Some(401), Some("UNAUTHENTICATED"))
    );
    assert!(!r.text().contains("tg_wrong"));
}

/// Errors the gateway gives take Google's shape: a forbidden model, an unknown one, a bad argument, a rate
/// limit with its retry information; and the 404 hints name Gemini's base-URL mistakes.
#[test]
fn errors_in_googles_shape() {
    let b = bench();
    let gw = &b.gw;
    let status = |r: &Response| {
        r.json()["error"]["status"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/x-secret:generateContent",
        &hello(),
    );
    assert_eq!(
        (r.status, status(&r)),
        (403, "PERMISSION_DENIED".into()),
        "{}",
        r.text()
    );
    let r = post_as(gw, &gw.key, "/v1beta/models/nope:generateContent", &hello());
    assert_eq!((r.status, status(&r)), (404, "NOT_FOUND".into()));
    let two = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"candidateCount": 2}});
    let r = post_as(gw, &gw.key, "/v1beta/models/mock:generateContent", &two);
    assert_eq!((r.status, status(&r)), (400, "INVALID_ARGUMENT".into()));
    assert!(r.text().contains("candidateCount"));
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/mock:generateContent",
        &json!({"contents": []}),
    );
    assert_eq!(r.status, 400);

    let limited = gw.add_key("rl", "limited", None);
    assert_eq!(
        post_as(
            gw,
            &limited,
            "/v1beta/models/mock:generateContent",
            &hello()
        )
        .status,
        200
    );
    let r = post_as(
        gw,
        &limited,
        "/v1beta/models/mock:generateContent",
        &hello(),
    );
    assert_eq!((r.status, status(&r)), (429, "RESOURCE_EXHAUSTED".into()));
    let retry = r.header("retry-after").unwrap().to_string();
    let details = r.json()["error"]["details"].clone();
    assert!(
        details
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["retryDelay"] == format!("{retry}s")),
        "{details}"
    );

    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/v1beta/models/mock:generateContent",
        &hello(),
    );
    assert_eq!((r.status, status(&r)), (404, "NOT_FOUND".into()));
    assert!(r.text().contains("doubled `/v1beta`"), "{}", r.text());
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/mock:generateContent/v1beta/models/mock:generateContent",
        &hello(),
    );
    assert!(r.text().contains("endpoint inside it"), "{}", r.text());
}

/// `GET /v1beta/models` (and `/v1/models` from a Gemini client) lists the key's models as `models/{name}`;
/// one model by name, with or without its `models/`.
#[test]
fn the_models_list() {
    let b = bench();
    let gw = &b.gw;
    let r = gw.request("GET", "/v1beta/models", &goog(&gw.key), b"");
    assert_eq!(r.status, 200);
    let names: Vec<String> = r.json()["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"models/m-gemini".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("x-secret")), "{names:?}");
    let r = gw.request("GET", "/v1/models", &goog(&gw.key), b"");
    assert!(r.json()["models"].is_array(), "{}", r.text());
    let auth = format!("Bearer {}", gw.key);
    let r = gw.request("GET", "/v1/models", &[("authorization", &auth)], b"");
    assert_eq!(
        r.json()["object"],
        "list",
        "OpenAI clients keep their shape"
    );
    let r = gw.request("GET", &format!("/v1beta/models?key={}", gw.key), &[], b"");
    assert_eq!(r.status, 200);
    for path in ["/v1beta/models/m-gemini", "/v1beta/models/models/m-gemini"] {
        let r = gw.request("GET", path, &goog(&gw.key), b"");
        assert_eq!(r.json()["name"], "models/m-gemini", "{path}");
        assert!(r.json()["supportedGenerationMethods"].is_array());
    }
    let r = gw.request("GET", "/v1beta/models", &goog("tg_wrong"), b"");
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["status"], "UNAUTHENTICATED");
}

/// `maxOutputTokens` is the one output limit: a key with a credit gets the reserved limit written into
/// `generationConfig`, other protocols' limit fields never go upstream; account-scoped fields and tuned
/// models are refused before any upstream call.
#[test]
fn the_one_limit_and_the_operators_account() {
    let b = bench();
    let gw = &b.gw;
    let credit = gw.add_key("credit", "default", Some(5.0));
    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::json(200, &answer("ok", 3, 1)));
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}], "max_tokens": 99999,
                      "max_completion_tokens": 99999, "generationConfig": {"temperature": 0.5}});
    let r = post_as(
        gw,
        &credit,
        "/v1beta/models/m-gemini:generateContent",
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = b.fake.last().json();
    assert_eq!(
        sent["generationConfig"]["maxOutputTokens"], 8192,
        "the model's limit, reserved"
    );
    assert_eq!(sent["generationConfig"]["temperature"], 0.5);
    assert!(sent.get("max_tokens").is_none() && sent.get("max_completion_tokens").is_none());

    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::json(200, &answer("ok", 3, 1)));
    let own = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 50}});
    assert_eq!(
        post_as(gw, &credit, "/v1beta/models/m-gemini:generateContent", &own).status,
        200
    );
    assert_eq!(
        b.fake.last().json()["generationConfig"]["maxOutputTokens"],
        50
    );

    let calls = b.fake.received().len();
    for (body, field) in [
        (
            json!({"contents": [{"parts": [{"text": "hi"}]}], "cachedContent": "cachedContents/x"}),
            "cachedContent",
        ),
        (
            json!({"contents": [{"parts": [{"fileData": {"mimeType": "application/pdf", "fileUri": "files/abc"}}]}]}),
            "contents[0].parts[0].fileData.fileUri",
        ),
    ] {
        let r = post_as(
            gw,
            &gw.key,
            "/v1beta/models/m-gemini:generateContent",
            &body,
        );
        assert_eq!(r.status, 400, "{}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["status"], "INVALID_ARGUMENT");
        assert!(e["message"].as_str().unwrap().contains(field), "{e}");
        assert_eq!(e["details"][0]["reason"], "ACCOUNT_FEATURE_REFUSED");
    }
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/tunedModels/mine:generateContent",
        &hello(),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("tuned model"));
    assert_eq!(
        b.fake.received().len(),
        calls,
        "nothing reached the upstream"
    );
    // A paid hosted tool the model does not allow (Google Search grounding) is left out, and named.
    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::json(200, &answer("ok", 3, 1)));
    let search =
        json!({"contents": [{"parts": [{"text": "news?"}]}], "tools": [{"googleSearch": {}}]});
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-gemini:generateContent",
        &search,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-tollgate-dropped-tools"), Some("google_search"));
    assert!(b.fake.last().json().get("tools").is_none());
}

/// Google reads a field by its proto name too (`generation_config.max_output_tokens`, `google_search`): every
/// rule sees those spellings as the JSON names, and the upstream is sent the JSON names it was judged by.
#[test]
fn proto_spellings_are_judged_as_the_json_names() {
    let b = bench();
    let gw = &b.gw;
    let credit = gw.add_key("credit", "default", Some(5.0));
    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::json(200, &answer("ok", 3, 1)));
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}], "model": "models/other-model",
                      "system_instruction": {"parts": [{"text": "be brief"}]},
                      "generation_config": {"max_output_tokens": 99999, "temperature": 0.5}});
    let r = post_as(
        gw,
        &credit,
        "/v1beta/models/m-gemini:generateContent",
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = b.fake.last();
    assert!(sent.path.contains("real-gemini-model"), "{}", sent.path);
    let sent = sent.json();
    assert_eq!(
        sent,
        json!({"contents": [{"parts": [{"text": "hi"}]}],
               "systemInstruction": {"parts": [{"text": "be brief"}]},
               "generationConfig": {"maxOutputTokens": 99999, "temperature": 0.5}}),
        "one spelling (the client's limit, reserved), no model but the path's"
    );

    let calls = b.fake.received().len();
    for (body, status, says) in [
        (
            json!({"contents": [{"parts": [{"text": "hi"}]}], "generation_config": {"candidate_count": 8}}),
            400,
            "candidateCount",
        ),
        (
            json!({"contents": [{"parts": [{"text": "hi"}]}], "cached_content": "cachedContents/x"}),
            400,
            "cachedContent",
        ),
        (
            json!({"contents": [{"parts": [{"file_data": {"mime_type": "application/pdf", "file_uri": "files/abc"}}]}]}),
            400,
            "fileUri",
        ),
        (
            json!({"contents": [{"parts": [{"text": "hi"}]}],
                   "generationConfig": {"maxOutputTokens": 5, "max_output_tokens": 99999}}),
            400,
            "given twice",
        ),
    ] {
        let r = post_as(
            gw,
            &credit,
            "/v1beta/models/m-gemini:generateContent",
            &body,
        );
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(r.text().contains(says), "{body}: {}", r.text());
    }
    assert_eq!(
        b.fake.received().len(),
        calls,
        "nothing reached the upstream"
    );
    // Hosted tools in proto spelling are seen by their JSON names, left out (with the tool config that goes
    // with them) and named.
    for (body, family) in [
        (
            json!({"contents": [{"parts": [{"text": "news?"}]}], "tools": [{"google_search": {}}],
                   "tool_config": {"function_calling_config": {"mode": "AUTO"}}}),
            "google_search",
        ),
        (
            json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"some_future_tool": {}}]}),
            "someFutureTool",
        ),
    ] {
        b.queue
            .lock()
            .unwrap()
            .push_back(Reply::json(200, &answer("ok", 3, 1)));
        let r = post_as(
            gw,
            &credit,
            "/v1beta/models/m-gemini:generateContent",
            &body,
        );
        assert_eq!(r.status, 200, "{body}: {}", r.text());
        assert_eq!(r.header("x-tollgate-dropped-tools"), Some(family), "{body}");
        let sent = b.fake.last().json();
        assert!(
            sent.get("tools").is_none() && sent.get("toolConfig").is_none(),
            "{sent}"
        );
    }
}

/// A Gemini client of another protocol's upstream: translated both ways, streamed as SSE or as a JSON
/// array; `countTokens` estimated there (forwarded only to a Gemini upstream).
#[test]
fn a_gemini_client_of_another_upstream() {
    let b = bench();
    let gw = &b.gw;
    let sse =
        std::fs::read_to_string(fixtures().join("translate/stream_text/messages.upstream.sse"))
            .unwrap();
    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::sse(common::upstream::split_sse_blocks(&sse)));
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-messages:streamGenerateContent",
        &hello(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let all = chunks(&r, "json_array");
    assert_eq!(all.iter().map(text_of).collect::<String>(), "Paris.");
    assert_eq!(all.last().unwrap()["usageMetadata"]["promptTokenCount"], 21);
    assert_eq!(b.fake.last().path, "/v1/messages");

    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-messages:countTokens",
        &hello(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["totalTokens"].as_u64().unwrap() >= 1);
    assert_eq!(
        b.fake.last().path,
        "/v1/messages",
        "no upstream call for an estimate"
    );
    let line = gw.log_line(r.header("x-request-id").unwrap());
    assert!(line.contains(" protocol=gemini "), "{line}");
}

/// `countTokens` forwarded to a Gemini upstream asks for the upstream's model: in the path, and inside a
/// whole `generateContentRequest` (which names its model, `models/{model}`), never the client's name for it.
/// A body of `contents` gets no `generateContentRequest` it did not have.
#[test]
fn count_tokens_names_the_upstreams_model_inside_a_whole_request() {
    let b = bench();
    let gw = &b.gw;
    let whole = json!({"generateContentRequest": {"model": "models/m-gemini",
        "contents": [{"role": "user", "parts": [{"text": "hello"}]}]}});
    for body in [whole, hello()] {
        b.queue
            .lock()
            .unwrap()
            .push_back(Reply::json(200, &json!({"totalTokens": 7})));
        let r = post_as(gw, &gw.key, "/v1beta/models/m-gemini:countTokens", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["totalTokens"], 7);
        let sent = b.fake.last();
        assert_eq!(sent.path, "/v1beta/models/real-gemini-model:countTokens");
        let mut want = body.clone();
        if let Some(inner) = want.get_mut("generateContentRequest") {
            inner["model"] = json!("models/real-gemini-model");
        }
        assert_eq!(sent.json(), want);
    }
}

/// An upstream credential an upstream echoes never reaches the client; the console's records and the
/// metrics show the protocol.
#[test]
fn credentials_never_echoed_and_the_protocol_shown() {
    let b = bench();
    let gw = &b.gw;
    let echo = json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
        "message": format!("API key not valid: {UPSTREAM_KEY}. Please pass a valid API key.")}});
    b.queue.lock().unwrap().push_back(Reply::json(400, &echo));
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-gemini:generateContent",
        &hello(),
    );
    assert_eq!(r.status, 400);
    assert!(!r.text().contains(UPSTREAM_KEY), "{}", r.text());
    b.queue.lock().unwrap().push_back(Reply::json(
        200,
        &answer(&format!("my key is {UPSTREAM_KEY}"), 3, 5),
    ));
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-gemini:generateContent",
        &hello(),
    );
    assert_eq!(r.status, 200);
    assert!(!r.text().contains(UPSTREAM_KEY), "{}", r.text());
    // Relayed as a stream: a function call's `args` (a JSON value, sent whole) echoing the credential has it
    // replaced; the other strings of the call, and the text around it, arrive as written.
    let call = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "calling "},
        {"functionCall": {"name": "login", "args": {"user": "ada", "token": UPSTREAM_KEY, "tags": ["required", "ollama"]}}}]},
        "index": 0}]});
    let end = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": " done"}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 9, "totalTokenCount": 12}});
    let frame = |v: &Value| format!("data: {v}\r\n\r\n").into_bytes();
    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::sse(vec![frame(&call), frame(&end)]));
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-gemini:streamGenerateContent?alt=sse",
        &hello(),
    );
    assert_eq!(r.status, 200);
    assert!(!r.text().contains(UPSTREAM_KEY), "{}", r.text());
    let got = chunks(&r, "sse");
    let parts = &got[0]["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0]["text"], "calling ", "{}", r.text());
    let args = &parts[1]["functionCall"]["args"];
    assert_eq!(args["user"], "ada", "{}", r.text());
    assert_eq!(args["tags"], json!(["required", "ollama"]), "{}", r.text());
    assert_ne!(args["token"], UPSTREAM_KEY, "{}", r.text());
    assert_eq!(text_of(&got[1]), " done");
    // A stream of a function call that ends before its finish reason and usage: the output is estimated from
    // what was produced, the call's arguments included (about 4 characters a token).
    let long = "lorem ipsum dolor sit amet ".repeat(40);
    let cut = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "write", "args": {"path": "a.txt", "text": long}}}]}, "index": 0}]});
    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::sse(vec![frame(&cut)]));
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-gemini:streamGenerateContent?alt=sse",
        &hello(),
    );
    assert_eq!(r.status, 200);
    let rid = r.header("x-request-id").unwrap().to_string();
    let rec = gw.admin(&format!("/admin/usage?request_id={rid}")).json();
    let out = rec["data"][0]["output_tokens"].as_u64().unwrap();
    assert!(out >= 150, "the call's arguments are output too: {rec}");

    let metrics = gw.request("GET", "/metrics", &[], b"").text();
    assert!(metrics.contains("protocol=\"gemini\""), "{metrics}");
    let records = gw.admin("/admin/usage?limit=10").json();
    let rows = records["data"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["protocol"] == "gemini"), "{records}");
    assert_eq!(rows.len(), 4);
}

/// `tollgate doctor --protocol gemini` against the gateway (the mock model): both probes pass.
#[test]
fn the_doctor_speaks_gemini() {
    let b = bench();
    let gw = &b.gw;
    let base = format!("http://{}", gw.addr);
    let out = std::process::Command::new(bin())
        .args([
            "doctor",
            "--base-url",
            &base,
            "--key",
            &gw.key,
            "--model",
            "mock",
            "--protocol",
            "gemini",
        ])
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("streamGenerateContent"), "{text}");
}

/// The console's live model list probes a Gemini upstream's own model list (`GET /v1beta/models` with its key
/// in `x-goog-api-key`) and shows its kind.
#[test]
fn the_console_probes_a_gemini_upstream() {
    let b = bench();
    let list = json!({"models": [{"name": "models/real-gemini-model", "supportedGenerationMethods": ["generateContent"]}]});
    b.queue.lock().unwrap().push_back(Reply::json(200, &list));
    b.queue.lock().unwrap().push_back(Reply::json(200, &list));
    let v = b.gw.admin("/admin/models?probe=1").json();
    let gemini = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "m-gemini")
        .unwrap()
        .clone();
    let up = &gemini["upstreams"][0];
    assert_eq!(up["kind"], "gemini", "{gemini}");
    assert_eq!(up["probe"]["up"], true, "{gemini}");
    let probe = b
        .fake
        .received()
        .into_iter()
        .find(|r| r.method == "GET" && r.path.starts_with("/v1beta/models"))
        .expect("the Gemini upstream's model list was asked for");
    assert_eq!(probe.path, "/v1beta/models?pageSize=1000");
    assert_eq!(probe.header("x-goog-api-key"), Some(UPSTREAM_KEY));
}

/// `thinkingConfig` maps to Anthropic thinking (the budget as it is) and back (thoughts shown when asked for);
/// `topK` reaches an upstream that takes it; `toolConfig` with one allowed function forces it.
#[test]
fn thinking_and_sampling_cross_over() {
    let b = bench();
    let gw = &b.gw;
    let thinking_answer = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "real-messages-model",
        "content": [{"type": "thinking", "thinking": "Paris is the capital.", "signature": "sig"},
                    {"type": "text", "text": "Paris."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 20}});
    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::json(200, &thinking_answer));
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "Capital of France?"}]}],
        "generationConfig": {"maxOutputTokens": 8000,
            "thinkingConfig": {"thinkingBudget": 3000, "includeThoughts": true}}});
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-messages:generateContent",
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = b.fake.last().json();
    assert_eq!(
        sent["thinking"],
        json!({"type": "enabled", "budget_tokens": 3000})
    );
    assert_eq!(sent["max_tokens"], 8000);
    let parts = r.json()["candidates"][0]["content"]["parts"].clone();
    assert_eq!(
        parts[0],
        json!({"text": "Paris is the capital.", "thought": true})
    );
    assert_eq!(parts[1], json!({"text": "Paris."}));

    // Without includeThoughts the thoughts stay out; topK goes to Anthropic's top_k.
    b.queue
        .lock()
        .unwrap()
        .push_back(Reply::json(200, &thinking_answer));
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "Capital?"}]}],
        "generationConfig": {"topK": 20, "temperature": 0.3},
        "tools": [{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["b"]}}});
    let r = post_as(
        gw,
        &gw.key,
        "/v1beta/models/m-messages:generateContent",
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = b.fake.last().json();
    assert_eq!(
        (sent["top_k"].as_u64(), sent["temperature"].as_f64()),
        (Some(20), Some(0.3))
    );
    assert_eq!(sent["tool_choice"], json!({"type": "tool", "name": "b"}));
    assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
    let parts = r.json()["candidates"][0]["content"]["parts"].clone();
    assert_eq!(parts, json!([{"text": "Paris."}]));
}
