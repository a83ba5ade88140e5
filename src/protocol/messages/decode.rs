//! Anthropic Messages requests from clients: validated and decoded into the canonical request.

use serde_json::{json, Value};

use crate::protocol::canon::{ImageSource, Message, OutputFormat, Part, Request, Role, Tool, ToolChoice};
use crate::protocol::carried::Shape as C;
use crate::protocol::fields::{self, join, missing, opt_array, opt_f64, opt_str, opt_u64};
use crate::http::HttpRequest;
use crate::protocol::codec::RequestCodec;
use crate::protocol::{account, ApiError};

use super::Messages;

const TEXT: C = C::Obj(&[("type", C::Word(&["text"])), ("text", C::Str)]);
const IMAGE: C = C::Obj(&[
    ("type", C::Word(&["image"])),
    ("source", C::Either(&[
        C::Obj(&[("type", C::Word(&["base64"])), ("media_type", C::Str), ("data", C::Str)]),
        C::Obj(&[("type", C::Word(&["url"])), ("url", C::Str)]),
    ])),
]);
/// A content block as `decode_block` carries it. Redacted thinking, citations, documents and
/// `cache_control` are not carried.
const BLOCK: C = C::Either(&[
    TEXT,
    IMAGE,
    C::Obj(&[("type", C::Word(&["tool_use"])), ("id", C::Str), ("name", C::Str), ("input", C::Any)]),
    C::Obj(&[
        ("type", C::Word(&["tool_result"])),
        ("tool_use_id", C::Str),
        ("content", C::Either(&[C::Str, C::List(&C::Either(&[TEXT, IMAGE]))])),
        ("is_error", C::Bool),
    ]),
    C::Obj(&[("type", C::Word(&["thinking"])), ("thinking", C::Str), ("signature", C::Str)]),
]);

/// The fields `decode_request` carries into the canonical request, and those that only frame the answer.
/// Deferred tools, server tools, `thinking`, `top_k` and `output_config` are keyed as sent.
pub(super) static CARRIED: &[(&str, C)] = &[
    ("model", C::Frame),
    ("stream", C::Frame),
    ("metadata", C::Frame),
    ("system", C::Either(&[C::Str, C::List(&TEXT)])),
    ("messages", C::List(&C::Obj(&[
        ("role", C::Word(&["user", "assistant"])),
        ("content", C::Either(&[C::Str, C::List(&BLOCK)])),
    ]))),
    ("tools", C::List(&C::Obj(&[
        ("type", C::Word(&["custom"])),
        ("name", C::Str),
        ("description", C::Str),
        ("input_schema", C::Any),
    ]))),
    ("tool_choice", C::Either(&[
        C::Obj(&[("type", C::Word(&["auto", "any", "none"])), ("disable_parallel_tool_use", C::Bool)]),
        C::Obj(&[("type", C::Word(&["tool"])), ("name", C::Str), ("disable_parallel_tool_use", C::Bool)]),
    ])),
    ("max_tokens", C::Num),
    ("temperature", C::Num),
    ("top_p", C::Num),
    ("stop_sequences", C::List(&C::Str)),
];

/// Refuses `anthropic-beta` values that open account-scoped features.
pub(super) fn refuse_betas(req: &HttpRequest) -> Result<(), ApiError> {
    account::refuse_betas(req.header_all("anthropic-beta"))
}

impl RequestCodec for Messages {
    /// Checks the fields Messages requires before anything else: `max_tokens` (an integer) and `messages`.
    fn validate(&self, body: &Value) -> Result<(), ApiError> {
        let o = fields::object(body, "body")?;
        if opt_u64(o, "max_tokens", "")?.is_none() {
            return Err(ApiError::invalid_param(
                "max_tokens",
                "max_tokens: Field required. The Messages API needs the most tokens the answer may take, for \
                 example `\"max_tokens\": 1024` for a short answer (agents often send 8192 to 32000).",
            ));
        }
        if opt_array(o, "messages", "")?.is_none() {
            return Err(ApiError::invalid_param(
                "messages",
                "messages: Field required",
            ));
        }
        Ok(())
    }

