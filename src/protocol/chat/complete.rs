//! OpenAI's legacy text completions, `POST /v1/completions`: the request read for what admission needs
//! (`prompt` as a string, strings, token ids or lists of them; `suffix`; `max_tokens`, 16 when absent; `n`;
//! `best_of`, which the upstream generates and bills; `stream`), passed to OpenAI-compatible upstreams at
//! `{base_url}/completions`.

use serde_json::Value;

use crate::protocol::completion::{CompletionAsk, Completions};
use crate::protocol::{fields, ApiError};

/// OpenAI's text completions.
pub(crate) static COMPLETIONS: Completions = Completions {
    upstream_path: "/completions",
    limit_field: "max_tokens",
    default_limit: 16,
    read,
    probe_body,
    answer_text,
};

fn probe_body(model: &str, prompt: &str) -> Value {
    serde_json::json!({"model": model, "prompt": prompt, "max_tokens": 16})
}

/// `choices[0].text`.
fn answer_text(v: &Value) -> Option<String> {
    v.pointer("/choices/0/text")?.as_str().map(str::to_string)
}

/// What `prompt` may be, for the error texts.
const PROMPT_SHAPES: &str =
    "a string, an array of strings, an array of token ids or an array of such arrays";

fn read(body: &Value) -> Result<CompletionAsk, ApiError> {
    let o = fields::object(body, "body")?;
    match o.get("prompt") {
        None | Some(Value::Null) => return Err(fields::missing("prompt")),
        Some(p) if !prompt_shape(p) => return Err(fields::wrong_type("prompt", PROMPT_SHAPES, p)),
        Some(_) => {}
    }
    fields::opt_str(o, "suffix", "")?;
    let stream = fields::stream_flag(o)?;
    let limit = fields::opt_u64(o, "max_tokens", "")?;
    let n = fields::opt_u64(o, "n", "")?.unwrap_or(1);
    let best_of = fields::opt_u64(o, "best_of", "")?.unwrap_or(n);
    if n == 0 {
        return Err(fields::bad_value("n", "an integer of at least 1"));
    }
    if best_of < n {
        return Err(ApiError::invalid_param(
            "best_of",
            format!("`best_of` ({best_of}) must be at least `n` ({n})."),
        ));
    }
    if stream && best_of > 1 {
        return Err(ApiError::invalid_param(
            "best_of",
            "`best_of` greater than 1 cannot be streamed.",
        ));
    }
    Ok(CompletionAsk {
        stream,
        limit,
        choices: best_of,
    })
}

/// Whether `p` is one of the prompt's shapes.
fn prompt_shape(p: &Value) -> bool {
    let ids = |a: &[Value]| a.iter().all(|x| x.as_u64().is_some());
    match p {
        Value::String(_) => true,
        Value::Array(a) if a.iter().all(Value::is_string) => true,
        Value::Array(a) if ids(a) => true,
        Value::Array(a) => a
            .iter()
            .all(|x| x.as_array().is_some_and(|inner| ids(inner))),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_read_for_admission() {
        let ask = read(&json!({"model": "m", "prompt": "def f(", "suffix": "    return 1", "max_tokens": 32}))
            .unwrap();
        assert_eq!(ask, CompletionAsk { stream: false, limit: Some(32), choices: 1 });
        let ask = read(&json!({"model": "m", "prompt": ["a", "b"], "n": 2, "best_of": 3})).unwrap();
        assert_eq!(ask.choices, 3, "best_of completions are generated and billed");
        let ask = read(&json!({"model": "m", "prompt": [[1, 2], [3]], "stream": true})).unwrap();
        assert!(ask.stream);
        assert_eq!(ask.limit, None);
    }

    #[test]
    fn bad_requests_name_the_field() {
        for (body, param) in [
            (json!({"model": "m"}), "prompt"),
            (json!({"model": "m", "prompt": {"text": "x"}}), "prompt"),
            (json!({"model": "m", "prompt": [1, "x"]}), "prompt"),
            (json!({"model": "m", "prompt": "x", "suffix": 3}), "suffix"),
            (json!({"model": "m", "prompt": "x", "max_tokens": -1}), "max_tokens"),
            (json!({"model": "m", "prompt": "x", "n": 0}), "n"),
            (json!({"model": "m", "prompt": "x", "n": 3, "best_of": 2}), "best_of"),
            (json!({"model": "m", "prompt": "x", "best_of": 2, "stream": true}), "best_of"),
        ] {
            let e = read(&body).unwrap_err();
            assert_eq!(e.status(), 400, "{body}");
            assert_eq!(e.param(), Some(param), "{body}");
        }
    }
}
