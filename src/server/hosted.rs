//! Paid hosted features at the operator's prices (`allow_hosted_tools`, `allow_service_tiers` and
//! `max_hosted_uses` on `[[models]]`: `config/hosted.rs`). A request's [`Plan`] is made once, in `prepare`:
//! what it asks for (found by `protocol/hosted.rs`, every hosted tool wherever a definition holds it) is
//! kept where the model allows it at a price. A hosted tool the model does not allow is left out of the body
//! (named in `x-tollgate-dropped-tools` and logged, as a translated request leaves out what another vendor
//! cannot run), unless the client forces it with `tool_choice`: that, a paid tier the model does not allow
//! and more uses than it allows are refused with 400 naming the field. The use limit is written into the
//! body where the client gave none. Admission
//! reserves the plan's worst case (and refuses a key whose balance or budget cannot cover it); settlement
//! bills what the upstream reported ([`Ran`] → [`HostedBill`]).
//!
//! - Only models with an upstream of the client's protocol are checked: a translated request leaves hosted
//!   tools out (said in `x-tollgate-dropped-tools`) and carries no tier, so nothing paid runs. Token
//!   counting runs nothing either.
//! - Worst case: each tool's price × its use limit (the client's, at most `max_hosted_uses`; none given:
//!   `max_hosted_uses`); where one limit covers all hosted calls (Responses), that limit × the highest price
//!   among the tools; plus the price of each paid tier.
//! - Billed: for a complete answer, the uses the upstream reported (never more than the worst case), and a
//!   tier unless the upstream says it served the answer at a standard one; where the protocol reports no
//!   count (Chat search models), the worst case. An answer that went upstream and never completed (a broken
//!   stream, a client that left) is billed the worst case: uses may have run that were never reported. An
//!   attempt the upstream refused or never answered, or one that was translated, is billed nothing.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::access::accounts::Accounts;
use crate::access::Identity;
use crate::budget::Budget;
use crate::config::{Config, Model};
use crate::money::Money;
use crate::protocol::hosted::{self as wire, SurchargeAsk, TierAsk, ToolAsk, Uses};
use crate::protocol::request::Endpoint;
use crate::protocol::{ApiError, ErrorKind, Origin};

/// The header naming the hosted tools left out of a request (the model does not allow them, or its
/// upstream, of another vendor, cannot run them).
pub(super) const DROPPED_HEADER: &str = "x-tollgate-dropped-tools";

/// What paid features an attempt set running upstream, as far as the gateway knows.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) enum Ran {
    /// Nothing paid reached an upstream that runs it (translated, refused, never answered).
    #[default]
    Nothing,
    /// The request went upstream as it came; no complete answer said what ran.
    Sent,
    /// A complete answer, and the uses it reported.
    Reported(Uses),
}

/// The paid features a request was admitted with, and their prices.
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    /// Tool family → credits per use (each family once).
    prices: Vec<(String, Money)>,
    /// The worst case of the tools, and the uses it stands for.
    tools_worst: Money,
    worst_uses: Vec<(String, u64)>,
    /// Paid tier → credits per request.
    tiers: Vec<(String, Money)>,
    /// The use limit written into the request where the client gave none, and the positions of the tools it
    /// is written into (where each tool has its own).
    cap: Option<u64>,
    capped: Vec<usize>,
    /// The hosted tools left out of the body because the model does not allow them (families, each once).
    dropped: Vec<String>,
    /// A field that raises the rate of every token (`inference_geo=us`), and the multiplier it costs.
    surcharge: Option<(String, Money)>,
}

/// What a request is billed for its paid features.
#[derive(Debug, Default, PartialEq)]
pub(super) struct HostedBill {
    pub cost: Money,
    /// Uses billed per tool family.
    pub uses: BTreeMap<String, u64>,
    /// The paid tier billed.
    pub tier: Option<String>,
}

fn times(price: Money, n: u64) -> Money {
    Money::from_units(price.units().saturating_mul(n as i128))
}

