//! Embeddings through the gateway (issue 42): OpenAI's `POST /v1/embeddings` and Gemini's `:embedContent` /
//! `:batchEmbedContents` on the mock, passed through to an OpenAI-compatible upstream (the body as sent, the
//! model renamed, the answer byte for byte), translated to and from a Gemini upstream (dimensions, task,
//! titles and `base64` carried across), refused for an Anthropic upstream; keys, groups and records as for
//! generation (the endpoint named, input tokens, cost, estimated where the upstream reports none).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use base64::Engine as _;
use common::upstream::{Fixture, Queued, Reply};
use common::*;
use serde_json::{json, Value};

/// The gateway and its queued fake upstream.
struct Bench {
    gw: Gateway,
    up: Queued,
}

/// The mock, the OpenAI-compatible, Responses, Anthropic and Gemini upstreams at a fake upstream (models
/// `m-chat`, `m-responses`, `m-messages`, `m-gemini`), `m-chat` with an input price; the group `default` may
/// use every model, `narrow` only the mock, `limited` one request a minute.
fn bench() -> Bench {
    let up = Queued::start();
    let narrow = "\n[[groups]]\nname = \"narrow\"\nmodels = [\"mock\"]\n\n\
                  [[groups]]\nname = \"limited\"\nmodels = [\"*\"]\nrpm = 1\n";
    let gw = Gateway::start_every_kind(up.fake.addr, "input_price = 2.0", narrow);
    Bench { gw, up }
}