    /// Validates a Messages body and decodes it into the canonical request.
    fn decode_request(&self, body: &Value) -> Result<Request, ApiError> {
        Messages.validate(body)?;
        let o = fields::object(body, "body")?;
        let mut req = Request {
            model: fields::req_str(o, "model", "")?.to_string(),
            stream: fields::stream_flag(o)?,
            max_tokens: opt_u64(o, "max_tokens", "")?,
            temperature: opt_f64(o, "temperature", "")?,
            top_p: opt_f64(o, "top_p", "")?,
            top_k: opt_u64(o, "top_k", "")?,
            ..Request::default()
        };
        decode_system(o, &mut req)?;
        decode_messages(o, &mut req)?;
        decode_tools(o, &mut req)?;
        if let Some(stops) = opt_array(o, "stop_sequences", "")? {
            req.stop = stops
                .iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
        }
        decode_output_options(o, &mut req);
        // OpenAI limits `user` to 64 characters; Claude Code's user ids are longer.
        req.user = o
            .get("metadata")
            .and_then(|m| m.get("user_id"))
            .and_then(Value::as_str)
            .map(|u| u.chars().take(64).collect());
        Ok(req)
    }


    fn asks_beyond_canon(&self, _body: &Value) -> bool {
        false
    }
}

type Obj = serde_json::Map<String, Value>;

/// `system`: a string or text blocks.
fn decode_system(o: &Obj, req: &mut Request) -> Result<(), ApiError> {
    match o.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => req.system.push(s.clone()),
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter().enumerate() {
                let path = format!("system[{i}]");
                let bo = fields::object(b, &path)?;
                req.system
                    .push(fields::req_str(bo, "text", &path)?.to_string());
            }
        }
        Some(other) => {
            return Err(fields::wrong_type(
                "system",
                "a string or an array of text blocks",
                other,
            ))
        }
    }
    Ok(())
}

fn decode_messages(o: &Obj, req: &mut Request) -> Result<(), ApiError> {
    for (i, m) in opt_array(o, "messages", "")?
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("messages[{i}]");
        let mo = fields::object(m, &path)?;
        let role = match fields::req_str(mo, "role", &path)? {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" => Role::System,
            other => {
                return Err(ApiError::invalid_param(
                    &join(&path, "role"),
                    format!(
                        "Invalid value for `{path}.role`: {other:?}. Expected user or assistant."
                    ),
                ))
            }
        };
        let content = decode_content(
            mo.get("content").unwrap_or(&Value::Null),
            &join(&path, "content"),
        )?;
        req.messages.push(Message { role, content });
    }
    Ok(())
}

/// `tools` (deferred tools and Anthropic's server tools left out, the latter reported) and `tool_choice`.
fn decode_tools(o: &Obj, req: &mut Request) -> Result<(), ApiError> {
    for (i, t) in opt_array(o, "tools", "")?.into_iter().flatten().enumerate() {
        let path = format!("tools[{i}]");
        let to = fields::object(t, &path)?;
        if to.get("defer_loading").and_then(Value::as_bool) == Some(true) {
            // Loaded on demand through Anthropic's tool search; not part of the tool list another upstream sees.
            log::debug!("leaving out the deferred tool {:?}", to.get("name"));
            continue;
        }
        match opt_str(to, "type", &path)? {
            None | Some("custom") => req.tools.push(Tool {
                custom: false,
                name: fields::req_str(to, "name", &path)?.to_string(),
                description: opt_str(to, "description", &path)?.map(str::to_string),
                parameters: to
                    .get("input_schema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
                strict: None,
            }),
            // Server tools (web_search_20250305, ...) run inside Anthropic: left out and reported.
            Some(other) => req.dropped_tools.push(other.to_string()),
        }
    }
    if let Some(Value::Object(c)) = o.get("tool_choice") {
        req.tool_choice = Some(match opt_str(c, "type", "tool_choice")?.unwrap_or("auto") {
            "any" => ToolChoice::Required,
            "none" => ToolChoice::None,
            "tool" => ToolChoice::Function(fields::req_str(c, "name", "tool_choice")?.to_string()),
            _ => ToolChoice::Auto,
        });
        if c.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
            req.parallel_tool_calls = Some(false);
        }
    }
    Ok(())
}

