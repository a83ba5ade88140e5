//! The operator's upstream account stays the operator's: key holders share it, so nothing they send may
//! reach state stored in it (responses, conversations, files, vector stores, containers, MCP connections)
//! or run hosted tools there on their own. Such fields, tools, content and betas are refused with 400 naming
//! them, on passthrough and translation alike; a model opts in with `account_features = true` (for a
//! single-tenant operator).
//!
//! `store`: a stored response or completion could only be read back by id, which tollgate never serves, so
//! storing would only leave tenants' prompts in the operator's account: requests go upstream with
//! `store: false`.

use serde_json::Value;

use super::{ApiError, Protocol};

/// `anthropic-beta` values that open account-scoped features (files, MCP connections, code execution,
/// skills). Agent betas (interleaved thinking, fine-grained tool streaming, context windows, prompt caching,
/// token-efficient tools, …) are not among them.
const ACCOUNT_BETAS: [&str; 4] = ["files-api-", "mcp-client-", "code-execution-", "skills-"];

fn refused(param: &str, what: &str) -> ApiError {
    ApiError::invalid_param(
        param,
        format!(
            "`{param}` is not accepted here: {what} would reach state kept in the operator's upstream account, which \
             is shared by every key of this gateway. Send the content itself instead (the whole conversation, \
             inline data)."
        ),
    )
    .with_code("account_feature_refused")
}

fn present(o: &serde_json::Map<String, Value>, field: &str) -> bool {
    o.get(field).is_some_and(|v| !v.is_null())
}

/// Refuses what a request of `protocol` (its body, and for Messages its `anthropic-beta` values) would make
/// reach the operator's upstream account.
pub fn refuse_account_features(
    protocol: Protocol,
    body: &Value,
    betas: &[&str],
) -> Result<(), ApiError> {
    let Some(o) = body.as_object() else {
        return Ok(());
    };
    match protocol {
        Protocol::Responses => responses(o),
        Protocol::Chat => chat(o),
        Protocol::Messages => messages(o, betas),
    }
}

fn responses(o: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    for (field, what) in [
        ("previous_response_id", "a stored response"),
        ("conversation", "a stored conversation"),
        ("prompt", "a stored prompt template"),
    ] {
        if present(o, field) {
            return Err(refused(field, what));
        }
    }
    if o.get("background") == Some(&Value::Bool(true)) {
        return Err(refused(
            "background",
            "a background response (stored, to be fetched later)",
        ));
    }
    for t in o
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match t.get("type").and_then(Value::as_str) {
            Some("file_search") => {
                return Err(refused("tools", "the file_search tool (vector stores)"))
            }
            Some("mcp") => return Err(refused("tools", "the mcp tool (remote MCP servers)")),
            Some("code_interpreter") => {
                return Err(refused("tools", "the code_interpreter tool (containers)"))
            }
            _ => {}
        }
    }
    if let Some(items) = o.get("input").and_then(Value::as_array) {
        for item in items {
            if item.get("type").and_then(Value::as_str) == Some("item_reference") {
                return Err(refused("input", "an item_reference (a stored item)"));
            }
            let parts = item.get("content").and_then(Value::as_array);
            for p in parts.into_iter().flatten() {
                let ty = p.get("type").and_then(Value::as_str);
                if matches!(ty, Some("input_file" | "input_image"))
                    && p.get("file_id").is_some_and(|f| !f.is_null())
                {
                    return Err(refused("input", "a file_id (an uploaded file)"));
                }
            }
        }
    }
    Ok(())
}

fn chat(o: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    for m in o
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for p in m
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let file_id = p.pointer("/file/file_id").is_some_and(|f| !f.is_null());
            if p.get("type").and_then(Value::as_str) == Some("file") && file_id {
                return Err(refused("messages", "a file_id (an uploaded file)"));
            }
        }
    }
    Ok(())
}

