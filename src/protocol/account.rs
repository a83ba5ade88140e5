//! The operator's upstream account stays the operator's: key holders share it, so nothing they send may
//! reach state stored in it (responses, conversations, prompts, files, vector stores, containers, MCP
//! connections) or run hosted tools there on their own. Such fields, tools, content and betas are refused
//! with 400 naming them by their path in the body (`input[2].output[0].file_id`), on passthrough and
//! translation alike; a model opts in with `account_features = true` (for a single-tenant operator).
//!
//! References are found at any depth: the whole body is walked once, and any `file_id`, `file_ids`,
//! `vector_store_ids`, container (`container`, `container_id`, a `container_*` type), stored response,
//! conversation or prompt, `item_reference`, or `source` of type `file` is refused wherever it sits; so are
//! the Gemini API's `cachedContent`, a `fileUri` of its Files API, the `fileSearch` tool and a tuned model
//! (`tunedModels/…`). What belongs to the client alone is not looked into: JSON Schemas (`parameters`,
//! `input_schema`, `schema`, Gemini's `parametersJsonSchema`, `responseSchema`, `responseJsonSchema`), tool
//! call inputs (Gemini's `args`) and results (its `response`), `metadata`. The walk allocates nothing unless
//! it finds something.
//!
//! `store`: a stored response or completion could only be read back by id, which tollgate never serves, so
//! storing would only leave tenants' prompts in the operator's account: requests go upstream with
//! `store: false` (each codec's `store_nothing` edit), and to a model set to reason with its reasoning asked
//! for whole (`reasoning_inline`: Responses' `include: ["reasoning.encrypted_content"]`), so a client's next
//! turn can send it back.

use serde_json::{Map, Value};

use super::{ApiError, Cause};

/// `anthropic-beta` values that open account-scoped features (files, MCP connections, code execution,
/// skills), compared without regard to letter case. Agent betas (interleaved thinking, fine-grained tool
/// streaming, context windows, prompt caching, token-efficient tools, …) are not among them.
const ACCOUNT_BETAS: [&str; 4] = ["files-api-", "mcp-client-", "code-execution-", "skills-"];

/// Keys whose values belong to the client alone (schemas, free-form data, tool call arguments and results):
/// never looked into.
const CLIENT_DATA: [&str; 12] = [
    "parameters",
    "input_schema",
    "schema",
    "metadata",
    "input_examples",
    "logit_bias",
    "env",
    "parametersJsonSchema",
    "responseSchema",
    "responseJsonSchema",
    "args",
    "response",
];

fn refused(param: &str, what: &str) -> ApiError {
    ApiError::invalid_param(
        param,
        format!(
            "`{param}` is not accepted here: {what} would reach state kept in the operator's upstream account, which \
             is shared by every key of this gateway. Send the content itself instead (the whole conversation, \
             inline data)."
        ),
    )
    .with_cause(Cause::AccountFeatureRefused)
}

/// One step from the body's root to a value; the chain lives on the stack.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

#[derive(Clone, Copy)]
struct At<'a> {
    step: Step<'a>,
    up: Option<&'a At<'a>>,
}

impl At<'_> {
    fn key(&self) -> Option<&str> {
        match self.step {
            Step::Key(k) => Some(k),
            Step::Index(_) => None,
        }
    }

    /// The key of the array this value is an element of.
    fn array_key(&self) -> Option<&str> {
        match self.step {
            Step::Index(_) => self.up.and_then(At::key),
            Step::Key(_) => None,
        }
    }
}