impl Plan {
    pub(super) fn is_empty(&self) -> bool {
        self.prices.is_empty() && self.tiers.is_empty() && self.surcharge.is_none()
    }

    /// The request's token cost at its surcharge (Anthropic's `inference_geo`: the model's
    /// `allow_inference_geo`, 1.1 at Anthropic), and what it is (`inference_geo=us`).
    pub(super) fn surcharged(&self, tokens: Money) -> Money {
        match &self.surcharge {
            Some((_, factor)) => tokens.times(*factor),
            None => tokens,
        }
    }

    /// The surcharge the request is billed at (`inference_geo=us`), for its record.
    pub(super) fn surcharge(&self) -> Option<&str> {
        self.surcharge.as_ref().map(|(what, _)| what.as_str())
    }

    /// The hosted tools left out of the body (the model does not allow them), families each once.
    pub(super) fn dropped(&self) -> &[String] {
        &self.dropped
    }

    /// The use limit a request going upstream as it came carries where the client gave none, and the
    /// positions of the tools it is written into.
    pub(super) fn cap(&self) -> Option<(u64, &[usize])> {
        self.cap.map(|c| (c, self.capped.as_slice()))
    }

    /// The worst case reserved at admission.
    pub(super) fn reserved(&self) -> Money {
        self.tools_worst + self.tiers.iter().map(|(_, p)| *p).sum()
    }

    /// The bill for what `ran`.
    pub(super) fn charge(&self, ran: &Ran) -> HostedBill {
        let reported = match ran {
            Ran::Nothing => return HostedBill::default(),
            Ran::Sent => None,
            Ran::Reported(u) => Some(u),
        };
        let mut bill = HostedBill::default();
        match reported.and_then(|u| u.tools.as_ref()) {
            Some(counts) => {
                let mut cost = Money::ZERO;
                for (family, price) in &self.prices {
                    let n = counts.iter().find(|(f, _)| f == family).map_or(0, |c| c.1);
                    if n > 0 {
                        bill.uses.insert(family.clone(), n);
                        cost += times(*price, n);
                    }
                }
                bill.cost = cost.min(self.tools_worst);
            }
            None => {
                bill.cost = self.tools_worst;
                bill.uses = self.worst_uses.iter().cloned().collect();
            }
        }
        let served_standard = reported
            .and_then(|u| u.tier.as_deref())
            .is_some_and(wire::free_tier);
        if !served_standard {
            for (tier, price) in &self.tiers {
                bill.cost += *price;
                bill.tier = Some(tier.clone());
            }
        }
        bill
    }

    /// Refuses (429 `insufficient_quota`, like a used-up balance) a request whose worst case is more than
    /// what the key has left of its credit or of its budget (`budget`: the key's, else its group's).
    pub(super) fn affordable(
        &self,
        accounts: &Accounts,
        identity: &Identity,
        budget: Option<Budget>,
    ) -> Result<(), ApiError> {
        let worst = self.reserved();
        if worst == Money::ZERO {
            return Ok(());
        }
        if let Some(credit) = identity.credit {
            let left = credit - accounts.spent(&identity.name);
            if left < worst {
                return Err(short(worst, left, "balance"));
            }
        }
        if let Some(b) = budget {
            let spent = accounts.period_spent(&identity.name, b.period, crate::util::unix_now());
            let left = b.amount - spent;
            if left < worst {
                return Err(short(worst, left, &format!("{} budget", b.period.name())));
            }
        }
        Ok(())
    }
}

fn short(worst: Money, left: Money, of: &str) -> ApiError {
    ApiError::new(
        429,
        ErrorKind::InsufficientQuota,
        format!(
            "You exceeded your current quota: this request's hosted tools and service tier may cost up to {worst} \
             credits, and this key has {left} left of its {of}. Allow fewer uses of hosted tools, or ask the \
             operator to top the key up."
        ),
    )
    .with_cause(crate::protocol::Cause::InsufficientQuota)
    .with_origin(Origin::Quota)
}