fn openai_answer(vectors: &[Vec<f32>], prompt_tokens: u64) -> Value {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
        .collect();
    json!({"object": "list", "data": data, "model": "real-chat-model",
           "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}})
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn the_mock_embeds_for_openai_and_gemini_clients() {
    let b = bench();
    let r = b.gw.post(
        "/v1/embeddings",
        &json!({"model": "mock", "input": ["one", "two", "one"], "dimensions": 8}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "mock");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data[2]["index"], 2);
    assert_eq!(floats(&data[0]["embedding"]).len(), 8);
    assert_eq!(
        data[0]["embedding"], data[2]["embedding"],
        "the same text, the same vector"
    );
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() >= 3);
    let rec = b.gw.record_of(&r);
    assert_eq!(rec["endpoint"], "embeddings");
    assert_eq!(rec["protocol"], "chat");
    assert_eq!(rec["output_tokens"], 0);
    assert_eq!(rec["estimated"], false, "the mock counts its input");
    assert_eq!(rec["input_tokens"], v["usage"]["prompt_tokens"]);

    // Gemini's single and batch shapes.
    let r = b.gw.request(
        "POST",
        "/v1beta/models/mock:embedContent",
        &[("x-goog-api-key", &b.gw.key)],
        json!({"content": {"parts": [{"text": "one"}]}, "outputDimensionality": 8})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["embedding"]["values"], data[0]["embedding"]);
    let r = b.gw.request(
        "POST",
        "/v1/models/mock:batchEmbedContents",
        &[("x-goog-api-key", &b.gw.key)],
        json!({"requests": [
            {"model": "models/mock", "content": {"parts": [{"text": "a"}]}},
            {"model": "models/mock", "content": {"parts": [{"text": "b"}]}},
        ]})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let list = r.json()["embeddings"].as_array().unwrap().clone();
    assert_eq!(list.len(), 2);
    assert_eq!(
        floats(&list[0]["values"]).len(),
        256,
        "the mock's default size"
    );
    assert_eq!(b.gw.record_of(&r)["protocol"], "gemini");
}

#[test]
fn an_openai_compatible_upstream_gets_the_body_as_sent_and_its_answer_goes_back_as_it_came() {
    let b = bench();
    let answer = openai_answer(&[vec![0.5, -0.25]], 5);
    let raw = serde_json::to_vec(&answer).unwrap();
    b.up.push(Reply::json(200, &answer));
    let sent = json!({"model": "m-chat", "input": "hello there", "encoding_format": "base64",
                      "dimensions": 2, "user": "u-1", "extra_field": {"kept": true}});
    let r = b.gw.post("/v1/embeddings", &sent);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, raw, "the answer byte for byte");
    let up = b.up.fake.last();
    assert_eq!(up.path, "/v1/embeddings");
    let mut expected = sent.clone();
    expected["model"] = json!("real-chat-model");
    assert_eq!(up.json(), expected, "the body as sent, the model renamed");
    assert_eq!(
        up.header("authorization"),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    let rec = b.gw.record_of(&r);
    assert_eq!(rec["endpoint"], "embeddings");
    assert_eq!(rec["upstream"], "chat-up");
    assert_eq!(
        (rec["input_tokens"].as_u64(), rec["estimated"].as_bool()),
        (Some(5), Some(false))
    );
    // 5 tokens at 2.0 per million: 10 millionths of a credit.
    assert_eq!(rec["cost"].as_f64(), Some(0.00001));
    let csv = b.gw.admin("/admin/usage.csv").text();
    assert!(csv.lines().next().unwrap().ends_with(",endpoint"), "{csv}");
    assert!(
        csv.lines().nth(1).unwrap().ends_with(",embeddings"),
        "{csv}"
    );

    // A Responses upstream is OpenAI-compatible too: the same endpoint under its base URL.
    b.up.push(Reply::json(200, &openai_answer(&[vec![1.0]], 1)));
    let r = b.gw.post(
        "/v1/embeddings",
        &json!({"model": "m-responses", "input": "x"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(b.up.fake.last().path, "/v1/embeddings");
    assert_eq!(b.up.fake.last().json()["model"], "real-responses-model");
}

#[test]
fn openai_clients_reach_a_gemini_upstream_and_gemini_clients_an_openai_one() {
    let b = bench();
    b.up.push(Reply::json(
        200,
        &json!({"embeddings": [{"values": [1.0, 0.0]}, {"values": [0.0, 1.0]}]}),
    ));
    let r = b.gw.post(
        "/v1/embeddings",
        &json!({"model": "m-gemini", "input": ["first", "second"], "dimensions": 2,
                "encoding_format": "base64"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let up = b.up.fake.last();
    assert_eq!(
        up.path,
        "/v1beta/models/real-gemini-model:batchEmbedContents"
    );
    assert_eq!(up.header("x-goog-api-key"), Some(UPSTREAM_KEY));
    let body = up.json();
    assert_eq!(body["requests"][1]["content"]["parts"][0]["text"], "second");
    assert_eq!(body["requests"][0]["model"], "models/real-gemini-model");
    assert_eq!(body["requests"][0]["outputDimensionality"], 2);
    let v = r.json();
    // base64 as OpenAI encodes it: little-endian f32.
    let b64 = v["data"][1]["embedding"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(bytes, [0.0f32.to_le_bytes(), 1.0f32.to_le_bytes()].concat());
    let rec = b.gw.record_of(&r);
    assert_eq!(
        rec["estimated"], true,
        "Gemini reports no usage for embeddings"
    );
    assert_eq!(rec["input_tokens"], v["usage"]["prompt_tokens"]);
    // Google's rule: about four characters a token, each text rounded up ("first" 2, "second" 2).
    assert_eq!(rec["input_tokens"], 4);

    // Token ids cannot go to Gemini: a 400 in the client's shape, nothing sent.
    let before = b.up.fake.received().len();
    let r = b.gw.post(
        "/v1/embeddings",
        &json!({"model": "m-gemini", "input": [1, 2, 3]}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "input");
    assert_eq!(b.up.fake.received().len(), before);

    // A Gemini client to the OpenAI-compatible upstream: the task and title do not cross (OpenAI has none),
    // the dimensions do.
    b.up.push(Reply::json(200, &openai_answer(&[vec![0.25, 0.75]], 4)));
    let r = b.gw.request(
        "POST",
        "/v1beta/models/m-chat:batchEmbedContents",
        &[("x-goog-api-key", &b.gw.key)],
        json!({"requests": [{"model": "models/m-chat", "content": {"parts": [{"text": "q"}]},
                             "taskType": "RETRIEVAL_QUERY", "outputDimensionality": 2}]})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"embeddings": [{"values": [0.25, 0.75]}]}));
    let up = b.up.fake.last();
    assert_eq!(up.path, "/v1/embeddings");
    assert_eq!(
        up.json(),
        json!({"model": "real-chat-model", "input": ["q"], "encoding_format": "float", "dimensions": 2})
    );
    let rec = b.gw.record_of(&r);
    assert_eq!(
        (rec["input_tokens"].as_u64(), rec["estimated"].as_bool()),
        (Some(4), Some(false))
    );
}

#[test]
fn models_without_embeddings_and_bad_requests_are_refused_in_the_clients_shape() {
    let b = bench();
    let r = b.gw.post(
        "/v1/embeddings",
        &json!({"model": "m-messages", "input": "x"}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("no embeddings endpoint"), "{msg}");
    assert!(
        b.up.fake.received().is_empty(),
        "nothing went to the Anthropic upstream"
    );
    for (body, param) in [
        (json!({"model": "mock"}), "input"),
        (json!({"model": "mock", "input": ""}), "input"),
        (
            json!({"model": "mock", "input": "x", "encoding_format": "int8"}),
            "encoding_format",
        ),
        (json!({"input": "x"}), "model"),
    ] {
        let r = b.gw.post("/v1/embeddings", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{body}");
    }
    let r = b.gw.request(
        "POST",
        "/v1beta/models/mock:embedContent",
        &[("x-goog-api-key", &b.gw.key)],
        b"{}",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["status"], "INVALID_ARGUMENT");
    let r = b.gw.request("GET", "/v1/embeddings", &[], b"");
    assert_eq!(r.status, 405);
}

#[test]
fn keys_and_groups_govern_embeddings_as_generation() {
    let b = bench();
    let r = b.gw.request(
        "POST",
        "/v1/embeddings",
        &[("content-type", "application/json")],
        json!({"model": "mock", "input": "x"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 401);
    let narrow = b.gw.add_key("narrow-key", "narrow", None);
    let r = b.gw.post_as(
        &narrow,
        "/v1/embeddings",
        &json!({"model": "m-chat", "input": "x"}),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(b.up.fake.received().is_empty());
    let r = b.gw.post_as(
        &narrow,
        "/v1/embeddings",
        &json!({"model": "mock", "input": "x"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // A group's request rate counts embeddings as it counts generation.
    let limited = b.gw.add_key("limited-key", "limited", None);
    let body = json!({"model": "mock", "input": "x"});
    assert_eq!(b.gw.post_as(&limited, "/v1/embeddings", &body).status, 200);
    let r = b.gw.post_as(&limited, "/v1/embeddings", &body);
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    // A key whose credit is spent is refused before any upstream is asked.
    let broke = b.gw.add_key("broke", "default", Some(0.0));
    let r = b.gw.post_as(
        &broke,
        "/v1/embeddings",
        &json!({"model": "m-chat", "input": "x"}),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(b.up.fake.received().is_empty());
}

#[test]
fn gemini_clients_see_which_models_embed() {
    let b = bench();
    let list = b.gw.request(
        "GET",
        "/v1beta/models",
        &[("x-goog-api-key", &b.gw.key)],
        b"",
    );
    assert_eq!(list.status, 200, "{}", list.text());
    let methods = |name: &str| -> Vec<String> {
        let v = list.json();
        let m = v["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == format!("models/{name}"))
            .unwrap_or_else(|| panic!("{name} in {v}"))
            .clone();
        m["supportedGenerationMethods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    for embeds in ["mock", "m-chat", "m-gemini"] {
        assert!(
            methods(embeds).contains(&"batchEmbedContents".to_string()),
            "{embeds}"
        );
    }
    let anthropic = methods("m-messages");
    assert!(anthropic.contains(&"generateContent".to_string()));
    assert!(
        !anthropic.iter().any(|m| m.contains("Embed")),
        "{anthropic:?}"
    );
    // A path no endpoint serves names the new endpoints among those it does.
    let r = b.gw.post("/v1/embedding", &json!({}));
    assert_eq!(r.status, 404);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("POST /v1/embeddings") && msg.contains("POST /v1/completions"),
        "{msg}"
    );
}

#[test]
fn a_cached_model_answers_the_same_inputs_from_the_cache_in_either_shape() {
    let up = Queued::start();
    let gw = Gateway::start_every_kind(up.fake.addr, "cache_ttl_secs = 600\ninput_price = 2.0", "");
    let b = Bench { gw, up };
    b.up.push(Reply::json(200, &openai_answer(&[vec![0.5, 0.25]], 6)));
    let body = json!({"model": "m-chat", "input": "the same text", "dimensions": 2});
    let first = b.gw.post("/v1/embeddings", &body);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("x-tollgate-cache"), Some("miss"));
    assert_eq!(b.up.fake.received().len(), 1);

    // The same inputs again, asked as base64: from the cache, encoded for this client.
    let mut again = body.clone();
    again["encoding_format"] = json!("base64");
    let r = b.gw.post("/v1/embeddings", &again);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-tollgate-cache"), Some("hit"));
    assert_eq!(b.up.fake.received().len(), 1, "no upstream call");
    let b64 = r.json()["data"][0]["embedding"]
        .as_str()
        .unwrap()
        .to_string();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(
        bytes,
        [0.5f32.to_le_bytes(), 0.25f32.to_le_bytes()].concat()
    );
    assert_eq!(
        r.json()["usage"]["prompt_tokens"],
        6,
        "the first request's usage"
    );
    let rec = b.gw.record_of(&r);
    assert_eq!(rec["cache"], "hit");
    assert_eq!(rec["cost"].as_f64(), Some(0.0));

    // Other dimensions are another entry.
    b.up.push(Reply::json(200, &openai_answer(&[vec![1.0]], 6)));
    let r = b.gw.post(
        "/v1/embeddings",
        &json!({"model": "m-chat", "input": "the same text", "dimensions": 1}),
    );
    assert_eq!(r.header("x-tollgate-cache"), Some("miss"));
    assert_eq!(b.up.fake.received().len(), 2);
}

/// An upstream that fails before answering is passed over for the model's next one, as for generation; the
/// record names the one that answered.
#[test]
fn a_failing_upstream_fails_over_to_the_next() {
    let up = Queued::start();
    let dir = TempDir::new("embeddings-failover");
    let f = up.fake.addr;
    let config = format!(
        "{}[[upstreams]]\nname = \"bad\"\nkind = \"openai-chat\"\nbase_url = \"http://{f}/v1\"\n\n\
         [[upstreams]]\nname = \"good\"\nkind = \"openai-chat\"\nbase_url = \"http://{f}/v1\"\n\n\
         [[models]]\nname = \"e\"\nupstream = [\"bad\", \"good\"]\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""))
    );
    let gw = Gateway::start_with(dir, &config);
    up.push(Reply::json(
        503,
        &json!({"error": {"message": "overloaded", "type": "server_error"}}),
    ));
    up.push(Reply::json(200, &openai_answer(&[vec![0.5]], 2)));
    let r = gw.post("/v1/embeddings", &json!({"model": "e", "input": "x"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.fake.received().len(), 2);
    let rec = gw.record_of(&r);
    assert_eq!(rec["upstream"], "good");
    assert_eq!(rec["input_tokens"], 2);
}

/// The vectors of an embeddings answer in either client shape (OpenAI's floats or base64, Gemini's values).
fn vectors_of(v: &Value) -> Vec<Vec<f32>> {
    let openai = v["data"].as_array().map(|d| {
        d.iter()
            .map(|e| match &e["embedding"] {
                Value::String(b64) => base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                other => floats(other),
            })
            .collect()
    });
    openai.unwrap_or_else(|| {
        v["embeddings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| floats(&e["values"]))
            .collect()
    })
}

/// The cases of `fixtures/embeddings/` replayed: what the upstream received (where the client's own family
/// serves it, the body as sent with the model renamed, and the answer byte for byte), the vectors the client
/// reads, and the usage recorded (counted by Google's rule where a Gemini upstream reports none).
#[test]
fn the_fixtures_replay() {
    let b = bench();
    let dir = fixtures().join("embeddings");
    for case in [
        "openai_float",
        "openai_base64",
        "gemini_upstream",
        "gemini_client",
    ] {
        let fx = Fixture::load(&dir, case);
        let file: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{case}.json"))).unwrap(),
        )
        .unwrap();
        let (path, upstream_path) = (
            file["path"].as_str().unwrap(),
            file["upstream_path"].as_str().unwrap(),
        );
        b.up.push(fx.reply());
        let auth = format!("Bearer {}", b.gw.key);
        let r = b.gw.request(
            "POST",
            path,
            &[("authorization", &auth)],
            fx.request.to_string().as_bytes(),
        );
        let exp = &fx.expect;
        assert_eq!(
            r.status as u64,
            exp["status"].as_u64().unwrap(),
            "{case}: {}",
            r.text()
        );
        let up = b.up.fake.last();
        assert_eq!(up.path, upstream_path, "{case}");
        let passed_through = path == "/v1/embeddings" && upstream_path == "/v1/embeddings";
        if passed_through {
            let mut expected = fx.request.clone();
            expected["model"] = json!("real-chat-model");
            assert_eq!(up.json(), expected, "{case}: the body as sent");
            assert_eq!(
                r.json(),
                fx.upstream_body.clone().unwrap(),
                "{case}: the answer as it came"
            );
        }
        let vectors = vectors_of(&r.json());
        assert_eq!(
            vectors.len() as u64,
            exp["vectors"].as_u64().unwrap(),
            "{case}"
        );
        assert_eq!(
            vectors[0].len() as u64,
            exp["dimensions"].as_u64().unwrap(),
            "{case}"
        );
        let rec = b.gw.record_of(&r);
        assert_eq!(rec["input_tokens"], exp["usage"]["in"], "{case}: {rec}");
        assert_eq!(rec["output_tokens"], exp["usage"]["out"], "{case}");
        assert_eq!(rec["estimated"], exp["estimated"], "{case}");
        assert_eq!(rec["endpoint"], "embeddings", "{case}");
    }
}
