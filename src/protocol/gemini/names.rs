//! The field names of a Gemini request, made one spelling as it is read. Google reads a field by its JSON
//! name (`maxOutputTokens`) and by its proto name (`max_output_tokens`) alike, and its own REST examples use
//! both (`"tools": [{"google_search": {}}]`). Every rule of the gateway (the output limit, the candidate
//! count, hosted tools, account state, the input estimate) and the translation read the JSON names, so the
//! request is rewritten to them once, before anything looks at it; what goes upstream is what was checked.
//!
//! Only names are rewritten, and only where they are field names of Google's messages: the keys of data the
//! client owns (a function call's `args`, a function response's `response`, a `Schema`'s `properties`,
//! JSON Schemas, examples and defaults) are left as they are, and so is what a field Google may add later
//! holds. A field given under both names is refused: which one Google would take is not ours to guess.

use serde_json::{Map, Value};

use crate::protocol::ApiError;

/// What a field holds, for the walk: a message whose fields are named (recursed into), the same in every
/// element of an array, a map from the client's keys to messages, or data whose keys are the client's.
#[derive(Clone, Copy)]
enum Holds {
    Message(Msg),
    /// Keys kept; each value a message.
    Map(Msg),
    /// Left as it is.
    Data,
}

/// The messages of a request whose fields hold something other than plain values and plain messages.
#[derive(Clone, Copy)]
enum Msg {
    /// `GenerateContentRequest`.
    Generate,
    /// `CountTokensRequest`.
    Count,
    Content,
    Part,
    FunctionCall,
    FunctionResponse,
    Tool,
    FunctionDeclaration,
    Schema,
    GenerationConfig,
    /// A message of named fields all the way down (`Blob`, `FileData`, `ToolConfig`, `SafetySetting`,
    /// `ThinkingConfig`, the hosted tools' settings, …): every key in it is a field name.
    Plain,
}

impl Msg {
    /// What the field `name` (its JSON name) of this message holds. Fields not known here hold data: a
    /// field Google adds later is passed on as it came.
    fn field(self, name: &str) -> Holds {
        use Holds::{Data, Map, Message};
        match (self, name) {
            (Msg::Plain, _) => Message(Msg::Plain),
            (Msg::Generate, "contents" | "systemInstruction") => Message(Msg::Content),
            (Msg::Generate, "tools") => Message(Msg::Tool),
            (Msg::Generate, "toolConfig" | "safetySettings") => Message(Msg::Plain),
            (Msg::Generate, "generationConfig") => Message(Msg::GenerationConfig),
            (Msg::Count, "contents") => Message(Msg::Content),
            (Msg::Count, "generateContentRequest") => Message(Msg::Generate),
            (Msg::Content, "parts") => Message(Msg::Part),
            (
                Msg::Part,
                "inlineData" | "fileData" | "executableCode" | "codeExecutionResult" | "videoMetadata"
                | "mediaResolution",
            ) => Message(Msg::Plain),
            (Msg::Part, "functionCall") => Message(Msg::FunctionCall),
            (Msg::Part, "functionResponse") => Message(Msg::FunctionResponse),
            (Msg::FunctionResponse, "parts") => Message(Msg::Plain),
            (Msg::Tool, "functionDeclarations") => Message(Msg::FunctionDeclaration),
            (
                Msg::Tool,
                "googleSearch" | "googleSearchRetrieval" | "codeExecution" | "urlContext" | "googleMaps"
                | "computerUse" | "fileSearch" | "enterpriseWebSearch",
            ) => Message(Msg::Plain),
            (Msg::FunctionDeclaration | Msg::GenerationConfig, "parameters" | "response" | "responseSchema") => {
                Message(Msg::Schema)
            }
            (Msg::Schema, "items" | "anyOf") => Message(Msg::Schema),
            (Msg::Schema, "properties") => Map(Msg::Schema),
            (
                Msg::GenerationConfig,
                "thinkingConfig" | "speechConfig" | "imageConfig" | "routingConfig",
            ) => Message(Msg::Plain),
            _ => Data,
        }
    }
}

/// Proto field names become JSON names, and a `model` in the body goes: the path names the model, and the
/// upstream is sent its own in the path (a count's whole `generateContentRequest` names it too,
/// `count_model_edit`).
pub(super) fn read_as_one(body: &mut Value, counts: bool) -> Result<(), ApiError> {
    if counts {
        count(body)?;
    } else {
        generate(body)?;
    }
    if let Value::Object(o) = body {
        o.remove("model");
    }
    Ok(())
}

/// Rewrites a generation request's field names to their JSON names (see the module's comment).
/// A `maxOutputTokens` of 0 is Google's JSON for a field not set (proto3's default): it goes, so the limit
/// is read, reserved and sent as for a request that gave none.
pub(super) fn generate(body: &mut Value) -> Result<(), ApiError> {
    walk(body, Msg::Generate, "")?;
    if let Some(Value::Object(config)) = body.get_mut("generationConfig") {
        if config.get("maxOutputTokens").and_then(Value::as_u64) == Some(0) {
            config.remove("maxOutputTokens");
        }
    }
    Ok(())
}

/// The same for a `countTokens` request.
pub(super) fn count(body: &mut Value) -> Result<(), ApiError> {
    walk(body, Msg::Count, "")
}

