//! OpenAI Responses requests from clients: validated and decoded into the canonical request.

use serde_json::{json, Value};

use crate::protocol::canon::{Message, Part, Request, Role, Tool};
use crate::protocol::carried::Shape as C;
use crate::protocol::fields::{self, join, missing, opt_array, opt_bool, opt_f64, opt_str, opt_u64};
use crate::protocol::openai::{self, OpenAiShape};
use crate::protocol::codec::RequestCodec;
use crate::protocol::ApiError;

use super::Responses;

/// A text part (any of the three names `decode_content` reads as text).
const TEXT: C = C::Obj(&[("type", C::Word(&["input_text", "output_text", "text"])), ("text", C::Str)]);
/// An image by URL (`detail` and `file_id` are not carried).
const IMAGE: C = C::Obj(&[("type", C::Word(&["input_image"])), ("image_url", C::Str)]);
const CONTENT: C = C::Either(&[C::Str, C::List(&C::Either(&[TEXT, IMAGE]))]);
/// An input item as `decode_item` carries it. A system or developer message carries its text only (a
/// leading one joins the system prompt, and its parts are joined): one text part at most. Reasoning items
/// (their summary only is carried), custom tool calls and namespaced calls are not carried.
const ITEM: C = C::Either(&[
    C::Obj(&[
        ("type", C::Word(&["message"])),
        ("role", C::Word(&["user", "assistant"])),
        ("content", CONTENT),
    ]),
    C::Obj(&[
        ("type", C::Word(&["message"])),
        ("role", C::Word(&["system", "developer"])),
        ("content", C::Either(&[C::Str, C::Single(&TEXT)])),
    ]),
    C::Obj(&[
        ("type", C::Word(&["function_call"])),
        ("call_id", C::Str),
        ("name", C::Str),
        ("arguments", C::Str),
    ]),
    C::Obj(&[
        ("type", C::Word(&["function_call_output"])),
        ("call_id", C::Str),
        ("output", CONTENT),
    ]),
]);

/// The fields `decode_request` carries into the canonical request, and those that only frame the answer.
/// `text`, `reasoning` and `include` are keyed as sent; so are custom tools with a `format` and namespaces.
pub(super) static CARRIED: &[(&str, C)] = &[
    ("model", C::Frame),
    ("stream", C::Frame),
    ("stream_options", C::Frame),
    ("user", C::Frame),
    ("metadata", C::Frame),
    ("store", C::Frame),
    ("safety_identifier", C::Frame),
    ("prompt_cache_key", C::Frame),
    ("instructions", C::Str),
    ("input", C::Either(&[C::Str, C::List(&ITEM)])),
    ("tools", C::List(&C::Either(&[
        C::Obj(&[
            ("type", C::Word(&["function"])),
            ("name", C::Str),
            ("description", C::Str),
            ("parameters", C::Any),
            ("strict", C::Bool),
        ]),
        C::Obj(&[("type", C::Word(&["custom"])), ("name", C::Str), ("description", C::Str)]),
    ]))),
    ("tool_choice", C::Either(&[
        openai::CHOICE_WORDS,
        C::Obj(&[("type", C::Word(&["function"])), ("name", C::Str)]),
    ])),
    ("parallel_tool_calls", C::Bool),
    ("max_output_tokens", C::Num),
    ("temperature", C::Num),
    ("top_p", C::Num),
];

impl RequestCodec for Responses {
    /// Checks that a Responses body has `input` (pointing at `messages` when that was sent instead).
    fn validate(&self, body: &Value) -> Result<(), ApiError> {
        input_of(fields::object(body, "body")?).map(|_| ())
    }

