//! OpenAI's embeddings, `POST /v1/embeddings`: a client's request (`input` as a string, strings, token ids
//! or lists of them; `dimensions`; `encoding_format` `float` or `base64`, the Python SDK's default; `user`)
//! and its answer (`object: "list"`, a `data` entry per input with its `index`, `usage.prompt_tokens`); the
//! same for an OpenAI-compatible upstream (OpenAI, vLLM, llama.cpp, Ollama, TEI, LM Studio), which is asked
//! for floats.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use crate::protocol::codec::Embedder;
use crate::protocol::embed::{self, EmbedInput, EmbedRequest, Embeddings};
use crate::protocol::fields;
use crate::protocol::ApiError;

/// OpenAI's embeddings, for its clients and its upstreams.
pub(crate) struct OpenAiEmbedder;

/// What `input` may be, for the error texts.
const INPUT_SHAPES: &str =
    "a non-empty string, an array of non-empty strings, an array of token ids or an array of such arrays";

impl Embedder for OpenAiEmbedder {
    fn decode_embed(&self, _path: &str, body: &Value) -> Result<EmbedRequest, ApiError> {
        let o = fields::object(body, "body")?;
        let inputs = match o.get("input") {
            None | Some(Value::Null) => return Err(fields::missing("input")),
            Some(v) => inputs(v)?,
        };
        let dimensions = fields::opt_u64(o, "dimensions", "")?;
        if dimensions == Some(0) {
            return Err(fields::bad_value("dimensions", "a positive integer"));
        }
        let base64 = match fields::opt_str(o, "encoding_format", "")? {
            None | Some("float") => false,
            Some("base64") => true,
            Some(_) => return Err(fields::bad_value("encoding_format", "`float` or `base64`")),
        };
        Ok(EmbedRequest {
            inputs,
            dimensions,
            base64,
            user: fields::opt_str(o, "user", "")?.map(str::to_string),
            ..EmbedRequest::default()
        })
    }

    fn encode_embeddings(
        &self,
        answer: &Embeddings,
        req: &EmbedRequest,
        model: &str,
        input_tokens: u64,
    ) -> Value {
        let data: Vec<Value> = answer
            .vectors
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let embedding = if req.base64 {
                    Value::String(embed::to_base64(v))
                } else {
                    json!(v)
                };
                json!({"object": "embedding", "index": i, "embedding": embedding})
            })
            .collect();
        json!({
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": input_tokens, "total_tokens": input_tokens},
        })
    }

    fn upstream_embed_path(&self, _model: &str) -> Cow<'static, str> {
        Cow::Borrowed("/embeddings")
    }

    fn embed_request(&self, req: &EmbedRequest, model: &str) -> Result<Value, ApiError> {
        let input: Vec<Value> = req
            .inputs
            .iter()
            .map(|i| match i {
                EmbedInput::Text(t) => json!(t),
                EmbedInput::Tokens(ids) => json!(ids),
            })
            .collect();
        let mut o = Map::new();
        o.insert("model".into(), json!(model));
        o.insert("input".into(), Value::Array(input));
        o.insert("encoding_format".into(), json!("float"));
        if let Some(d) = req.dimensions {
            o.insert("dimensions".into(), json!(d));
        }
        if let Some(u) = &req.user {
            o.insert("user".into(), json!(u));
        }
        Ok(Value::Object(o))
    }

    /// OpenAI-compatible answers report `usage.prompt_tokens`; one that does not (a local server) is
    /// counted by the gateway's estimate.
    fn count_unreported(&self, req: &EmbedRequest) -> u64 {
        req.input_estimate()
    }

    fn decode_embeddings(&self, body: &Value) -> Result<Embeddings, ApiError> {
        let bad = |what: &str| ApiError::bad_gateway(format!("the upstream's embeddings answer {what}"));
        let data = body
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("has no `data` array"))?;
        let mut indexed = Vec::with_capacity(data.len());
        for (at, d) in data.iter().enumerate() {
            let index = d
                .get("index")
                .and_then(Value::as_u64)
                .map_or(at, |i| usize::try_from(i).unwrap_or(usize::MAX));
            let vector = match d.get("embedding") {
                Some(Value::String(b64)) => embed::from_base64(b64),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| x.as_f64().map(|f| f as f32))
                    .collect::<Option<Vec<f32>>>(),
                _ => None,
            }
            .ok_or_else(|| bad("has an entry whose `embedding` is not a vector"))?;
            indexed.push((index, vector));
        }
        indexed.sort_by_key(|(i, _)| *i);
        let input_tokens = body
            .get("usage")
            .and_then(|u| u.get("prompt_tokens"))
            .and_then(Value::as_u64);
        Ok(Embeddings {
            vectors: indexed.into_iter().map(|(_, v)| v).collect(),
            input_tokens,
        })
    }
}

