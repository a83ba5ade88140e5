//! Paid features an upstream runs in the operator's account at a price per use: hosted tools (web search,
//! web fetch, image generation, computer use, ...) and service tiers above the standard one. What a request
//! asks for ([`asks`], by the rules of its protocol), which of its tools get a use limit written in where the
//! client gave none ([`Asks::capped`]; each codec's `hosted_cap` says where), and the uses an answer
//! reports ([`Tally`], fed by a complete answer or by a relayed stream's events). No prices here: the gateway prices what this finds (`server/hosted.rs`).
//!
//! Tools the client runs itself are not hosted and pass: functions and custom tools, Anthropic's `bash`,
//! `text_editor`, `computer` and `memory`, OpenAI's `local_shell`, local `shell` and `apply_patch`, and tool
//! search (token-priced only). Every other tool type is a hosted family: its type without the version date
//! (`web_search_20250305` → `web_search`), with `web_search_preview*` → `web_search` and
//! `computer_use_preview` → `computer_use`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{fields, ApiError};

/// A hosted tool a request offers the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAsk {
    pub family: String,
    /// Where it is (`tools[2]`, `tools[0].googleSearch`, `web_search_options`).
    pub param: String,
    /// Its position in `tools` (None: a field of its own, `web_search_options`).
    pub at: Option<usize>,
    /// The member of the tool definition that asks for it, where one definition holds several tools (a
    /// Gemini `Tool` object); None: the whole definition is the tool.
    pub member: Option<String>,
    /// The client forces the model to use it (`tool_choice` naming it).
    pub forced: bool,
    /// The most uses the client allowed (None: it set no limit).
    pub max_uses: Option<u64>,
    /// Where that limit is written (`tools[2].max_uses`, `max_tool_calls`).
    pub limit_param: String,
}

/// A service tier above the standard one.
#[derive(Debug, Clone, PartialEq)]
pub struct TierAsk {
    pub tier: String,
    pub param: &'static str,
}

/// A field that raises the rate of every token (Anthropic's `inference_geo` other than `global`: 1.1×).
#[derive(Debug, Clone, PartialEq)]
pub struct SurchargeAsk {
    pub param: &'static str,
    pub value: String,
}

/// The paid features one request asks for.
#[derive(Debug, Default, PartialEq)]
pub struct Asks {
    pub tools: Vec<ToolAsk>,
    pub tiers: Vec<TierAsk>,
    pub surcharges: Vec<SurchargeAsk>,
    /// The tools share one limit (Responses `max_tool_calls` counts every hosted call), rather than one each.
    pub shared_limit: bool,
    /// The positions (in `tools`) of the tools whose own use limit is written in where the client gave none.
    pub capped: Vec<usize>,
    /// The fields that go with tools only (left out with `tools` when no tool is left).
    pub with_tools: &'static [&'static str],
}

impl Asks {
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.tiers.is_empty() && self.surcharges.is_empty()
    }
}

/// Tiers at the standard rate or below, as requests name them and answers report them.
const FREE_TIERS: [&str; 5] = ["auto", "default", "flex", "standard", "standard_only"];

/// Whether `tier` costs no more than the standard rate.
pub(crate) fn free_tier(tier: &str) -> bool {
    FREE_TIERS.contains(&tier)
}

/// The hosted tools one tool definition holds: each one's family and, where the definition holds several
/// (a Gemini `Tool` object), the member that asks for it.
pub(crate) type Families<'a> = Vec<(Cow<'a, str>, Option<&'a str>)>;

/// Whether a request's `tool_choice` (the body is the first argument) forces the tool defined by the second,
/// of the family given.
pub(crate) type Forced = fn(&Map<String, Value>, &Map<String, Value>, &str) -> bool;