/// The plan of a request to `model` (refusing what the model does not allow and the client forces), with
/// the use limit its body is to carry upstream where the client gave none; the hosted tools the model does
/// not allow are left out of `body`.
pub(super) fn plan(
    config: &Config,
    model: &Model,
    endpoint: Endpoint,
    body: &mut Value,
) -> Result<Plan, ApiError> {
    let protocol = endpoint.protocol();
    if !endpoint.generates() {
        return Ok(Plan::default());
    }
    let mut asks = protocol.hosted_asks(body)?;
    if asks.is_empty() || !config.passes_through(model, protocol) {
        return Ok(Plan::default());
    }
    let allowed = config.hosted_prices(&model.name);
    let dropped = leave_out_refused(body, &asks, allowed, &model.name)?;
    if !dropped.is_empty() {
        // What is left, where it now is.
        asks = protocol.hosted_asks(body)?;
    }
    let mut plan = Plan {
        dropped,
        ..Plan::default()
    };
    // Where one limit covers every hosted call: the dearest tool, that many times.
    let mut shared: Option<(&str, Money, u64)> = None;
    for t in &asks.tools {
        let Some(&price) = allowed.tools.get(&t.family) else {
            return Err(tool_refused(t, &model.name));
        };
        let limit = t.max_uses.unwrap_or(allowed.max_uses);
        if limit > allowed.max_uses {
            return Err(over_limit(t, limit, allowed.max_uses, &model.name));
        }
        if !plan.prices.iter().any(|(f, _)| *f == t.family) {
            plan.prices.push((t.family.clone(), price));
        }
        if asks.shared_limit {
            if shared.is_none_or(|(_, p, _)| price > p) {
                shared = Some((&t.family, price, limit));
            }
        } else {
            plan.tools_worst += times(price, limit);
            match plan.worst_uses.iter_mut().find(|(f, _)| *f == t.family) {
                Some((_, n)) => *n += limit,
                None => plan.worst_uses.push((t.family.clone(), limit)),
            }
        }
    }
    if let Some((family, price, limit)) = shared {
        plan.tools_worst = times(price, limit);
        plan.worst_uses = vec![(family.to_string(), limit)];
    }
    for t in &asks.tiers {
        let Some(&price) = allowed.tiers.get(&t.tier) else {
            return Err(tier_refused(t, &model.name));
        };
        plan.tiers.push((t.tier.clone(), price));
    }
    for t in &asks.surcharges {
        let Some(&factor) = allowed.surcharges.get(t.param) else {
            return Err(surcharge_refused(t, &model.name));
        };
        let what = format!("{}={}", t.param, t.value);
        if plan.surcharge.as_ref().is_none_or(|(_, f)| factor > *f) {
            plan.surcharge = Some((what, factor));
        }
    }
    if !asks.tools.is_empty() {
        plan.cap = Some(allowed.max_uses);
        plan.capped = asks.capped;
    }
    Ok(plan)
}

/// Leaves the hosted tools `asks` found that the model does not allow out of `body` (refusing the request
/// when the client forces one); returns their families, each once.
fn leave_out_refused(
    body: &mut Value,
    asks: &wire::Asks,
    allowed: &crate::config::hosted::HostedPrices,
    model: &str,
) -> Result<Vec<String>, ApiError> {
    let refused: Vec<&ToolAsk> = asks
        .tools
        .iter()
        .filter(|t| !allowed.tools.contains_key(&t.family))
        .collect();
    if let Some(t) = refused.iter().find(|t| t.forced) {
        return Err(tool_refused(t, model));
    }
    let mut dropped: Vec<String> = Vec::new();
    for t in &refused {
        if !dropped.contains(&t.family) {
            dropped.push(t.family.clone());
        }
    }
    if !refused.is_empty() {
        wire::leave_out(body, &refused, asks.with_tools);
    }
    Ok(dropped)
}