    /// Validates a Responses body and decodes it into the canonical request.
    fn decode_request(&self, body: &Value) -> Result<Request, ApiError> {
        let o = fields::object(body, "body")?;
        let input = input_of(o)?;
        for key in ["previous_response_id", "conversation"] {
            if o.get(key).is_some_and(|v| !v.is_null()) {
                return Err(ApiError::invalid_param(
                    key,
                    format!(
                        "`{key}` needs responses stored on the server, and this model's upstream does not keep them; \
                         send the whole conversation in `input` instead."
                    ),
                ));
            }
        }
        if opt_bool(o, "background", "")? == Some(true) {
            return Err(ApiError::invalid_param(
                "background",
                "Background responses are not supported by this gateway.",
            ));
        }
        let mut req = Request {
            model: fields::req_str(o, "model", "")?.to_string(),
            stream: fields::stream_flag(o)?,
            ..Request::default()
        };
        if let Some(instr) = opt_str(o, "instructions", "")? {
            req.instructions = Some(instr.to_string());
            req.system.push(instr.to_string());
        }
        match input {
            Value::String(s) => req.messages.push(Message::text(Role::User, s.clone())),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    decode_item(item, &format!("input[{i}]"), &mut req)?;
                }
            }
            other => {
                return Err(fields::wrong_type(
                    "input",
                    "a string or an array of input items",
                    other,
                ))
            }
        }
        if let Some(tools) = opt_array(o, "tools", "")? {
            for (i, t) in tools.iter().enumerate() {
                decode_tool(t, &format!("tools[{i}]"), &mut req)?;
            }
        }
        req.tool_choice = match o.get("tool_choice") {
            None => None,
            Some(v) => openai::decode_tool_choice(v, OpenAiShape::Flat, &mut req.tools)?,
        };
        req.parallel_tool_calls = opt_bool(o, "parallel_tool_calls", "")?;
        req.max_tokens = opt_u64(o, "max_output_tokens", "")?;
        req.temperature = opt_f64(o, "temperature", "")?;
        req.top_p = opt_f64(o, "top_p", "")?;
        req.user = opt_str(o, "user", "")?.map(str::to_string);
        if let Some(Value::Object(text)) = o.get("text") {
            if let Some(f) = text.get("format") {
                req.output_format = Some(openai::decode_output_format(f, "text.format", OpenAiShape::Flat)?);
            }
        }
        if let Some(Value::Object(r)) = o.get("reasoning") {
            req.reasoning_effort = opt_str(r, "effort", "reasoning")?.map(str::to_string);
        }
        Ok(req)
    }


    /// Log probabilities.
    fn asks_beyond_canon(&self, body: &Value) -> bool {
        let included = body
            .get("include")
            .and_then(Value::as_array)
            .is_some_and(|i| i.iter().any(|v| v == "message.output_text.logprobs"));
        included || body.get("top_logprobs").is_some_and(|v| !v.is_null())
    }
}

fn input_of(o: &serde_json::Map<String, Value>) -> Result<&Value, ApiError> {
    match o.get("input") {
        None | Some(Value::Null) if o.contains_key("messages") => Err(ApiError::invalid_param(
            "input",
            "Missing required parameter: `input`. This body has `messages`, which belongs to the Chat \
             Completions API (POST /v1/chat/completions); the Responses API takes `input`.",
        )),
        None | Some(Value::Null) => Err(missing("input")),
        Some(v) => Ok(v),
    }
}

/// The plain function name standing for `name` inside namespace `ns`: `ns__name`, shortened with a hash
/// suffix when it would pass the 64 characters function names may have.
pub(super) fn flatten_name(ns: &str, name: &str) -> String {
    let flat = format!("{ns}__{name}");
    if flat.len() <= 64 {
        return flat;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(flat.as_bytes());
    let suffix: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let mut cut = 55;
    while !flat.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}_{suffix}", &flat[..cut])
}

/// The parameters of the function that carries a custom (free-form) tool.
fn custom_parameters() -> Value {
    json!({"type": "object", "properties": {"input": {"type": "string", "description": "The tool's input."}},
           "required": ["input"]})
}