/// The field path of `at` (`input[0].content[1].file_id`), built only for an error.
fn path(at: Option<&At>) -> String {
    let mut steps = Vec::new();
    let mut cur = at;
    while let Some(a) = cur {
        steps.push(a.step);
        cur = a.up;
    }
    let mut out = String::new();
    for s in steps.iter().rev() {
        match s {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn child<'a>(at: Option<&'a At<'a>>, step: Step<'a>) -> At<'a> {
    At { step, up: at }
}

/// Refuses what a request's body would make reach the operator's upstream account (its headers are its
/// codec's to check: `Codec::refuse_account_headers`). `passthrough`: the request may go upstream as it came
/// (what only an upstream of its own protocol would look up is refused then too).
pub(crate) fn refuse_account_features(body: &Value, passthrough: bool) -> Result<(), ApiError> {
    let Some(o) = body.as_object() else {
        return Ok(());
    };
    if o.get("background") == Some(&Value::Bool(true)) {
        return Err(refused(
            "background",
            "a background response (stored, to be fetched later)",
        ));
    }
    walk_object(o, None, passthrough)
}

fn walk(v: &Value, at: &At, pass: bool) -> Result<(), ApiError> {
    match v {
        Value::Object(o) => walk_object(o, Some(at), pass),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &child(Some(at), Step::Index(i)), pass)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn walk_object(o: &Map<String, Value>, at: Option<&At>, pass: bool) -> Result<(), ApiError> {
    let ty = o.get("type").and_then(Value::as_str).unwrap_or("");
    if let Some(what) = typed_reference(ty, at).or_else(|| by_id(o, ty, at, pass)) {
        return Err(refused(&path(at), what));
    }
    // A tool call's input is the client's own data (Messages `tool_use`).
    let call = matches!(ty, "tool_use" | "server_tool_use" | "mcp_tool_use");
    for (k, v) in o {
        if v.is_null() || CLIENT_DATA.contains(&k.as_str()) || (call && k == "input") {
            continue;
        }
        let here = child(at, Step::Key(k));
        if let Some(what) = keyed_reference(k, v) {
            return Err(refused(&path(Some(&here)), what));
        }
        walk(v, &here, pass)?;
    }
    Ok(())
}

/// What an object of type `ty` at `at` refers to in the account, if anything.
fn typed_reference(ty: &str, at: Option<&At>) -> Option<&'static str> {
    if ty == "item_reference" {
        return Some("an item_reference (a stored item)");
    }
    // `container_upload` blocks, `container_auto` / `container_reference` shell environments.
    if ty.starts_with("container_") {
        return Some("a container");
    }
    if ty == "file" && at.and_then(At::key) == Some("source") {
        return Some("a file source (an uploaded file)");
    }
    if at.and_then(At::array_key) != Some("tools") {
        return None;
    }
    match ty {
        "file_search" => Some("the file_search tool (vector stores)"),
        "mcp" => Some("the mcp tool (remote MCP servers)"),
        "code_interpreter" => Some("the code_interpreter tool (containers)"),
        t if t.starts_with("code_execution") || t.starts_with("mcp_toolset") => {
            Some("a code-execution or MCP tool")
        }
        _ => None,
    }
}

/// A Responses input item given by its `id` alone, which the upstream looks up among the items stored in the
/// account: one with no type (an item reference may leave out its `type`), or, where the request may go
/// upstream as it came, a reasoning item without its `encrypted_content` (with it, the item is sent whole and
/// nothing is looked up; translated, a reasoning item is its summary text).
fn by_id(o: &Map<String, Value>, ty: &str, at: Option<&At>, pass: bool) -> Option<&'static str> {
    let input_item =
        at.is_some_and(|a| a.array_key() == Some("input") && a.up.and_then(|u| u.up).is_none());
    if !input_item || o.get("id").is_none_or(Value::is_null) {
        return None;
    }
    let typed = o.get("type").is_some_and(|t| !t.is_null());
    if !typed {
        return Some("an item given by its id alone (an item reference: a stored item)");
    }
    let inline = o.get("encrypted_content").is_some_and(|c| !c.is_null());
    (pass && ty == "reasoning" && !inline).then_some(
        "a reasoning item without its encrypted_content (looked up by its id among stored items; ask for \
         `include: [\"reasoning.encrypted_content\"]` and send it back whole)",
    )
}

/// What the (non-null) field `k` refers to in the account, if anything.
fn keyed_reference(k: &str, v: &Value) -> Option<&'static str> {
    let listed = || v.as_array().is_none_or(|a| !a.is_empty());
    match k {
        "file_id" => Some("a file_id (an uploaded file)"),
        "file_ids" if listed() => Some("file_ids (uploaded files)"),
        "vector_store_ids" if listed() => Some("vector stores"),
        "container" | "container_id" => Some("a container"),
        "previous_response_id" => Some("a stored response"),
        "conversation" => Some("a stored conversation"),
        "prompt" => Some("a stored prompt template"),
        "mcp_servers" if listed() => Some("MCP server connections"),
        "cachedContent" => Some("a cached content (stored in the account)"),
        "fileSearch" => Some("the fileSearch tool (file search stores)"),
        "fileUri" if v.as_str().is_some_and(files_api) => {
            Some("a file of the Files API (an uploaded file)")
        }
        "model" if v.as_str().is_some_and(|m| m.starts_with("tunedModels/")) => {
            Some("a tuned model (kept in the account)")
        }
        _ => None,
    }
}

/// Whether a Gemini `fileUri` names a file uploaded to the Files API (`files/…`, or its URL), rather than a
/// public URL the API fetches.
fn files_api(uri: &str) -> bool {
    uri.starts_with("files/")
        || uri.split_once("://").is_some_and(|(_, rest)| {
            rest.starts_with("generativelanguage.googleapis.com/") && rest.contains("/files/")
        })
}

