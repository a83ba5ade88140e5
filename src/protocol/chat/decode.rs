//! OpenAI Chat Completions requests from clients: validated and decoded into the canonical request.

use serde_json::{Map, Value};

use crate::protocol::canon::{Message, Part, Request, Role, Tool};
use crate::protocol::carried::Shape as C;
use crate::protocol::fields::{self, join, missing, opt_array, opt_bool, opt_f64, opt_str, opt_u64};
use crate::protocol::openai::{self, OpenAiShape};
use crate::protocol::codec::RequestCodec;
use crate::protocol::ApiError;

use super::Chat;

/// A text part.
const TEXT: C = C::Obj(&[("type", C::Word(&["text"])), ("text", C::Str)]);
/// Text as `text_of` carries it: a string or one text part (several are joined, refusals read as text).
const ONE_TEXT: C = C::Either(&[C::Str, C::Single(&TEXT)]);
/// An image by URL (`detail` is not carried).
const IMAGE: C = C::Obj(&[
    ("type", C::Word(&["image_url"])),
    ("image_url", C::Either(&[C::Str, C::Obj(&[("url", C::Str)])])),
]);
const MESSAGE: C = C::Either(&[
    C::Obj(&[("role", C::Word(&["system", "developer"])), ("content", ONE_TEXT)]),
    C::Obj(&[
        ("role", C::Word(&["user"])),
        ("content", C::Either(&[C::Str, C::List(&C::Either(&[TEXT, IMAGE]))])),
    ]),
    C::Obj(&[
        ("role", C::Word(&["assistant"])),
        ("content", ONE_TEXT),
        ("reasoning_content", C::Str),
        ("tool_calls", C::List(&C::Obj(&[
            ("id", C::Str),
            ("type", C::Word(&["function"])),
            ("function", C::Obj(&[("name", C::Str), ("arguments", C::Str)])),
        ]))),
    ]),
    C::Obj(&[("role", C::Word(&["tool"])), ("tool_call_id", C::Str), ("content", ONE_TEXT)]),
]);

/// The fields `decode_request` carries into the canonical request, and those that only frame the answer
/// (`n` above 1 is never cached). A message's `name`, an image's `detail`, custom tools, `allowed_tools` are
/// not carried: a body holding them is keyed on them as sent.
pub(super) static CARRIED: &[(&str, C)] = &[
    ("model", C::Frame),
    ("stream", C::Frame),
    ("stream_options", C::Frame),
    ("user", C::Frame),
    ("metadata", C::Frame),
    ("store", C::Frame),
    ("safety_identifier", C::Frame),
    ("prompt_cache_key", C::Frame),
    ("n", C::Frame),
    ("messages", C::List(&MESSAGE)),
    ("tools", C::List(&C::Obj(&[
        ("type", C::Word(&["function"])),
        ("function", C::Obj(openai::FUNCTION)),
    ]))),
    ("tool_choice", C::Either(&[
        openai::CHOICE_WORDS,
        C::Obj(&[("type", C::Word(&["function"])), ("function", C::Obj(&[("name", C::Str)]))]),
    ])),
    ("parallel_tool_calls", C::Bool),
    ("max_tokens", C::Num),
    ("max_completion_tokens", C::Num),
    ("temperature", C::Num),
    ("top_p", C::Num),
    ("stop", C::Either(&[C::Str, C::List(&C::Str)])),
    ("response_format", C::Either(&[
        C::Obj(&[("type", C::Word(&["text", "json_object"]))]),
        C::Obj(&[("type", C::Word(&["json_schema"])), ("json_schema", C::Obj(openai::SCHEMA))]),
    ])),
    ("reasoning_effort", C::Str),
];

impl RequestCodec for Chat {
    /// Checks that a Chat Completions body has `messages` (pointing at `input` when that was sent instead).
    fn validate(&self, body: &Value) -> Result<(), ApiError> {
        messages_of(fields::object(body, "body")?).map(|_| ())
    }