fn decode_tool(t: &Value, path: &str, req: &mut Request) -> Result<(), ApiError> {
    let to = fields::object(t, path)?;
    match fields::req_str(to, "type", path)? {
        "function" => req.tools.push(openai::decode_function(to, path)?),
        "custom" => req.tools.push(decode_custom_tool(to, path)?),
        "namespace" => {
            let ns = fields::req_str(to, "name", path)?;
            let ns_desc = opt_str(to, "description", path)?.unwrap_or("");
            for (j, inner) in opt_array(to, "tools", path)?
                .into_iter()
                .flatten()
                .enumerate()
            {
                let ipath = format!("{path}.tools[{j}]");
                let io = fields::object(inner, &ipath)?;
                let mut tool = match opt_str(io, "type", &ipath)?.unwrap_or("function") {
                    "custom" => decode_custom_tool(io, &ipath)?,
                    _ => openai::decode_function(io, &ipath)?,
                };
                let flat = flatten_name(ns, &tool.name);
                req.namespaced_tools
                    .push((flat.clone(), ns.to_string(), tool.name.clone()));
                let desc = tool.description.take().unwrap_or_default();
                tool.description = Some(format!("[{ns}: {ns_desc}] {desc}").trim().to_string());
                tool.name = flat;
                req.tools.push(tool);
            }
        }
        // Hosted tools (web_search, file_search, mcp, ...) run inside OpenAI; another upstream cannot run
        // them. They are left out and reported.
        other => req.dropped_tools.push(other.to_string()),
    }
    Ok(())
}

fn decode_custom_tool(to: &serde_json::Map<String, Value>, path: &str) -> Result<Tool, ApiError> {
    Ok(Tool {
        custom: true,
        name: fields::req_str(to, "name", path)?.to_string(),
        description: opt_str(to, "description", path)?.map(str::to_string),
        parameters: custom_parameters(),
        strict: None,
    })
}

fn decode_item(item: &Value, path: &str, req: &mut Request) -> Result<(), ApiError> {
    let o = fields::object(item, path)?;
    let ty = opt_str(o, "type", path)?.unwrap_or("message");
    match ty {
        "message" => decode_message_item(o, path, req)?,
        "function_call" | "custom_tool_call" => decode_call_item(o, ty, path, req)?,
        "function_call_output" | "custom_tool_call_output" => decode_output_item(o, path, req)?,
        "reasoning" => decode_reasoning_item(o, path, req)?,
        "item_reference" => return Err(ApiError::invalid_param(
            path,
            "`item_reference` input items need stored responses, which this gateway does not keep.",
        )),
        other => {
            return Err(ApiError::invalid_param(
                &join(path, "type"),
                format!("Input items of type {other:?} are not supported by this gateway."),
            ))
        }
    }
    Ok(())
}

type Obj = serde_json::Map<String, Value>;

/// A message item; leading system and developer messages join the system prompt.
fn decode_message_item(o: &Obj, path: &str, req: &mut Request) -> Result<(), ApiError> {
    let role = match fields::req_str(o, "role", path)? {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" | "developer" => Role::System,
        other => {
            return Err(ApiError::invalid_param(
                &join(path, "role"),
                format!("Invalid value for `{path}.role`: {other:?}."),
            ))
        }
    };
    let parts = decode_content(
        o.get("content").unwrap_or(&Value::Null),
        &join(path, "content"),
    )?;
    if role == Role::System && req.messages.is_empty() {
        let text: String = parts
            .iter()
            .filter_map(|p| {
                if let Part::Text(t) = p {
                    Some(t.as_str())
                } else {
                    None
                }
            })
            .collect();
        req.system.push(text);
    } else {
        push_merged(req, role, parts);
    }
    Ok(())
}