/// A hosted tool the model does not allow, forced by the client's `tool_choice` (leaving it out would
/// leave the request asking for a tool it no longer has).
fn tool_refused(t: &ToolAsk, model: &str) -> ApiError {
    let (param, family) = (&t.param, &t.family);
    ApiError::invalid_param(
        param,
        format!(
            "`{param}` is not accepted here: `tool_choice` forces the hosted tool `{family}`, which runs in the \
             operator's upstream account at a price per use, and the model `{model}` does not allow it (unforced, it \
             would be left out). The operator can allow it on the model with \
             `allow_hosted_tools = {{ {family} = <credits per use> }}`."
        ),
    )
    .with_cause(crate::protocol::Cause::HostedToolRefused)
}

fn over_limit(t: &ToolAsk, asked: u64, cap: u64, model: &str) -> ApiError {
    let param = &t.limit_param;
    ApiError::invalid_param(
        param,
        format!(
            "`{param}` asks for up to {asked} uses of hosted tools; the model `{model}` allows at most {cap} per \
             request (`max_hosted_uses`)."
        ),
    )
    .with_cause(crate::protocol::Cause::HostedUsesOverLimit)
}

fn surcharge_refused(t: &SurchargeAsk, model: &str) -> ApiError {
    let (param, value) = (t.param, &t.value);
    ApiError::invalid_param(
        param,
        format!(
            "`{param}` `{value}` is not accepted here: the upstream bills every token of such a request above the \
             standard rate (Anthropic: 1.1 times), and the model `{model}` does not allow it. The operator can allow \
             it on the model with `allow_{param} = <multiplier>`; leave the field out (or send `global`) for the \
             standard rate."
        ),
    )
    .with_cause(crate::protocol::Cause::ServiceTierRefused)
}