/// Structured output (`output_config.format`, or the older `output_format`) and reasoning effort
/// (`output_config.effort`, or a thinking budget).
fn decode_output_options(o: &Obj, req: &mut Request) {
    let format = o
        .get("output_config")
        .and_then(|c| c.get("format"))
        .or_else(|| o.get("output_format"));
    if let Some(Value::Object(f)) = format {
        if f.get("type").and_then(Value::as_str) == Some("json_schema") {
            req.output_format = Some(OutputFormat::JsonSchema {
                name: "output".into(),
                schema: f
                    .get("schema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
                strict: Some(true),
                description: None,
            });
        }
    }
    if let Some(effort) = o
        .get("output_config")
        .and_then(|c| c.get("effort"))
        .and_then(Value::as_str)
    {
        req.reasoning_effort = Some(effort.to_string());
    } else if let Some(Value::Object(t)) = o.get("thinking") {
        if t.get("type").and_then(Value::as_str) == Some("enabled") {
            let budget = t.get("budget_tokens").and_then(Value::as_u64).unwrap_or(0);
            req.reasoning_effort = Some(effort_for_budget(budget).to_string());
            req.reasoning_budget = Some(budget).filter(|b| *b > 0);
        }
    }
}

/// The effort level a thinking budget corresponds to (the inverse of the budget policy).
pub(super) fn effort_for_budget(budget: u64) -> &'static str {
    match budget {
        0..=3_999 => "low",
        4_000..=15_999 => "medium",
        _ => "high",
    }
}

fn decode_content(content: &Value, path: &str) -> Result<Vec<Part>, ApiError> {
    match content {
        Value::String(s) => Ok(vec![Part::Text(s.clone())]),
        Value::Array(blocks) => {
            let mut out = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                let bpath = format!("{path}[{i}]");
                if let Some(p) = decode_block(b, &bpath)? {
                    out.push(p);
                }
            }
            Ok(out)
        }
        Value::Null => Err(missing(path)),
        other => Err(fields::wrong_type(
            path,
            "a string or an array of content blocks",
            other,
        )),
    }
}

fn decode_block(b: &Value, path: &str) -> Result<Option<Part>, ApiError> {
    let bo = fields::object(b, path)?;
    Ok(Some(match fields::req_str(bo, "type", path)? {
        "text" => Part::Text(fields::req_str(bo, "text", path)?.to_string()),
        "image" => {
            let spath = join(path, "source");
            let so = fields::object(bo.get("source").unwrap_or(&Value::Null), &spath)?;
            match fields::req_str(so, "type", &spath)? {
                "base64" => Part::Image(ImageSource::Base64 {
                    media_type: fields::req_str(so, "media_type", &spath)?.to_string(),
                    data: fields::req_str(so, "data", &spath)?.to_string(),
                }),
                "url" => Part::Image(ImageSource::Url(
                    fields::req_str(so, "url", &spath)?.to_string(),
                )),
                other => {
                    return Err(ApiError::invalid_param(
                        &join(&spath, "type"),
                        format!(
                            "Image sources of type {other:?} are not supported by this gateway."
                        ),
                    ))
                }
            }
        }
        "tool_use" => Part::ToolCall {
            id: fields::req_str(bo, "id", path)?.to_string(),
            name: fields::req_str(bo, "name", path)?.to_string(),
            arguments: bo
                .get("input")
                .map(Value::to_string)
                .unwrap_or_else(|| "{}".into()),
        },
        "tool_result" => {
            let content = match bo.get("content") {
                None | Some(Value::Null) => Vec::new(),
                Some(c) => decode_content(c, &join(path, "content"))?,
            };
            Part::ToolResult {
                call_id: fields::req_str(bo, "tool_use_id", path)?.to_string(),
                content,
                is_error: bo.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            }
        }
        "thinking" => Part::Reasoning {
            text: opt_str(bo, "thinking", path)?.unwrap_or("").to_string(),
            signature: opt_str(bo, "signature", path)?.map(str::to_string),
        },
        "redacted_thinking" => return Ok(None),
        other => {
            return Err(ApiError::invalid_param(
                &join(path, "type"),
                format!("Content blocks of type {other:?} are not supported by this gateway."),
            ))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tokens_is_required() {
        let e = Messages.decode_request(&json!({"model": "m", "messages": []})).unwrap_err();
        assert_eq!(e.param(), Some("max_tokens"));
        let e =
            Messages.decode_request(&json!({"model": "m", "max_tokens": "5", "messages": []})).unwrap_err();
        assert_eq!(e.param(), Some("max_tokens"));
    }

    #[test]
    fn decodes_blocks() {
        let r = Messages.decode_request(&json!({
            "model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "s"}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": true}]}
            ]
        }))
        .unwrap();
        assert_eq!(r.system, vec!["s"]);
        assert_eq!(
            r.messages[1].content[0],
            Part::ToolCall {
                id: "t1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into()
            }
        );
        assert!(matches!(
            r.messages[2].content[0],
            Part::ToolResult { is_error: true, .. }
        ));
    }
}