/// How one protocol's requests ask for paid features (its codec's `hosted_asks` passes these to [`asks`]).
pub struct Rules {
    /// The hosted tools of a tool definition (none for a tool the client runs).
    pub families: fn(&Map<String, Value>) -> Families<'_>,
    /// Whether the request's `tool_choice` forces a tool.
    pub forced: Forced,
    /// The fields that go with tools only (`tool_choice`, ...): left out with `tools` when every tool is.
    pub with_tools: &'static [&'static str],
    /// The one field that limits every hosted call (Responses `max_tool_calls`), if there is one; else each
    /// tool has its own `max_uses`.
    pub shared_limit: Option<&'static str>,
    /// A field that turns on a search model's one search per request (Chat `web_search_options`).
    pub search_option: Option<&'static str>,
    /// The fields that name a service tier (or a rate like it).
    pub tiers: &'static [&'static str],
    /// The fields that raise the rate of every token, each with the values that do not (Messages
    /// `inference_geo`, whose `global` is the standard rate).
    pub surcharges: &'static [(&'static str, &'static [&'static str])],
    /// The families whose tools the use limit is written into where the client gave none (see
    /// [`Asks::capped`]).
    pub capped: &'static [&'static str],
}

/// The paid features a request body asks for, by its protocol's `rules` (nothing allocated when there are
/// none).
pub(crate) fn asks(body: &Value, rules: &Rules) -> Result<Asks, ApiError> {
    let mut out = Asks::default();
    let Some(o) = body.as_object() else {
        return Ok(out);
    };
    let shared = match rules.shared_limit {
        Some(field) => Some(fields::opt_u64(o, field, "")?),
        None => None,
    };
    out.with_tools = rules.with_tools;
    for (i, t) in o
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(to) = t.as_object() else { continue };
        for (family, member) in (rules.families)(to) {
            let param = match member {
                Some(m) => format!("tools[{i}].{m}"),
                None => format!("tools[{i}]"),
            };
            let (max_uses, limit_param) = match (shared, rules.shared_limit) {
                (Some(limit), Some(field)) => (limit, field.to_string()),
                _ => (
                    fields::opt_u64(to, "max_uses", &param)?,
                    format!("{param}.max_uses"),
                ),
            };
            if rules.capped.contains(&family.as_ref()) && !out.capped.contains(&i) {
                out.capped.push(i);
            }
            out.tools.push(ToolAsk {
                forced: (rules.forced)(o, to, &family),
                family: family.into_owned(),
                param,
                at: Some(i),
                member: member.map(str::to_string),
                max_uses,
                limit_param,
            });
        }
    }
    out.shared_limit = shared.is_some();
    if let Some(field) = rules.search_option {
        if o.get(field).is_some_and(|v| !v.is_null()) {
            // Search models search once per request.
            out.tools.push(ToolAsk {
                family: "web_search".into(),
                param: field.into(),
                at: None,
                member: None,
                forced: false,
                max_uses: Some(1),
                limit_param: field.into(),
            });
        }
    }
    for field in rules.tiers {
        tier(o, field, &mut out)?;
    }
    for (field, standard) in rules.surcharges {
        match fields::opt_str(o, field, "")? {
            Some(v) if !standard.contains(&v) => out.surcharges.push(SurchargeAsk {
                param: field,
                value: v.to_string(),
            }),
            _ => {}
        }
    }
    Ok(out)
}

fn tier(o: &Map<String, Value>, param: &'static str, out: &mut Asks) -> Result<(), ApiError> {
    match fields::opt_str(o, param, "")? {
        Some(t) if !free_tier(t) => out.tiers.push(TierAsk {
            tier: t.to_string(),
            param,
        }),
        _ => {}
    }
    Ok(())
}

