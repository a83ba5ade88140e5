//! The Gemini API's embeddings: `POST /v1beta/models/{model}:embedContent` (one content, `embedding` back)
//! and `:batchEmbedContents` (`requests`, `embeddings` back), also under `/v1/`, with `taskType`, `title` and
//! `outputDimensionality`; an upstream of this kind is always asked in a batch. Google reports no usage for
//! embeddings: they are counted by Google's documented rule (about four characters a token).

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::route::{self, Method};
use super::Gemini;
use crate::protocol::codec::Embedder;
use crate::protocol::embed::{EmbedInput, EmbedRequest, Embeddings};
use crate::protocol::{fields, ApiError};

impl Embedder for Gemini {
    fn decode_embed(&self, path: &str, body: &Value) -> Result<EmbedRequest, ApiError> {
        let o = fields::object(body, "body")?;
        let single = route::target(path).is_some_and(|t| t.method == Method::Embed);
        let mut req = EmbedRequest {
            single,
            ..EmbedRequest::default()
        };
        if single {
            one(o, "", &mut req)?;
            return Ok(req);
        }
        let requests = fields::opt_array(o, "requests", "")?.ok_or_else(|| fields::missing("requests"))?;
        if requests.is_empty() {
            return Err(fields::bad_value("requests", "a non-empty array"));
        }
        for (i, r) in requests.iter().enumerate() {
            let path = format!("requests[{i}]");
            one(fields::object(r, &path)?, &path, &mut req)?;
        }
        Ok(req)
    }

    fn encode_embeddings(
        &self,
        answer: &Embeddings,
        req: &EmbedRequest,
        _model: &str,
        _input_tokens: u64,
    ) -> Value {
        let mut vectors = answer.vectors.iter().map(|v| json!({"values": v}));
        if req.single {
            let first = vectors.next().unwrap_or_else(|| json!({"values": []}));
            return json!({"embedding": first});
        }
        json!({"embeddings": vectors.collect::<Vec<_>>()})
    }

    fn upstream_embed_path(&self, model: &str) -> Cow<'static, str> {
        route::method_path(model, "batchEmbedContents")
    }

    fn embed_request(&self, req: &EmbedRequest, model: &str) -> Result<Value, ApiError> {
        let texts = req.texts().ok_or_else(|| {
            ApiError::invalid_param(
                "input",
                "Token ids can be embedded only by an OpenAI-compatible upstream; this model's upstream is a Gemini \
                 API upstream, which takes text. Send the text instead.",
            )
        })?;
        let name = format!("models/{model}");
        let requests: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut r = Map::new();
                r.insert("model".into(), json!(name));
                r.insert("content".into(), json!({"parts": [{"text": t}]}));
                if let Some(task) = &req.task_type {
                    r.insert("taskType".into(), json!(task));
                }
                if let Some(Some(title)) = req.titles.get(i) {
                    r.insert("title".into(), json!(title));
                }
                if let Some(d) = req.dimensions {
                    r.insert("outputDimensionality".into(), json!(d));
                }
                Value::Object(r)
            })
            .collect();
        Ok(json!({"requests": requests}))
    }

    /// Google's documented rule for its models: a token is about four characters (of each text, rounded
    /// up; at least one).
    fn count_unreported(&self, req: &EmbedRequest) -> u64 {
        req.inputs
            .iter()
            .map(|i| match i {
                EmbedInput::Text(t) => (t.chars().count() as u64).div_ceil(4).max(1),
                EmbedInput::Tokens(ids) => ids.len() as u64,
            })
            .fold(0u64, u64::saturating_add)
    }

    fn decode_embeddings(&self, body: &Value) -> Result<Embeddings, ApiError> {
        let bad = |what: &str| ApiError::bad_gateway(format!("the upstream's embeddings answer {what}"));
        let list: Vec<&Value> = match (body.get("embeddings"), body.get("embedding")) {
            (Some(Value::Array(a)), _) => a.iter().collect(),
            (_, Some(one)) => vec![one],
            _ => return Err(bad("has neither `embeddings` nor `embedding`")),
        };
        let vectors = list
            .into_iter()
            .map(|e| {
                e.get("values")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect())
                    .ok_or_else(|| bad("has an embedding whose `values` is not a vector"))
            })
            .collect::<Result<Vec<Vec<f32>>, ApiError>>()?;
        Ok(Embeddings {
            vectors,
            input_tokens: None,
        })
    }
}