fn tier_refused(t: &TierAsk, model: &str) -> ApiError {
    let (param, tier) = (t.param, &t.tier);
    ApiError::invalid_param(
        param,
        format!(
            "`{param}` `{tier}` is not accepted here: it is billed to the operator's upstream account above the \
             standard rate, and the model `{model}` does not allow it. The operator can allow it on the model with \
             `allow_service_tiers = {{ {tier} = <credits per request> }}`; the standard tiers need nothing."
        ),
    )
    .with_cause(crate::protocol::Cause::ServiceTierRefused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;
    use serde_json::json;

    fn config() -> Config {
        Config::from_toml_str(
            "[[upstreams]]\nname='r'\nkind='openai-responses'\nbase_url='http://127.0.0.1:1/v1'\n\
             [[upstreams]]\nname='a'\nkind='anthropic'\nbase_url='http://127.0.0.1:1'\n\
             [[upstreams]]\nname='c'\nkind='openai-chat'\nbase_url='http://127.0.0.1:1/v1'\n\
             [[models]]\nname='gpt'\nupstream='r'\nmax_hosted_uses = 5\n\
             allow_hosted_tools = { web_search = 10, image_generation = 40 }\nallow_service_tiers = { priority = 0.5 }\n\
             [[models]]\nname='claude'\nupstream='a'\nallow_hosted_tools = { web_search = 0.01 }\n\
             [[models]]\nname='plain'\nupstream='r'\n\
             [[models]]\nname='local'\nupstream='c'\n",
        )
        .unwrap()
    }

    /// The plan, and the body as it goes to an upstream of the request's protocol.
    fn plan_for(model: &str, endpoint: Endpoint, body: Value) -> Result<(Plan, Value), String> {
        let c = config();
        let m = c.model(model).unwrap();
        let mut body = body;
        let p = plan(&c, m, endpoint, &mut body)
            .map_err(|e| e.param().unwrap_or_default().to_string())?;
        let f = crate::protocol::request::Forward {
            model,
            generation: true,
            limit: None,
            max_completion_tokens: false,
            stream: false,
            completion: false,
            store_nothing: false,
            reasoning: false,
            hosted_cap: p.cap(),
        };
        let sent = endpoint.protocol().upstream_edits(&f).apply(&body).unwrap();
        Ok((p, serde_json::from_slice(&sent).unwrap()))
    }

    const RESPONSES: Endpoint = Endpoint::Generate(Protocol::Responses);
    const MESSAGES: Endpoint = Endpoint::Generate(Protocol::Messages);

    #[test]
    fn left_out_unless_allowed_refused_when_forced_and_only_where_it_would_run() {
        let search = json!({"tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]});
        let (p, sent) = plan_for("plain", RESPONSES, search.clone()).unwrap();
        assert!(p.is_empty());
        assert_eq!(p.dropped(), ["web_search"]);
        assert_eq!(sent["tools"], json!([{"type": "function", "name": "f"}]));
        let mut forced = search.clone();
        forced["tool_choice"] = json!({"type": "web_search_preview"});
        assert_eq!(
            plan_for("plain", RESPONSES, forced).err().as_deref(),
            Some("tools[1]")
        );
        let tier = json!({"service_tier": "priority"});
        assert_eq!(
            plan_for("plain", RESPONSES, tier).err().as_deref(),
            Some("service_tier")
        );
        // A Chat upstream never sees them: a translated request leaves them out.
        assert!(plan_for("local", RESPONSES, search.clone())
            .unwrap()
            .0
            .is_empty());
        let count = Endpoint::CountTokens(Protocol::Messages);
        let fetch = json!({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]});
        assert!(plan_for("claude", count, fetch.clone())
            .unwrap()
            .0
            .is_empty());
        let (p, sent) = plan_for("claude", MESSAGES, fetch).unwrap();
        assert_eq!(
            (p.dropped(), sent.get("tools")),
            (&["web_fetch".to_string()][..], None)
        );
        let many = json!({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 99}]});
        assert_eq!(
            plan_for("claude", MESSAGES, many).err().as_deref(),
            Some("tools[0].max_uses")
        );
    }

    #[test]
    fn the_worst_case_is_reserved_and_what_ran_is_billed() {
        let body = json!({"tools": [{"type": "web_search"}, {"type": "image_generation"}], "service_tier": "priority"});
        let (p, sent) = plan_for("gpt", RESPONSES, body).unwrap();
        assert_eq!(sent["max_tool_calls"], 5, "the limit reserved for is sent");
        // 5 calls at the dearest tool, plus the tier.
        assert_eq!(p.reserved().to_string(), "200.5");
        let reported = Ran::Reported(Uses {
            tools: Some(vec![
                ("image_generation".into(), 1),
                ("web_search".into(), 3),
            ]),
            tier: Some("priority".into()),
        });
        let bill = p.charge(&reported);
        assert_eq!(bill.cost.to_string(), "70.5");
        assert_eq!(bill.uses.get("web_search"), Some(&3));
        assert_eq!(bill.tier.as_deref(), Some("priority"));
        let standard = Ran::Reported(Uses {
            tools: Some(Vec::new()),
            tier: Some("default".into()),
        });
        assert_eq!(
            p.charge(&standard),
            HostedBill::default(),
            "served at the standard tier, nothing ran"
        );
        assert_eq!(p.charge(&Ran::Sent).cost, p.reserved());
        assert_eq!(p.charge(&Ran::Nothing), HostedBill::default());
        let body = json!({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"type": "web_search_20250305", "name": "web_search_2"}]});
        let (p, sent) = plan_for("claude", MESSAGES, body).unwrap();
        assert_eq!(sent["tools"][0]["max_uses"], 3);
        assert_eq!(sent["tools"][1]["max_uses"], 10);
        assert_eq!(p.reserved().to_string(), "0.13");
        let over = Ran::Reported(Uses {
            tools: Some(vec![("web_search".into(), 50)]),
            tier: None,
        });
        assert_eq!(
            p.charge(&over).cost.to_string(),
            "0.13",
            "never above the worst case"
        );
    }
}