    /// Validates a Chat Completions body and decodes it into the canonical request.
    fn decode_request(&self, body: &Value) -> Result<Request, ApiError> {
        let o = fields::object(body, "body")?;
        let messages = messages_of(o)?;
        let model = fields::req_str(o, "model", "")?.to_string();
        if opt_u64(o, "n", "")?.is_some_and(|n| n > 1) {
            return Err(ApiError::invalid_param(
                "n",
                "`n` greater than 1 is not supported for this model: its upstream returns one choice per request.",
            ));
        }
        let mut req = Request {
            model,
            stream: fields::stream_flag(o)?,
            ..Request::default()
        };
        for (i, m) in messages.iter().enumerate() {
            decode_message(m, &format!("messages[{i}]"), &mut req)?;
        }
        if let Some(tools) = opt_array(o, "tools", "")? {
            for (i, t) in tools.iter().enumerate() {
                req.tools.push(decode_tool(t, &format!("tools[{i}]"))?);
            }
        }
        req.tool_choice = match o.get("tool_choice") {
            None => None,
            Some(v) => openai::decode_tool_choice(v, OpenAiShape::Nested, &mut req.tools)?,
        };
        req.parallel_tool_calls = opt_bool(o, "parallel_tool_calls", "")?;
        req.max_tokens = match opt_u64(o, "max_completion_tokens", "")? {
            Some(n) => Some(n),
            None => opt_u64(o, "max_tokens", "")?,
        };
        req.temperature = opt_f64(o, "temperature", "")?;
        req.top_p = opt_f64(o, "top_p", "")?;
        req.stop = match o.get("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|s| {
                    s.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| fields::bad_value("stop", "strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(fields::wrong_type(
                    "stop",
                    "a string or an array of strings",
                    other,
                ))
            }
        };
        req.output_format = match o.get("response_format") {
            None | Some(Value::Null) => None,
            Some(v) => Some(openai::decode_output_format(
                v,
                "response_format",
                OpenAiShape::Nested,
            )?),
        };
        req.reasoning_effort = opt_str(o, "reasoning_effort", "")?.map(str::to_string);
        req.user = opt_str(o, "user", "")?.map(str::to_string);
        Ok(req)
    }


    /// Log probabilities, and audio out.
    fn asks_beyond_canon(&self, body: &Value) -> bool {
        let set = |k: &str| body.get(k).is_some_and(|v| !v.is_null() && v != false);
        let audio = body
            .get("modalities")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|v| v == "audio"));
        set("logprobs") || set("top_logprobs") || set("audio") || audio
    }
}

fn messages_of(o: &Map<String, Value>) -> Result<&Vec<Value>, ApiError> {
    match o.get("messages") {
        None | Some(Value::Null) if o.contains_key("input") => Err(ApiError::invalid_param(
            "messages",
            "Missing required parameter: `messages`. This body has `input`, which belongs to the \
             Responses API (POST /v1/responses); Chat Completions takes `messages`.",
        )),
        None | Some(Value::Null) => Err(missing("messages")),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(fields::wrong_type("messages", "an array", other)),
    }
}

fn decode_message(m: &Value, path: &str, req: &mut Request) -> Result<(), ApiError> {
    let o = fields::object(m, path)?;
    let role = fields::req_str(o, "role", path)?;
    let content_path = join(path, "content");
    let content = o.get("content").unwrap_or(&Value::Null);
    match role {
        "system" | "developer" => {
            let text = text_of(content, &content_path)?;
            if req.messages.is_empty() {
                req.system.push(text);
            } else {
                req.messages.push(Message::text(Role::System, text));
            }
        }
        "user" => {
            let parts = decode_user_content(content, &content_path)?;
            req.messages.push(Message { role: Role::User, content: parts });
        }
        "assistant" => {
            let mut parts = Vec::new();
            if let Some(r) = opt_str(o, "reasoning_content", path)? {
                if !r.is_empty() {
                    parts.push(Part::Reasoning { text: r.to_string(), signature: None });
                }
            }
            match content {
                Value::Null => {}
                other => {
                    let t = text_of(other, &content_path)?;
                    if !t.is_empty() {
                        parts.push(Part::Text(t));
                    }
                }
            }
            for (i, call) in opt_array(o, "tool_calls", path)?.into_iter().flatten().enumerate() {
                let cpath = format!("{path}.tool_calls[{i}]");
                let c = fields::object(call, &cpath)?;
                let f = fields::object(c.get("function").unwrap_or(&Value::Null), &join(&cpath, "function"))?;
                parts.push(Part::ToolCall {
                    id: fields::req_str(c, "id", &cpath)?.to_string(),
                    name: fields::req_str(f, "name", &join(&cpath, "function"))?.to_string(),
                    arguments: opt_str(f, "arguments", &join(&cpath, "function"))?
                        .unwrap_or("{}")
                        .to_string(),
                });
            }
            req.messages.push(Message { role: Role::Assistant, content: parts });
        }
        "tool" => {
            let call_id = fields::req_str(o, "tool_call_id", path)?.to_string();
            let text = text_of(content, &content_path)?;
            req.messages.push(Message {
                role: Role::Tool,
                content: vec![Part::ToolResult { call_id, content: vec![Part::Text(text)], is_error: false }],
            });
        }
        "function" => {
            return Err(ApiError::invalid_param(
                &join(path, "role"),
                "The deprecated `function` role is not supported; use `tool` messages.",
            ))
        }
        other => {
            return Err(ApiError::invalid_param(
                &join(path, "role"),
                format!("Invalid value for `{path}.role`: {other:?}. Expected system, developer, user, assistant or tool."),
            ))
        }
    }
    Ok(())
}