/// Leaves the hosted tools `dropped` out of `body` (asked for by it, as [`asks`] found them): a tool
/// definition, or the member of one that holds several (the definition too once nothing is left in it), or
/// a field of its own; `tools` and the fields that go with it (`with_tools`) when no tool is left.
pub(crate) fn leave_out(body: &mut Value, dropped: &[&ToolAsk], with_tools: &[&str]) {
    let Some(o) = body.as_object_mut() else {
        return;
    };
    let mut gone: Vec<usize> = Vec::new();
    if let Some(Value::Array(tools)) = o.get_mut("tools") {
        for t in dropped {
            let Some(i) = t.at else { continue };
            match (&t.member, tools.get_mut(i)) {
                (Some(m), Some(Value::Object(def))) => {
                    def.remove(m);
                    if def.values().all(Value::is_null) {
                        gone.push(i);
                    }
                }
                _ => gone.push(i),
            }
        }
        gone.sort_unstable();
        gone.dedup();
        for i in gone.iter().rev() {
            if *i < tools.len() {
                tools.remove(*i);
            }
        }
        if tools.is_empty() && !gone.is_empty() {
            o.remove("tools");
            for f in with_tools {
                o.remove(*f);
            }
        }
    }
    for t in dropped.iter().filter(|t| t.at.is_none()) {
        o.remove(&t.param);
    }
}

/// Never: the protocol's `tool_choice` cannot force a hosted tool.
pub(crate) fn never_forced(
    _body: &Map<String, Value>,
    _tool: &Map<String, Value>,
    _family: &str,
) -> bool {
    false
}

/// A tool type without its version date (`web_search_20250305` → `web_search`).
pub(crate) fn undated(ty: &str) -> &str {
    match ty.rsplit_once('_') {
        Some((head, date)) if date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()) => head,
        _ => ty,
    }
}

/// The paid uses an upstream reported for one answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Uses {
    /// Uses per hosted family (None: this protocol reports no count of them).
    pub tools: Option<Vec<(String, u64)>>,
    /// The tier the upstream says it served the answer at (None: it did not say).
    pub tier: Option<String>,
}

/// Counts the paid uses of one answer as they are reported: Anthropic's `usage.server_tool_use` and
/// `server_tool_use` blocks, OpenAI Responses output items (`web_search_call`, `image_generation_call`,
/// `computer_call`, ...) and the `service_tier` OpenAI answers name.
#[derive(Debug, Default)]
pub struct Tally {
    /// Calls seen one by one (stream items and blocks).
    seen: Vec<(String, u64)>,
    /// Totals the upstream stated (Anthropic's usage, a Responses answer's whole output).
    stated: Vec<(String, u64)>,
    tier: Option<String>,
}

fn bump(list: &mut Vec<(String, u64)>, family: &str, n: u64) {
    match list.iter_mut().find(|(f, _)| f == family) {
        Some((_, c)) => *c = c.saturating_add(n),
        None => list.push((family.to_string(), n)),
    }
}

/// The hosted family of a Responses output item type (`web_search_call` → `web_search`); None for calls the
/// client runs.
fn item_family(kind: &str) -> Option<&str> {
    match kind.strip_suffix("_call")? {
        "function" | "custom_tool" | "local_shell" | "apply_patch" | "tool_search" => None,
        "computer" => Some("computer_use"),
        other => Some(other),
    }
}

impl Tally {
    /// A Responses output item (done), or an Anthropic content block (started) of type `kind`.
    pub fn item(&mut self, kind: &str, name: Option<&str>) {
        let family = if kind == "server_tool_use" {
            name
        } else {
            item_family(kind)
        };
        if let Some(f) = family {
            bump(&mut self.seen, f, 1);
        }
    }

    /// An Anthropic usage object: its `server_tool_use` counts (`web_search_requests`, ...).
    pub fn usage(&mut self, usage: &Value) {
        let Some(counts) = usage.get("server_tool_use").and_then(Value::as_object) else {
            return;
        };
        for (k, v) in counts {
            if let (Some(f), Some(n)) = (k.strip_suffix("_requests"), v.as_u64()) {
                match self.stated.iter_mut().find(|(g, _)| g == f) {
                    Some((_, c)) => *c = (*c).max(n),
                    None => self.stated.push((f.to_string(), n)),
                }
            }
        }
    }