/// One `EmbedContentRequest` (the body of `:embedContent`, or an entry of a batch's `requests`) read into
/// `req`: its content's text parts, joined, as one input; its task, title and dimensionality (one task and
/// one dimensionality for the whole batch).
fn one(o: &Map<String, Value>, path: &str, req: &mut EmbedRequest) -> Result<(), ApiError> {
    let content_path = fields::join(path, "content");
    let content = o.get("content").ok_or_else(|| fields::missing(&content_path))?;
    let parts = fields::opt_array(fields::object(content, &content_path)?, "parts", &content_path)?
        .filter(|p| !p.is_empty())
        .ok_or_else(|| fields::missing(&fields::join(&content_path, "parts")))?;
    let mut text = String::new();
    for (i, p) in parts.iter().enumerate() {
        let part_path = format!("{content_path}.parts[{i}]");
        let t = fields::opt_str(fields::object(p, &part_path)?, "text", &part_path)?.ok_or_else(|| {
            ApiError::invalid_param(
                &part_path,
                format!("`{part_path}` has no `text`: the gateway embeds text parts only."),
            )
        })?;
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(t);
    }
    if text.is_empty() {
        return Err(fields::bad_value(&content_path, "content with some text"));
    }
    let task = fields::opt_str(o, "taskType", path)?.map(str::to_string);
    let dims = fields::opt_u64(o, "outputDimensionality", path)?;
    let first = req.inputs.is_empty();
    if first {
        req.task_type = task;
        req.dimensions = dims;
    } else if task != req.task_type || dims != req.dimensions {
        return Err(ApiError::invalid_param(
            path,
            "Every request of a batch must ask for the same `taskType` and `outputDimensionality`.",
        ));
    }
    req.titles
        .push(fields::opt_str(o, "title", path)?.map(str::to_string));
    req.inputs.push(EmbedInput::Text(text));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_batch_requests_are_read() {
        let single = Gemini
            .decode_embed(
                "/v1beta/models/e:embedContent",
                &json!({"content": {"parts": [{"text": "a"}, {"text": "b"}]}, "taskType": "RETRIEVAL_QUERY",
                        "outputDimensionality": 8}),
            )
            .unwrap();
        assert!(single.single);
        assert_eq!(single.inputs, vec![EmbedInput::Text("a\nb".into())]);
        assert_eq!((single.task_type.as_deref(), single.dimensions), (Some("RETRIEVAL_QUERY"), Some(8)));
        let batch = Gemini
            .decode_embed(
                "/v1/models/e:batchEmbedContents",
                &json!({"requests": [
                    {"model": "models/e", "content": {"parts": [{"text": "x"}]}, "title": "T"},
                    {"model": "models/e", "content": {"parts": [{"text": "y"}]}},
                ]}),
            )
            .unwrap();
        assert!(!batch.single);
        assert_eq!(batch.inputs.len(), 2);
        assert_eq!(batch.titles, vec![Some("T".to_string()), None]);
    }

    #[test]
    fn bad_requests_name_the_field() {
        for (path, body) in [
            ("/v1beta/models/e:embedContent", json!({})),
            ("/v1beta/models/e:embedContent", json!({"content": {"parts": []}})),
            ("/v1beta/models/e:embedContent", json!({"content": {"parts": [{"inlineData": {}}]}})),
            ("/v1beta/models/e:batchEmbedContents", json!({"requests": []})),
            (
                "/v1beta/models/e:batchEmbedContents",
                json!({"requests": [
                    {"content": {"parts": [{"text": "x"}]}, "taskType": "A"},
                    {"content": {"parts": [{"text": "y"}]}, "taskType": "B"},
                ]}),
            ),
        ] {
            let e = Gemini.decode_embed(path, &body).unwrap_err();
            assert_eq!(e.status(), 400, "{body}");
        }
    }

    #[test]
    fn upstream_requests_are_batches_and_answers_come_back_in_order() {
        let req = EmbedRequest {
            inputs: vec![EmbedInput::Text("x".into()), EmbedInput::Text("y".into())],
            dimensions: Some(4),
            titles: vec![None, Some("T".into())],
            ..EmbedRequest::default()
        };
        let body = Gemini.embed_request(&req, "text-embedding-004").unwrap();
        assert_eq!(body["requests"][0]["model"], "models/text-embedding-004");
        assert_eq!(body["requests"][1]["title"], "T");
        assert_eq!(body["requests"][0]["outputDimensionality"], 4);
        let tokens = EmbedRequest {
            inputs: vec![EmbedInput::Tokens(vec![1])],
            ..EmbedRequest::default()
        };
        assert_eq!(Gemini.embed_request(&tokens, "m").unwrap_err().status(), 400);
        let answer = json!({"embeddings": [{"values": [1.0, 2.0]}, {"values": [3.0]}]});
        let e = Gemini.decode_embeddings(&answer).unwrap();
        assert_eq!(e.vectors, vec![vec![1.0, 2.0], vec![3.0]]);
        assert_eq!(e.input_tokens, None);
        assert_eq!(Gemini.count_unreported(&req), 2, "\"x\" and \"y\": one token each");
        let single = EmbedRequest {
            single: true,
            ..EmbedRequest::default()
        };
        let out = Gemini.encode_embeddings(&e, &single, "m", 0);
        assert_eq!(out, json!({"embedding": {"values": [1.0, 2.0]}}));
    }
}