fn messages(o: &serde_json::Map<String, Value>, betas: &[&str]) -> Result<(), ApiError> {
    if present(o, "container") {
        return Err(refused("container", "a code-execution container"));
    }
    if o.get("mcp_servers")
        .is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty()) && !v.is_null())
    {
        return Err(refused("mcp_servers", "MCP server connections"));
    }
    for t in o
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ty = t.get("type").and_then(Value::as_str).unwrap_or("");
        if ty.starts_with("code_execution") || ty.starts_with("mcp_toolset") {
            return Err(refused("tools", "a code-execution or MCP tool"));
        }
    }
    for m in o
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for block in m
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(why) = block_reaches_account(block) {
                return Err(refused("messages", why));
            }
            // Tool results nest their own content blocks.
            for inner in block
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(why) = block_reaches_account(inner) {
                    return Err(refused("messages", why));
                }
            }
        }
    }
    for b in betas.iter().flat_map(|b| b.split(',')).map(str::trim) {
        if ACCOUNT_BETAS.iter().any(|p| b.starts_with(p)) {
            return Err(refused(
                "anthropic-beta",
                &format!("the beta `{b}` (files, MCP, code execution or skills)"),
            ));
        }
    }
    Ok(())
}

fn block_reaches_account(block: &Value) -> Option<&'static str> {
    if block.get("type").and_then(Value::as_str) == Some("container_upload") {
        return Some("a container_upload block");
    }
    (block.pointer("/source/type").and_then(Value::as_str) == Some("file"))
        .then_some("a file source (an uploaded file)")
}

/// Requests go upstream with `store: false` (Responses and Chat): nothing a tenant sends is kept in the
/// operator's account, since no one could read it back through the gateway.
pub fn store_nothing(protocol: Protocol, body: &mut Value) {
    if matches!(protocol, Protocol::Responses | Protocol::Chat) {
        if let Some(o) = body.as_object_mut() {
            if protocol == Protocol::Responses
                || o.get("store").is_some_and(|s| s != &Value::Bool(false))
            {
                o.insert("store".into(), Value::Bool(false));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param(p: Protocol, body: Value, betas: &[&str]) -> Option<String> {
        refuse_account_features(p, &body, betas)
            .err()
            .map(|e| e.param().unwrap_or_default().to_string())
    }

    #[test]
    fn responses_account_state_is_refused() {
        let r = Protocol::Responses;
        assert_eq!(
            param(r, json!({"previous_response_id": "resp_1"}), &[]).as_deref(),
            Some("previous_response_id")
        );
        assert_eq!(
            param(r, json!({"conversation": "conv_1"}), &[]).as_deref(),
            Some("conversation")
        );
        assert_eq!(
            param(r, json!({"background": true}), &[]).as_deref(),
            Some("background")
        );
        assert_eq!(
            param(r, json!({"prompt": {"id": "pmpt_1"}}), &[]).as_deref(),
            Some("prompt")
        );
        for tool in ["file_search", "mcp", "code_interpreter"] {
            assert_eq!(
                param(r, json!({"tools": [{"type": tool}]}), &[]).as_deref(),
                Some("tools"),
                "{tool}"
            );
        }
        assert_eq!(
            param(
                r,
                json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
                &[]
            )
            .as_deref(),
            Some("input")
        );
        assert_eq!(
            param(r, json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}), &[]).as_deref(),
            Some("input")
        );
        // What coding agents send passes.
        assert_eq!(
            param(
                r,
                json!({"input": "hi", "background": false, "previous_response_id": null,
                            "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]}),
                &[]
            ),
            None
        );
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
        assert_eq!(
            param(m, json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "file", "file_id": "f"}}]}]}), &[]).as_deref(),
            Some("messages")
        );
        assert_eq!(
            param(m, json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}]}), &[]).as_deref(),
            Some("messages")
        );
        for beta in [
            "files-api-2025-04-14",
            "mcp-client-2025-04-04",
            "code-execution-2025-05-22",
            "skills-2025-10-02",
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
            param(Protocol::Chat, json!({"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}]}), &[]).as_deref(),
            Some("messages")
        );
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