/// A function (or custom tool) call the assistant made earlier.
fn decode_call_item(o: &Obj, ty: &str, path: &str, req: &mut Request) -> Result<(), ApiError> {
    let name = fields::req_str(o, "name", path)?;
    let name = match opt_str(o, "namespace", path)? {
        Some(ns) => flatten_name(ns, name),
        None => name.to_string(),
    };
    let arguments = if ty == "custom_tool_call" {
        json!({"input": opt_str(o, "input", path)?.unwrap_or("")}).to_string()
    } else {
        opt_str(o, "arguments", path)?.unwrap_or("{}").to_string()
    };
    let call = Part::ToolCall {
        id: fields::req_str(o, "call_id", path)?.to_string(),
        name,
        arguments,
    };
    push_merged(req, Role::Assistant, vec![call]);
    Ok(())
}

/// The output of an earlier call, as a tool result.
fn decode_output_item(o: &Obj, path: &str, req: &mut Request) -> Result<(), ApiError> {
    let opath = join(path, "output");
    let content = match o.get("output") {
        Some(Value::String(s)) => vec![Part::Text(s.clone())],
        Some(v @ Value::Array(_)) => decode_content(v, &opath)?,
        _ => return Err(missing(&opath)),
    };
    let result = Part::ToolResult {
        call_id: fields::req_str(o, "call_id", path)?.to_string(),
        content,
        is_error: false,
    };
    push_merged(req, Role::Tool, vec![result]);
    Ok(())
}

/// Earlier reasoning: its summary text.
fn decode_reasoning_item(o: &Obj, path: &str, req: &mut Request) -> Result<(), ApiError> {
    let text: String = opt_array(o, "summary", path)?
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    if !text.is_empty() {
        push_merged(
            req,
            Role::Assistant,
            vec![Part::Reasoning {
                text,
                signature: None,
            }],
        );
    }
    Ok(())
}

/// Appends parts to the last message if it has the same role (function calls after assistant text form one
/// assistant turn), else starts a new message.
fn push_merged(req: &mut Request, role: Role, parts: Vec<Part>) {
    match req.messages.last_mut() {
        Some(last) if last.role == role && role != Role::User => last.content.extend(parts),
        _ => req.messages.push(Message {
            role,
            content: parts,
        }),
    }
}

fn decode_content(content: &Value, path: &str) -> Result<Vec<Part>, ApiError> {
    match content {
        Value::String(s) => Ok(vec![Part::Text(s.clone())]),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                let ppath = format!("{path}[{i}]");
                let po = fields::object(p, &ppath)?;
                match fields::req_str(po, "type", &ppath)? {
                    "input_text" | "output_text" | "text" => {
                        out.push(Part::Text(fields::req_str(po, "text", &ppath)?.to_string()))
                    }
                    "refusal" => out.push(Part::Text(fields::req_str(po, "refusal", &ppath)?.to_string())),
                    "input_image" => match opt_str(po, "image_url", &ppath)? {
                        Some(url) => out.push(Part::Image(openai::parse_image_url(url))),
                        None => {
                            return Err(ApiError::invalid_param(
                                &join(&ppath, "file_id"),
                                "Images by `file_id` are not supported by this gateway; send `image_url`.",
                            ))
                        }
                    },
                    other => {
                        return Err(ApiError::invalid_param(
                            &join(&ppath, "type"),
                            format!("Content parts of type {other:?} are not supported by this gateway."),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_instead_of_input_names_the_field() {
        let e = Responses.decode_request(&json!({"model": "m", "messages": []})).unwrap_err();
        assert_eq!(e.param(), Some("input"));
        let e = Responses.decode_request(&json!({"model": "m"})).unwrap_err();
        assert_eq!(e.param(), Some("input"));
    }

    #[test]
    fn decodes_items_into_turns() {
        let r = Responses.decode_request(&json!({
            "model": "m", "instructions": "be brief",
            "input": [
                {"role": "developer", "content": "dev"},
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "42"}
            ]
        }))
        .unwrap();
        assert_eq!(r.system, vec!["be brief", "dev"]);
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.messages[1].role, Role::Assistant);
        assert_eq!(r.messages[2].role, Role::Tool);
    }
}