/// Refuses `anthropic-beta` values (each header value as it came, flags joined by commas) that open
/// account-scoped features.
pub(crate) fn refuse_betas<'a>(betas: impl Iterator<Item = &'a str>) -> Result<(), ApiError> {
    for b in betas.flat_map(|b| b.split(',')).map(str::trim) {
        let opens = ACCOUNT_BETAS.iter().any(|p| {
            b.as_bytes()
                .get(..p.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(p.as_bytes()))
        });
        if opens {
            return Err(refused(
                "anthropic-beta",
                &format!("the beta `{b}` (files, MCP, code execution or skills)"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::protocol::edit::Edits;
    use crate::protocol::Protocol;

    /// The body's check, then (as the codec's) the betas' check.
    fn param(p: Protocol, body: Value, betas: &[&str]) -> Option<String> {
        let headers = || refuse_betas(betas.iter().copied());
        refuse_account_features(&body, true)
            .and_then(|()| {
                if p == Protocol::Messages {
                    headers()
                } else {
                    Ok(())
                }
            })
            .err()
            .map(|e| e.param().unwrap_or_default().to_string())
    }

    /// The body as it goes upstream with the codec's `store` edit.
    fn store_nothing(p: Protocol, body: &mut Value) {
        let mut e = Edits::default();
        if let Some((k, edit)) = p.store_nothing {
            e.put(k, edit);
        }
        *body = serde_json::from_slice(&e.apply(body).unwrap()).unwrap();
    }

    fn user(content: Value) -> Value {
        json!({"messages": [{"role": "user", "content": content}]})
    }

    #[test]
    fn responses_account_state_is_refused_by_path() {
        let r = Protocol::Responses;
        for (body, path) in [
            (
                json!({"previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
            (json!({"conversation": "conv_1"}), "conversation"),
            (json!({"background": true}), "background"),
            (json!({"prompt": {"id": "pmpt_1"}}), "prompt"),
            (
                json!({"tools": [{"type": "function", "name": "f"}, {"type": "file_search"}]}),
                "tools[1]",
            ),
            (json!({"tools": [{"type": "mcp"}]}), "tools[0]"),
            (json!({"tools": [{"type": "code_interpreter"}]}), "tools[0]"),
            (
                json!({"tools": [{"type": "shell", "environment": {"type": "container_auto"}}]}),
                "tools[0].environment",
            ),
            (
                json!({"tools": [{"type": "image_generation", "input_image_mask": {"file_id": "file_1"}}]}),
                "tools[0].input_image_mask.file_id",
            ),
            (
                json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
                "input[0]",
            ),
            (json!({"input": [{"id": "msg_1"}]}), "input[0]"),
            (
                json!({"input": [{"role": "user", "content": "hi"}, {"id": "msg_1", "type": null}]}),
                "input[1]",
            ),
            (
                json!({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}),
                "input[0]",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}),
                "input[0].content[0].file_id",
            ),
            (
                json!({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": [
                    {"type": "input_text", "text": "see"}, {"type": "input_image", "file_id": "file_2"}]}]}),
                "input[1].output[1].file_id",
            ),
            (
                json!({"input": [{"type": "function_call_output", "call_id": "c",
                "output": [{"type": "input_file", "file_id": "file_3"}]}]}),
                "input[0].output[0].file_id",
            ),
            (
                json!({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}),
                "tools[0]",
            ),
        ] {
            assert_eq!(param(r, body.clone(), &[]).as_deref(), Some(path), "{body}");
        }
    }

    #[test]
    fn items_sent_whole_pass() {
        let whole = json!({"input": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
            {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}"},
            {"role": "user", "content": "hi"}]});
        assert!(refuse_account_features(&whole, true).is_ok());
        // Translated, a reasoning item is its summary: nothing is looked up.
        let summary = json!({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]});
        assert!(refuse_account_features(&summary, false).is_ok());
        assert!(refuse_account_features(&json!({"input": [{"id": "msg_1"}]}), false).is_err());
    }

    #[test]
    fn gemini_account_state_is_refused_by_path() {
        for (body, path) in [
            (
                json!({"cachedContent": "cachedContents/abc"}),
                "cachedContent",
            ),
            (
                json!({"contents": [{"role": "user", "parts": [{"fileData": {"mimeType": "application/pdf",
                    "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc"}}]}]}),
                "contents[0].parts[0].fileData.fileUri",
            ),
            (
                json!({"contents": [{"parts": [{"fileData": {"fileUri": "files/abc"}}]}]}),
                "contents[0].parts[0].fileData.fileUri",
            ),
            (
                json!({"tools": [{"fileSearch": {"fileSearchStoreNames": ["fileSearchStores/x"]}}]}),
                "tools[0].fileSearch",
            ),
            (
                json!({"generateContentRequest": {"model": "tunedModels/mine", "contents": []}}),
                "generateContentRequest.model",
            ),
        ] {
            let e = refuse_account_features(&body, true).unwrap_err();
            assert_eq!(e.param(), Some(path), "{body}");
        }
        // Public URLs, function arguments and results, schemas: the client's own.
        let fine = json!({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"file_id": "x"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"cachedContent": "y"}}},
            {"fileData": {"mimeType": "video/mp4", "fileUri": "https://www.youtube.com/watch?v=x"}}]}],
            "generationConfig": {"responseJsonSchema": {"properties": {"file_id": {}}}},
            "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"properties": {"container": {}}}}]}]});
        assert!(refuse_account_features(&fine, true).is_ok());
    }

    #[test]
    fn what_agents_send_passes() {
        // A function's schema may name any property, a call's input is the client's: not looked into.
        let body = json!({"input": "hi", "background": false, "previous_response_id": null,
            "tools": [{"type": "function", "name": "open", "parameters": {"type": "object",
                "properties": {"file_id": {"type": "string"}, "container": {"type": "string"}}}},
                {"type": "web_search"}, {"type": "shell", "environment": {"type": "local"}}],
            "text": {"format": {"type": "json_schema", "schema": {"properties": {"prompt": {}}}}},
            "metadata": {"file_id": "x"}});
        assert_eq!(param(Protocol::Responses, body, &[]), None);
        let body = user(
            json!([{"type": "tool_use", "id": "t", "name": "read", "input": {"file_id": "f", "container": "c"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
            {"type": "search_result", "source": "https://example.com", "title": "t", "content": []}]),
        );
        assert_eq!(param(Protocol::Messages, body, &[]), None);
    }

    #[test]
    fn messages_account_state_and_betas_are_refused() {
        let m = Protocol::Messages;
        assert_eq!(
            param(m, json!({"container": "c_1"}), &[]).as_deref(),
            Some("container")
        );
        assert_eq!(
            param(m, json!({"mcp_servers": [{"url": "x"}]}), &[]).as_deref(),
            Some("mcp_servers")
        );
        assert_eq!(param(m, json!({"mcp_servers": []}), &[]), None);
        for (content, path) in [
            (
                json!([{"type": "document", "source": {"type": "file", "file_id": "f"}}]),
                "messages[0].content[0].source",
            ),
            (
                json!([{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "t",
                "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]),
                "messages[0].content[1].content[0].source",
            ),
            (
                json!([{"type": "document", "source": {"type": "content", "content": [
                {"type": "image", "source": {"type": "file", "file_id": "f"}}]}}]),
                "messages[0].content[0].source.content[0].source",
            ),
            (
                json!([{"type": "container_upload", "file_id": "f"}]),
                "messages[0].content[0]",
            ),
        ] {
            assert_eq!(
                param(m, user(content.clone()), &[]).as_deref(),
                Some(path),
                "{content}"
            );
        }
        assert_eq!(
            param(
                m,
                json!({"tools": [{"type": "code_execution_20250825", "name": "c"}]}),
                &[]
            )
            .as_deref(),
            Some("tools[0]")
        );
        for beta in [
            "files-api-2025-04-14",
            "FILES-API-2025-04-14",
            " Files-Api-2025-04-14 ",
            "interleaved-thinking-2025-05-14, MCP-Client-2025-04-04",
            "code-execution-2025-05-22",
            "Skills-2025-10-02",
        ] {
            assert_eq!(
                param(m, json!({}), &[beta]).as_deref(),
                Some("anthropic-beta"),
                "{beta}"
            );
        }
        assert_eq!(
            param(
                m,
                json!({}),
                &[
                    "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
                    "context-1m-2025-08-07",
                    "claude-code-20250219"
                ]
            ),
            None,
            "agent betas flow"
        );
    }

    #[test]
    fn chat_file_ids_are_refused_and_nothing_is_stored() {
        assert_eq!(
            param(
                Protocol::Chat,
                user(json!([{"type": "file", "file": {"file_id": "f"}}])),
                &[]
            )
            .as_deref(),
            Some("messages[0].content[0].file.file_id")
        );
        let inline = user(
            json!([{"type": "file", "file": {"file_data": "data:application/pdf;base64,AA==", "filename": "a.pdf"}}]),
        );
        assert_eq!(param(Protocol::Chat, inline, &[]), None);
        let mut b = json!({"input": "x"});
        store_nothing(Protocol::Responses, &mut b);
        assert_eq!(b["store"], false);
        let mut b = json!({"messages": [], "store": true});
        store_nothing(Protocol::Chat, &mut b);
        assert_eq!(b["store"], false);
        let mut b = json!({"messages": []});
        store_nothing(Protocol::Chat, &mut b);
        assert!(
            b.get("store").is_none(),
            "Chat stores nothing by default: left as it came"
        );
    }
}