/// A proto field name as its JSON name: `max_output_tokens` → `maxOutputTokens` (None: already one).
fn json_name(name: &str) -> Option<String> {
    if !name.contains('_') || name.starts_with('_') {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    Some(out)
}

fn walk(v: &mut Value, msg: Msg, path: &str) -> Result<(), ApiError> {
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, msg, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Value::Object(o) => {
            rename(o, path)?;
            for (name, child) in o.iter_mut() {
                let at = crate::protocol::fields::join(path, name);
                match msg.field(name) {
                    Holds::Message(m) => walk(child, m, &at)?,
                    Holds::Map(m) => {
                        if let Value::Object(entries) = child {
                            for (key, entry) in entries.iter_mut() {
                                walk(entry, m, &crate::protocol::fields::join(&at, key))?;
                            }
                        }
                    }
                    Holds::Data => {}
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Renames the proto-named fields of one message to their JSON names (no allocation when there are none).
fn rename(o: &mut Map<String, Value>, path: &str) -> Result<(), ApiError> {
    if !o.keys().any(|k| json_name(k).is_some()) {
        return Ok(());
    }
    let fields = std::mem::take(o);
    let mut proto_of: Vec<(String, String)> = Vec::new();
    for (name, value) in fields {
        let (key, proto) = match json_name(&name) {
            Some(json) => (json, Some(name)),
            None => (name, None),
        };
        if o.contains_key(&key) {
            // Whichever came first, one of the two was a proto name renamed to `key`.
            let other = proto_of.iter().find(|(j, _)| *j == key).map(|(_, p)| p.as_str());
            return Err(twice(path, proto.as_deref().or(other).unwrap_or(&key), &key));
        }
        if let Some(p) = proto {
            proto_of.push((key.clone(), p));
        }
        o.insert(key, value);
    }
    Ok(())
}

fn twice(path: &str, proto: &str, json: &str) -> ApiError {
    let at = |n: &str| crate::protocol::fields::join(path, n);
    ApiError::invalid_param(
        &at(json),
        format!(
            "`{}` is given twice, as `{}` and as `{}`: send it once.",
            at(json),
            at(proto),
            at(json)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn proto_names_become_json_names_where_they_are_field_names() {
        let mut body = json!({
            "contents": [{"role": "user", "parts": [
                {"text": "hi"},
                {"inline_data": {"mime_type": "image/png", "data": "AAAA"}},
                {"file_data": {"mime_type": "video/mp4", "file_uri": "https://example.com/v"}},
                {"function_call": {"name": "f", "args": {"snake_arg": 1}}},
                {"function_response": {"name": "f", "response": {"snake_out": {"deep_key": 2}}}}
            ]}],
            "system_instruction": {"parts": [{"text": "be brief"}]},
            "tools": [
                {"google_search": {"time_range_filter": {"start_time": "x"}}},
                {"function_declarations": [{"name": "f", "parameters": {
                    "type": "OBJECT",
                    "properties": {"snake_prop": {"type": "STRING", "max_length": 3}},
                    "property_ordering": ["snake_prop"]
                }, "parameters_json_schema": {"additional_properties": false}}]}
            ],
            "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["f"]}},
            "generation_config": {"max_output_tokens": 64, "candidate_count": 1,
                                  "thinking_config": {"thinking_budget": 0},
                                  "response_json_schema": {"snake_field": {}}},
            "cached_content": "cachedContents/x",
            "some_new_field": {"inner_key": 1}
        });
        generate(&mut body).unwrap();
        assert_eq!(
            body,
            json!({
                "contents": [{"role": "user", "parts": [
                    {"text": "hi"},
                    {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                    {"fileData": {"mimeType": "video/mp4", "fileUri": "https://example.com/v"}},
                    {"functionCall": {"name": "f", "args": {"snake_arg": 1}}},
                    {"functionResponse": {"name": "f", "response": {"snake_out": {"deep_key": 2}}}}
                ]}],
                "systemInstruction": {"parts": [{"text": "be brief"}]},
                "tools": [
                    {"googleSearch": {"timeRangeFilter": {"startTime": "x"}}},
                    {"functionDeclarations": [{"name": "f", "parameters": {
                        "type": "OBJECT",
                        "properties": {"snake_prop": {"type": "STRING", "maxLength": 3}},
                        "propertyOrdering": ["snake_prop"]
                    }, "parametersJsonSchema": {"additional_properties": false}}]}
                ],
                "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}},
                "generationConfig": {"maxOutputTokens": 64, "candidateCount": 1,
                                     "thinkingConfig": {"thinkingBudget": 0},
                                     "responseJsonSchema": {"snake_field": {}}},
                "cachedContent": "cachedContents/x",
                "someNewField": {"inner_key": 1}
            })
        );
    }

    #[test]
    fn a_field_under_both_names_is_refused() {
        for body in [
            json!({"contents": [], "generationConfig": {"max_output_tokens": 9, "maxOutputTokens": 1}}),
            json!({"contents": [], "generationConfig": {"maxOutputTokens": 1, "max_output_tokens": 9}}),
            json!({"contents": [], "generation_config": {}, "generationConfig": {}}),
        ] {
            let e = generate(&mut body.clone()).unwrap_err();
            assert_eq!(e.status(), 400, "{body}");
            assert!(e.message().contains("given twice"), "{}", e.message());
        }
    }

    #[test]
    fn a_count_request_names_its_inner_request_the_same_way() {
        let mut body = json!({"generate_content_request": {"model": "models/m",
            "contents": [{"parts": [{"text": "x"}]}], "generation_config": {"max_output_tokens": 3}}});
        count(&mut body).unwrap();
        assert_eq!(body["generateContentRequest"]["generationConfig"]["maxOutputTokens"], 3);
        assert_eq!(json_name("a_b_c").as_deref(), Some("aBC"));
        assert_eq!(json_name("already"), None);
        assert_eq!(json_name("_private"), None);
    }
}