/// Text of a content value: a string or an array of text parts (other part types are refused).
fn text_of(content: &Value, path: &str) -> Result<String, ApiError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for (i, p) in parts.iter().enumerate() {
                let ppath = format!("{path}[{i}]");
                let po = fields::object(p, &ppath)?;
                match fields::req_str(po, "type", &ppath)? {
                    "text" => out.push_str(fields::req_str(po, "text", &ppath)?),
                    "refusal" => out.push_str(fields::req_str(po, "refusal", &ppath)?),
                    other => {
                        return Err(ApiError::invalid_param(
                            &join(&ppath, "type"),
                            format!(
                                "Content parts of type {other:?} are not allowed here; only text."
                            ),
                        ))
                    }
                }
            }
            Ok(out)
        }
        other => Err(fields::wrong_type(
            path,
            "a string or an array of content parts",
            other,
        )),
    }
}

fn decode_user_content(content: &Value, path: &str) -> Result<Vec<Part>, ApiError> {
    match content {
        Value::String(s) => Ok(vec![Part::Text(s.clone())]),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                let ppath = format!("{path}[{i}]");
                let po = fields::object(p, &ppath)?;
                match fields::req_str(po, "type", &ppath)? {
                    "text" => {
                        out.push(Part::Text(fields::req_str(po, "text", &ppath)?.to_string()))
                    }
                    "image_url" => {
                        let ipath = join(&ppath, "image_url");
                        let url = match po.get("image_url") {
                            Some(Value::String(s)) => s.as_str(),
                            Some(Value::Object(io)) => fields::req_str(io, "url", &ipath)?,
                            _ => return Err(missing(&join(&ipath, "url"))),
                        };
                        out.push(Part::Image(openai::parse_image_url(url)));
                    }
                    other => {
                        return Err(ApiError::invalid_param(
                            &join(&ppath, "type"),
                            format!(
                            "Content parts of type {other:?} are not supported by this gateway."
                        ),
                        ))
                    }
                }
            }
            Ok(out)
        }
        Value::Null => Err(missing(path)),
        other => Err(fields::wrong_type(
            path,
            "a string or an array of content parts",
            other,
        )),
    }
}

/// A tool of the list: only function tools (nested under `function`) are accepted.
fn decode_tool(t: &Value, path: &str) -> Result<Tool, ApiError> {
    let o = fields::object(t, path)?;
    match opt_str(o, "type", path)?.unwrap_or("function") {
        "function" => {}
        other => {
            return Err(ApiError::invalid_param(
                &join(path, "type"),
                format!("Tools of type {other:?} are not supported; use function tools."),
            ))
        }
    }
    let fpath = join(path, "function");
    let f = fields::object(o.get("function").unwrap_or(&Value::Null), &fpath)?;
    openai::decode_function(f, &fpath)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::canon::{ImageSource, ToolChoice};
    use serde_json::json;

    #[test]
    fn input_instead_of_messages_names_the_field() {
        let e = Chat.decode_request(&json!({"model": "m", "input": "hi"})).unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(e.param(), Some("messages"));
        assert!(e.message().contains("input"));
    }

    #[test]
    fn decodes_roles_tools_and_options() {
        let r = Chat.decode_request(&json!({
            "model": "m", "stream": true, "max_tokens": 7, "stop": "x",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "hi"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"}
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}}
        }))
        .unwrap();
        assert_eq!(r.system, vec!["sys"]);
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.max_tokens, Some(7));
        assert_eq!(r.stop, vec!["x"]);
        assert!(r.stream);
        assert_eq!(r.tool_choice, Some(ToolChoice::Function("f".into())));
        assert_eq!(
            r.messages[0].content[1],
            Part::Image(ImageSource::Base64 {
                media_type: "image/png".into(),
                data: "AAA".into()
            })
        );
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e =
            Chat.decode_request(&json!({"model": "m", "messages": [{"role": "user", "content": 5}]}))
                .unwrap_err();
        assert_eq!(e.param(), Some("messages[0].content"));
        let e = Chat.decode_request(&json!({"model": 1, "messages": []})).unwrap_err();
        assert_eq!(e.param(), Some("model"));
    }
}