    /// A complete Responses object: the items of its output, and its `service_tier`.
    pub fn response(&mut self, response: &Value) {
        let items = response.get("output").and_then(Value::as_array);
        let mut stated = Vec::new();
        for kind in items
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("type").and_then(Value::as_str))
        {
            if let Some(f) = item_family(kind) {
                bump(&mut stated, f, 1);
            }
        }
        self.stated = stated;
        if let Some(t) = response.get("service_tier").and_then(Value::as_str) {
            self.tier(t);
        }
    }

    /// The tier an OpenAI answer (or chunk) names.
    pub fn tier(&mut self, tier: &str) {
        self.tier = Some(tier.to_string());
    }

    /// The uses, each family at what the upstream stated where it did (the count it bills: Anthropic bills
    /// no web search that failed, though its block was seen), else at what was seen (a stream cut before
    /// its usage). `tools`: the protocol's answers count hosted uses; `tier`: the tier they name is the rate
    /// billed.
    pub fn uses(&self, counted: bool, tier: bool) -> Uses {
        let mut tools = self.stated.clone();
        for (f, n) in &self.seen {
            if !tools.iter().any(|(g, _)| g == f) {
                tools.push((f.clone(), *n));
            }
        }
        tools.sort();
        Uses {
            tools: counted.then_some(tools),
            tier: tier.then(|| self.tier.clone()).flatten(),
        }
    }
}

/// The parts of a complete answer the tally reads.
#[derive(Deserialize)]
struct AnswerPeek<'a> {
    #[serde(borrow, default)]
    output: Option<Vec<Kind<'a>>>,
    #[serde(borrow, default)]
    service_tier: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<Vec<Kind<'a>>>,
}