/// `input` read: a string, strings, token ids, or lists of token ids; never empty.
fn inputs(v: &Value) -> Result<Vec<EmbedInput>, ApiError> {
    let bad = || fields::bad_value("input", INPUT_SHAPES);
    let text = |s: &str| {
        if s.is_empty() {
            Err(bad())
        } else {
            Ok(EmbedInput::Text(s.to_string()))
        }
    };
    let ids = |a: &[Value]| -> Result<EmbedInput, ApiError> {
        let ids: Option<Vec<u64>> = a.iter().map(Value::as_u64).collect();
        match ids {
            Some(ids) if !ids.is_empty() => Ok(EmbedInput::Tokens(ids)),
            _ => Err(bad()),
        }
    };
    match v {
        Value::String(s) => Ok(vec![text(s)?]),
        Value::Array(a) if a.is_empty() => Err(bad()),
        Value::Array(a) if a.iter().all(Value::is_number) => Ok(vec![ids(a)?]),
        Value::Array(a) => a
            .iter()
            .map(|item| match item {
                Value::String(s) => text(s),
                Value::Array(inner) => ids(inner),
                _ => Err(bad()),
            })
            .collect(),
        other => Err(fields::wrong_type("input", INPUT_SHAPES, other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: Value) -> Result<EmbedRequest, ApiError> {
        OpenAiEmbedder.decode_embed("/v1/embeddings", &body)
    }

    #[test]
    fn every_input_shape_is_read() {
        let one = decode(json!({"model": "m", "input": "hi"})).unwrap();
        assert_eq!(one.inputs, vec![EmbedInput::Text("hi".into())]);
        let many = decode(json!({"model": "m", "input": ["a", "b"], "dimensions": 8, "encoding_format": "base64"}))
            .unwrap();
        assert_eq!(many.inputs.len(), 2);
        assert_eq!((many.dimensions, many.base64), (Some(8), true));
        let ids = decode(json!({"model": "m", "input": [1, 2, 3]})).unwrap();
        assert_eq!(ids.inputs, vec![EmbedInput::Tokens(vec![1, 2, 3])]);
        let lists = decode(json!({"model": "m", "input": [[1], [2, 3]]})).unwrap();
        assert_eq!(lists.inputs.len(), 2);
    }

    #[test]
    fn bad_inputs_are_refused_naming_the_field() {
        for bad in [
            json!({"model": "m"}),
            json!({"model": "m", "input": ""}),
            json!({"model": "m", "input": []}),
            json!({"model": "m", "input": [""]}),
            json!({"model": "m", "input": [[]]}),
            json!({"model": "m", "input": {"text": "x"}}),
            json!({"model": "m", "input": [1.5]}),
            json!({"model": "m", "input": "x", "encoding_format": "int8"}),
            json!({"model": "m", "input": "x", "dimensions": 0}),
        ] {
            let e = decode(bad.clone()).unwrap_err();
            assert_eq!(e.status(), 400, "{bad}");
        }
    }

    #[test]
    fn answers_are_read_in_index_order_in_either_encoding() {
        let body = json!({
            "data": [
                {"index": 1, "embedding": embed::to_base64(&[2.0])},
                {"index": 0, "embedding": [1.0]},
            ],
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
        });
        let e = OpenAiEmbedder.decode_embeddings(&body).unwrap();
        assert_eq!(e.vectors, vec![vec![1.0], vec![2.0]]);
        assert_eq!(e.input_tokens, Some(7));
        let req = EmbedRequest {
            base64: true,
            ..EmbedRequest::default()
        };
        let out = OpenAiEmbedder.encode_embeddings(&e, &req, "m", 7);
        assert_eq!(out["data"][1]["embedding"], json!(embed::to_base64(&[2.0])));
        assert_eq!(out["usage"]["prompt_tokens"], 7);
    }
}