#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// The uses a complete answer reports (its raw bytes, and its usage object when read); `counted` and `tier`
/// as [`Tally::uses`] takes them from the protocol.
pub(crate) fn from_answer(raw: &[u8], usage: Option<&Value>, counted: bool, tier: bool) -> Uses {
    let mut tally = Tally::default();
    if let Ok(peek) = serde_json::from_slice::<AnswerPeek>(raw) {
        for k in peek.output.iter().chain(peek.content.iter()).flatten() {
            if let Some(kind) = &k.kind {
                tally.item(kind, k.name.as_deref());
            }
        }
        if let Some(t) = &peek.service_tier {
            tally.tier(t);
        }
    }
    if let Some(u) = usage {
        tally.usage(u);
    }
    tally.uses(counted, tier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;
    use serde_json::json;

    fn asks(p: Protocol, body: &Value) -> Result<Asks, ApiError> {
        p.hosted_asks(body)
    }

    fn from_answer(p: Protocol, raw: &[u8], usage: Option<&Value>) -> Uses {
        super::from_answer(raw, usage, p.reports_tool_uses, p.reports_rate_tier)
    }

    fn families(p: Protocol, body: Value) -> Vec<(String, String, Option<u64>)> {
        asks(p, &body)
            .unwrap()
            .tools
            .into_iter()
            .map(|t| (t.family, t.param, t.max_uses))
            .collect()
    }

    fn f(family: &str, param: &str, max: Option<u64>) -> (String, String, Option<u64>) {
        (family.into(), param.into(), max)
    }

    #[test]
    fn hosted_tools_are_found_and_client_tools_pass() {
        let r = Protocol::Responses;
        let body = json!({"max_tool_calls": 4, "tools": [
            {"type": "function", "name": "f"}, {"type": "custom", "name": "c"}, {"type": "local_shell"},
            {"type": "shell"}, {"type": "apply_patch"}, {"type": "web_search"}, {"type": "web_search_preview_2025_03_11"},
            {"type": "image_generation"}, {"type": "computer_use_preview"}]});
        assert_eq!(
            families(r, body),
            [
                f("web_search", "tools[5]", Some(4)),
                f("web_search", "tools[6]", Some(4)),
                f("image_generation", "tools[7]", Some(4)),
                f("computer_use", "tools[8]", Some(4))
            ]
        );
        let m = Protocol::Messages;
        let body = json!({"tools": [{"name": "f", "input_schema": {}}, {"type": "custom", "name": "g"},
            {"type": "bash_20250124", "name": "bash"}, {"type": "text_editor_20250728", "name": "e"},
            {"type": "computer_20250124", "name": "computer"}, {"type": "memory_20250818", "name": "memory"},
            {"type": "tool_search_tool_regex_20251119", "name": "s"},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 99},
            {"type": "web_fetch_20250910", "name": "web_fetch"}]});
        assert_eq!(
            families(m, body),
            [
                f("web_search", "tools[7]", Some(99)),
                f("web_fetch", "tools[8]", None)
            ]
        );
        let c = Protocol::Chat;
        assert_eq!(
            families(
                c,
                json!({"web_search_options": {}, "tools": [{"type": "function"}]})
            ),
            [f("web_search", "web_search_options", Some(1))]
        );
        assert!(asks(
            m,
            &json!({"tools": [{"type": "web_search_20250305", "max_uses": "x"}]})
        )
        .is_err());
    }

    #[test]
    fn paid_tiers_are_found() {
        let tiers = |p, b| -> Vec<String> {
            asks(p, &b)
                .unwrap()
                .tiers
                .into_iter()
                .map(|t| t.tier)
                .collect()
        };
        assert_eq!(
            tiers(Protocol::Responses, json!({"service_tier": "priority"})),
            ["priority"]
        );
        assert_eq!(
            tiers(Protocol::Chat, json!({"service_tier": "scale"})),
            ["scale"]
        );
        for free in ["auto", "default", "flex"] {
            assert!(tiers(Protocol::Chat, json!({"service_tier": free})).is_empty());
        }
        assert!(tiers(
            Protocol::Messages,
            json!({"service_tier": "standard_only", "speed": "standard"})
        )
        .is_empty());
        assert_eq!(
            tiers(
                Protocol::Messages,
                json!({"service_tier": "auto", "speed": "fast"})
            ),
            ["fast"]
        );
        assert!(asks(Protocol::Messages, &json!({"messages": []}))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn reported_uses_are_counted() {
        let raw = br#"{"content": [{"type": "server_tool_use", "name": "web_search"}, {"type": "text", "text": "x"}],
            "usage": {"server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 1}}}"#;
        let usage: Value = serde_json::from_slice::<Value>(raw).unwrap()["usage"].clone();
        let u = from_answer(Protocol::Messages, raw, Some(&usage));
        assert_eq!(
            u.tools,
            Some(vec![("web_fetch".into(), 1), ("web_search".into(), 3)])
        );
        let raw = br#"{"service_tier": "default", "output": [{"type": "web_search_call"}, {"type": "web_search_call"},
            {"type": "image_generation_call"}, {"type": "function_call"}, {"type": "computer_call"}, {"type": "message"}]}"#;
        let u = from_answer(Protocol::Responses, raw, None);
        assert_eq!(
            u.tools,
            Some(vec![
                ("computer_use".into(), 1),
                ("image_generation".into(), 1),
                ("web_search".into(), 2)
            ])
        );
        assert_eq!(u.tier.as_deref(), Some("default"));
        let u = from_answer(
            Protocol::Chat,
            br#"{"service_tier": "priority", "choices": []}"#,
            None,
        );
        assert_eq!((u.tools, u.tier.as_deref()), (None, Some("priority")));
        // A stream: blocks seen one by one, and the total stated at the end; each family at what was stated
        // where it was (three searches seen, one failed: two billed), else at what was seen.
        let mut t = Tally::default();
        for _ in 0..3 {
            t.item("server_tool_use", Some("web_search"));
        }
        t.item("server_tool_use", Some("web_fetch"));
        t.usage(&json!({"server_tool_use": {"web_search_requests": 2}}));
        assert_eq!(
            t.uses(
                Protocol::Messages.reports_tool_uses,
                Protocol::Messages.reports_rate_tier
            )
            .tools,
            Some(vec![("web_fetch".into(), 1), ("web_search".into(), 2)])
        );
    }
}
