//! The built-in list prices: current OpenAI, Anthropic and Google Gemini text models with their prices
//! (USD per 1M tokens on the standard tier, taken as credits one for one), long-context tiers, context
//! windows and output limits, as published on the dates below. Nothing is fetched at run time. Each row
//! names where its figures were read: source ids listed with their addresses in docs/BILLING.md; `(3p)`
//! marks a third party's figure (a gateway's or tracker's copy of the vendor page), where no vendor page
//! was at hand; `derived` marks a figure computed from a rule the vendor states (OpenAI: cache writes cost
//! 1.25× input from GPT-5.6 on; above 272K input tokens input and cache rates double, output costs 1.5×).
//!
//! Anthropic rates: 5-minute writes 1.25× input, 1-hour writes 2×, reads 0.1× (Fable 5.1: 0.025×; Opus
//! 5.5, Sonnet 5.5: 0.05×) [A1, A17]. OpenAI: cache writes cost nothing extra before GPT-5.6 (they are
//! input), 1.25× input from it on, for the 30-minute retention its usage reports [O6]. Gemini: no price
//! per written token (explicit caches pay storage by the hour, which is not per request) [G1].

use crate::money::Money;

use super::{PriceSheet, Prices, Source, Tier};

/// When the table was compiled.
pub(crate) const AS_OF: &str = "2026-11-25";

/// Prices as written on the vendor's page (USD per 1M tokens).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub input: &'static str,
    pub cached: Option<&'static str>,
    pub write: Option<&'static str>,
    pub write_1h: Option<&'static str>,
    pub output: &'static str,
}

/// Anthropic's order: input, 5-minute write, 1-hour write, cache read, output.
const fn a(
    input: &'static str,
    write: &'static str,
    write_1h: &'static str,
    read: &'static str,
    output: &'static str,
) -> Row {
    Row {
        input,
        cached: Some(read),
        write: Some(write),
        write_1h: Some(write_1h),
        output,
    }
}

/// OpenAI's order: input, cached input (`None`: no caching, reads are input), cache write (`None`: no
/// write fee, writes are input), output.
const fn o(
    input: &'static str,
    cached: Option<&'static str>,
    write: Option<&'static str>,
    output: &'static str,
) -> Row {
    Row {
        input,
        cached,
        write,
        write_1h: None,
        output,
    }
}

/// Gemini's: input, cached input, output (thinking included).
const fn g(input: &'static str, cached: &'static str, output: &'static str) -> Row {
    Row {
        input,
        cached: Some(cached),
        write: None,
        write_1h: None,
        output,
    }
}

/// One model of the table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PriceRow {
    pub model: &'static str,
    /// Other names of the same model (the vendor's aliases; dated snapshots need none, see [`find`]).
    pub aliases: &'static [&'static str],
    pub vendor: &'static str,
    pub prices: Row,
    /// Above this many input tokens (uncached, reads and writes), the whole request at these prices.
    pub tier: Option<(u64, Row)>,
    pub context: Option<u64>,
    pub max_output: Option<u64>,
    /// An announced change: from this day (00:00 UTC) on, these prices.
    pub then: Option<(&'static str, Row)>,
    /// Where the figures were read (see docs/BILLING.md).
    pub source: &'static str,
}

const M1: Option<u64> = Some(1_048_576);
const K128: Option<u64> = Some(128_000);
const K64: Option<u64> = Some(64_000);
const K65: Option<u64> = Some(65_536);
/// OpenAI's 1.05M-context models.
const OAI_1M: Option<u64> = Some(1_050_000);
const OAI_400K: Option<u64> = Some(400_000);
/// OpenAI's long-context threshold.
const OAI_LONG: u64 = 272_000;

const fn row(
    model: &'static str,
    vendor: &'static str,
    prices: Row,
    context: Option<u64>,
    max_output: Option<u64>,
    source: &'static str,
) -> PriceRow {
    PriceRow {
        model,
        aliases: &[],
        vendor,
        prices,
        tier: None,
        context,
        max_output,
        then: None,
        source,
    }
}

const fn tiered(mut l: PriceRow, above: u64, prices: Row) -> PriceRow {
    l.tier = Some((above, prices));
    l
}

const fn aka(mut l: PriceRow, aliases: &'static [&'static str]) -> PriceRow {
    l.aliases = aliases;
    l
}

const fn then(mut l: PriceRow, from: &'static str, prices: Row) -> PriceRow {
    l.then = Some((from, prices));
    l
}

const ANT: &str = "anthropic";
const OAI: &str = "openai";
const GOO: &str = "gemini";

/// The table.
#[rustfmt::skip]
pub(crate) const TABLE: &[PriceRow] = &[
    // ---- Anthropic (Claude API). Every 1M-context Claude model is priced flat across its window [A1, A25].
    // Fable 5.2: no vendor page at hand; every figure third-party [A20 (3p)].
    row("claude-fable-5-2", ANT, a("8", "10", "16", "0.2", "40"), Some(1_000_000), None, "A20 (3p)"),
    // Pricing page (reads 0.025×, its footnote 1) and model page [A1, A2].
    row("claude-fable-5-1", ANT, a("10", "12.5", "20", "0.25", "50"), Some(1_000_000), K128, "A1, A2"),
    row("claude-mythos-5-1", ANT, a("10", "12.5", "20", "0.25", "50"), Some(1_000_000), K128, "A1"),
    row("claude-fable-5", ANT, a("10", "12.5", "20", "1", "50"), Some(1_000_000), K128, "A1, A3"),
    row("claude-mythos-5", ANT, a("10", "12.5", "20", "1", "50"), Some(1_000_000), K128, "A1, A3"),
    // Model page: $4 / $20, writes $5 / $8, reads $0.20 [A4].
    row("claude-opus-5-5", ANT, a("4", "5", "8", "0.2", "20"), Some(1_000_000), K128, "A4; A18 (3p)"),
    row("claude-opus-5", ANT, a("5", "6.25", "10", "0.5", "25"), Some(1_000_000), K128, "A1, A5"),
    row("claude-opus-4-8", ANT, a("5", "6.25", "10", "0.5", "25"), Some(1_000_000), K128, "A1, A9"),
    // Prices from the pricing page; limits from Bedrock's and Google Cloud's model cards [A15].
    row("claude-opus-4-7", ANT, a("5", "6.25", "10", "0.5", "25"), Some(1_000_000), K128, "A1; A15"),
    // The >200K surcharge ended on 2026-03-13 [A25].
    row("claude-opus-4-6", ANT, a("5", "6.25", "10", "0.5", "25"), Some(1_000_000), K128, "A1, A10; A25"),
    row("claude-opus-4-5", ANT, a("5", "6.25", "10", "0.5", "25"), Some(200_000), K64, "A1, A11"),
    // Reads cut from $0.20 to $0.10 on 2026-10-07 (four trackers re-read the live page [A18 (3p)]; the
    // stored model page [A6] predates the cut).
    row("claude-sonnet-5-5", ANT, a("2", "2.5", "4", "0.1", "10"), Some(1_000_000), K128, "A6; reads A18 (3p)"),
    // The announced rise to $3 / $15 was cancelled [A21].
    row("claude-sonnet-5", ANT, a("2", "2.5", "4", "0.2", "10"), Some(1_000_000), K128, "A7; A21"),
    row("claude-sonnet-4-6", ANT, a("3", "3.75", "6", "0.3", "15"), Some(1_000_000), K128, "A12; A25"),
    // Deprecated, retires 2026-11-30 [A13]; the current page gives it a 200K window (no long-context tier).
    row("claude-sonnet-4-5", ANT, a("3", "3.75", "6", "0.3", "15"), Some(200_000), K64, "A13, A16"),
    // Above 100,000 prompt tokens (input + reads + writes), every token of the request at the higher
    // prices, output included. The model page [A8] is cut off after the 5-minute write of that band; its
    // 1-hour write ($1.00) and read ($0.05) are a tracker's [A19 (3p)].
    tiered(
        row("claude-haiku-5-5", ANT, a("0.1", "0.125", "0.2", "0.01", "0.5"), Some(1_000_000), K128, "A8; band A19 (3p)"),
        100_000,
        a("0.5", "0.625", "1", "0.05", "2.5"),
    ),
    row("claude-haiku-4-5", ANT, a("1", "1.25", "2", "0.1", "5"), Some(200_000), K64, "A14"),
    // ---- OpenAI. Cached input 10% of input on the GPT-5 family, 5% on 6.1/6.2 Sol and 6.1 Terra, 25% on
    // GPT-4.1, 50% on GPT-4o and o3 [O5, O7, O16].
    // GPT-6.2 Astra: third-party only; reads derived from "cached input 60% cheaper" than GPT-6 Astra's $1;
    // the write and the >272K tier derived from the family rules [O12 (3p), O6].
    tiered(
        row("gpt-6.2-astra", OAI, o("8", Some("0.4"), Some("10"), "40"), OAI_1M, K128, "O12 (3p); derived"),
        OAI_LONG,
        o("16", Some("0.8"), Some("20"), "60"),
    ),
    // Model page: $2 / $0.10 / writes $2.50 (30 min) / $10; >272K: doubled input and cache rates, 1.5× out
    // [O1]. (A 12-hour write costs $5: usage does not say which retention a write had.)
    tiered(
        row("gpt-6.2-sol", OAI, o("2", Some("0.1"), Some("2.5"), "10"), OAI_1M, K128, "O1"),
        OAI_LONG,
        o("4", Some("0.2"), Some("5"), "15"),
    ),
    tiered(
        row("gpt-6.1-sol", OAI, o("2", Some("0.1"), Some("2.5"), "10"), OAI_1M, K128, "O5; O11 (3p)"),
        OAI_LONG,
        o("4", Some("0.2"), Some("5"), "15"),
    ),
    tiered(
        row("gpt-6.1-terra", OAI, o("1", Some("0.05"), Some("1.25"), "5"), OAI_1M, K128, "O2"),
        OAI_LONG,
        o("2", Some("0.1"), Some("2.5"), "7.5"),
    ),
    tiered(
        row("gpt-6-astra", OAI, o("10", Some("1"), Some("12.5"), "50"), OAI_1M, K128, "O5; O9 (3p)"),
        OAI_LONG,
        o("20", Some("2"), Some("25"), "75"),
    ),
    // Third-party prices; the >272K tier derived from the family rule [O10 (3p)].
    tiered(
        row("gpt-6-sol", OAI, o("2", Some("0.2"), Some("2.5"), "10"), OAI_1M, K128, "O10 (3p); tier derived"),
        OAI_LONG,
        o("4", Some("0.4"), Some("5"), "15"),
    ),
    tiered(
        row("gpt-6-luna", OAI, o("0.1", Some("0.01"), Some("0.125"), "0.5"), OAI_1M, K128, "O3"),
        OAI_LONG,
        o("0.2", Some("0.02"), Some("0.25"), "0.75"),
    ),
    // The vendor's models page shows $4 / $20: a promotion from 2026-08-21 "at least through 2026-11-21"
    // [O13 (3p)], list price $5 / $0.50 / $30. Nothing found on its end: the vendor page's figure is kept.
    aka(
        tiered(
            row("gpt-5.6-sol", OAI, o("4", Some("0.4"), Some("5"), "20"), OAI_1M, K128, "O5; O13 (3p)"),
            OAI_LONG,
            o("8", Some("0.8"), Some("10"), "30"),
        ),
        &["gpt-5.6"],
    ),
    tiered(
        row("gpt-5.6-terra", OAI, o("2", Some("0.2"), Some("2.5"), "12"), OAI_1M, K128, "O5; O14 (3p)"),
        OAI_LONG,
        o("4", Some("0.4"), Some("5"), "18"),
    ),
    tiered(
        row("gpt-5.6-luna", OAI, o("0.2", Some("0.02"), Some("0.25"), "1.2"), OAI_1M, K128, "O4"),
        OAI_LONG,
        o("0.4", Some("0.04"), Some("0.5"), "1.8"),
    ),
    // The >272K tier is disputed (models.dev lists it, genai-prices does not); the vendor's family rule
    // names GPT-5.5 [O1-O4, O15 (3p)].
    tiered(
        row("gpt-5.5", OAI, o("5", Some("0.5"), None, "30"), OAI_1M, K128, "O14, O15 (3p)"),
        OAI_LONG,
        o("10", Some("1"), None, "45"),
    ),
    tiered(
        row("gpt-5.5-pro", OAI, o("30", None, None, "180"), OAI_1M, K128, "O14, O15 (3p)"),
        OAI_LONG,
        o("60", None, None, "270"),
    ),
    tiered(
        row("gpt-5.4", OAI, o("2.5", Some("0.25"), None, "15"), OAI_1M, K128, "O14, O15 (3p)"),
        OAI_LONG,
        o("5", Some("0.5"), None, "22.5"),
    ),
    row("gpt-5.4-mini", OAI, o("0.75", Some("0.075"), None, "4.5"), OAI_400K, K128, "O14, O15 (3p)"),
    row("gpt-5.4-nano", OAI, o("0.2", Some("0.02"), None, "1.25"), OAI_400K, K128, "O14, O15 (3p)"),
    tiered(
        row("gpt-5.4-pro", OAI, o("30", None, None, "180"), OAI_1M, K128, "O14, O15 (3p)"),
        OAI_LONG,
        o("60", None, None, "270"),
    ),
    row("gpt-5.2", OAI, o("1.75", Some("0.175"), None, "14"), OAI_400K, K128, "O14, O15 (3p)"),
    row("gpt-5.2-pro", OAI, o("21", None, None, "168"), OAI_400K, K128, "O14, O15 (3p)"),
    row("gpt-5.1", OAI, o("1.25", Some("0.125"), None, "10"), OAI_400K, K128, "O7; O14, O15 (3p)"),
    // Shut down on 2026-12-11 [O7].
    row("gpt-5", OAI, o("1.25", Some("0.125"), None, "10"), OAI_400K, K128, "O7; O15 (3p)"),
    row("gpt-5-mini", OAI, o("0.25", Some("0.025"), None, "2"), OAI_400K, K128, "O7; O15 (3p)"),
    row("gpt-5-nano", OAI, o("0.05", Some("0.005"), None, "0.4"), OAI_400K, K128, "O7; O15 (3p)"),
    row("gpt-5-pro", OAI, o("15", None, None, "120"), OAI_400K, Some(272_000), "O7; O15 (3p)"),
    // Shut down on 2027-01-14 [O7].
    row("gpt-4.1", OAI, o("2", Some("0.5"), None, "8"), Some(1_047_576), Some(32_768), "O7; O14, O15 (3p)"),
    row("gpt-4.1-mini", OAI, o("0.4", Some("0.1"), None, "1.6"), Some(1_047_576), Some(32_768), "O7; O14, O15 (3p)"),
    row("gpt-4o", OAI, o("2.5", Some("1.25"), None, "10"), Some(128_000), Some(16_384), "O7; O14, O15 (3p)"),
    row("gpt-4o-mini", OAI, o("0.15", Some("0.075"), None, "0.6"), Some(128_000), Some(16_384), "O7; O14, O15 (3p)"),
    // Shut down on 2026-12-11 [O7].
    row("o3", OAI, o("2", Some("0.5"), None, "8"), Some(200_000), Some(100_000), "O7; O14, O15 (3p)"),
    row("o3-pro", OAI, o("20", None, None, "80"), Some(200_000), Some(100_000), "O7; O14, O15 (3p)"),
    // Embeddings: input only (no output is generated) [O16 (3p)].
    row("text-embedding-3-small", OAI, o("0.02", None, None, "0"), Some(8_192), None, "O16 (3p)"),
    row("text-embedding-3-large", OAI, o("0.13", None, None, "0"), Some(8_192), None, "O16 (3p)"),
    row("text-embedding-ada-002", OAI, o("0.1", None, None, "0"), Some(8_192), None, "O16 (3p)"),
    // ---- Google Gemini (Gemini API, standard tier). Output includes thinking tokens [G1].
    // Embeddings: input only [G8 (3p)].
    row("gemini-embedding-001", GOO, o("0.15", None, None, "0"), Some(2_048), None, "G8 (3p)"),
    row("gemini-embedding-2-preview", GOO, o("0.2", None, None, "0"), Some(8_192), None, "G8 (3p)"),
    // Introductory $2 / $10 until 2026-11-30, then $4 / $20 [G3 (vendor page, Argon), G5 (3p, Carbon)]. The
    // output limit shares the 1,048,576-token window; one reseller shows 65,536 for Carbon [G5 (3p)].
    then(
        row("gemini-4-carbon", GOO, g("2", "0.1", "10"), M1, K65, "G5 (3p)"),
        "2026-12-01",
        g("4", "0.2", "20"),
    ),
    then(
        row("gemini-4-argon", GOO, g("2", "0.1", "10"), M1, None, "G3; G4 (3p)"),
        "2026-12-01",
        g("4", "0.2", "20"),
    ),
    // "$0.75 through December 31, 2026 … $1.50 starting January 1, 2027" [G1].
    then(
        row("gemini-3.8-flash", GOO, g("0.75", "0.075", "3.75"), M1, K65, "G1; G7, G8 (3p)"),
        "2027-01-01",
        g("1.5", "0.15", "7.5"),
    ),
    then(
        row("gemini-3.7-flash", GOO, g("0.75", "0.075", "3.75"), M1, K65, "G6, G7, G8 (3p)"),
        "2027-01-01",
        g("1.5", "0.15", "7.5"),
    ),
    then(
        row("gemini-3.6-flash", GOO, g("0.75", "0.075", "3.75"), M1, None, "G2; G6 (3p)"),
        "2027-01-01",
        g("1.5", "0.15", "7.5"),
    ),
    row("gemini-3.5-flash", GOO, g("1.5", "0.15", "9"), M1, K65, "G1; G6, G7 (3p)"),
    row("gemini-3.5-flash-lite", GOO, g("0.3", "0.03", "2.5"), M1, K65, "G1; G6 (3p)"),
    // Above 200,000 prompt tokens, the whole request at $4 / $0.40 / $18 [G1].
    tiered(
        row("gemini-3.1-pro-preview", GOO, g("2", "0.2", "12"), M1, K65, "G1; G6, G7 (3p)"),
        200_000,
        g("4", "0.4", "18"),
    ),
    row("gemini-3.1-flash-lite", GOO, g("0.25", "0.025", "1.5"), M1, K65, "G2; G6, G7 (3p)"),
    row("gemini-3-flash-preview", GOO, g("0.5", "0.05", "3"), M1, K65, "G2; G6, G7 (3p)"),
    // Shut down on 2026-12-01 (then routed to 3.8 Flash) [G2].
    tiered(
        row("gemini-2.5-pro", GOO, g("1.25", "0.125", "10"), M1, K65, "G1, G2; G6, G7 (3p)"),
        200_000,
        g("2.5", "0.25", "15"),
    ),
    row("gemini-2.5-flash", GOO, g("0.3", "0.03", "2.5"), M1, K65, "G1, G2; G6, G7 (3p)"),
    row("gemini-2.5-flash-lite", GOO, g("0.1", "0.01", "0.4"), M1, K65, "G1, G2; G6, G7 (3p)"),
];

/// The row of an upstream model name: its own, an alias, or a dated snapshot of it (`claude-opus-4-5-20251101`,
/// `gpt-4o-2024-08-06`).
pub(crate) fn find(upstream_model: &str) -> Option<&'static PriceRow> {
    let exact = |name: &str| {
        TABLE
            .iter()
            .find(|l| l.model == name || l.aliases.contains(&name))
    };
    exact(upstream_model).or_else(|| exact(undated(upstream_model)?))
}

/// The name without a trailing snapshot date (`-20251101`, `-2024-08-06`).
fn undated(name: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((base, date)) = name.rsplit_once('-') {
        if date.len() == 8 && digits(date) {
            return Some(base);
        }
    }
    let parts: Vec<&str> = name.rsplitn(4, '-').collect();
    match parts.as_slice() {
        [d, m, y, base] if d.len() == 2 && m.len() == 2 && y.len() == 4 => {
            (digits(d) && digits(m) && digits(y)).then_some(*base)
        }
        _ => None,
    }
}

fn price(text: &str) -> Money {
    Money::parse(text).unwrap_or_default()
}

fn prices(r: &Row) -> Prices {
    Prices {
        input: price(r.input),
        cached_input: r.cached.map(price),
        cache_write: r.write.map(price),
        cache_write_1h: r.write_1h.map(price),
        output: price(r.output),
    }
}

fn tier(above: u64, r: &Row) -> Tier {
    let p = prices(r);
    Tier {
        above_input_tokens: above,
        input: Some(p.input),
        cached_input: p.cached_input,
        cache_write: p.cache_write,
        cache_write_1h: p.cache_write_1h,
        output: Some(p.output),
    }
}

impl PriceRow {
    /// The row as a price sheet, its announced change included.
    pub(crate) fn sheet(&self) -> PriceSheet {
        let later = self.then.and_then(|(from, r)| {
            let at = crate::util::parse_rfc3339_millis(&format!("{from}T00:00:00Z"))?;
            let next = PriceSheet {
                base: prices(&r),
                ..self.sheet_now()
            };
            Some(Box::new(((at / 1000).max(0) as u64, next)))
        });
        PriceSheet {
            later,
            ..self.sheet_now()
        }
    }

    fn sheet_now(&self) -> PriceSheet {
        PriceSheet {
            base: prices(&self.prices),
            tiers: self.tier.iter().map(|(a, r)| tier(*a, r)).collect(),
            source: Source::List(self.model),
            later: None,
        }
    }
}

/// The table as text (`tollgate models --list-prices`): one line per model and per tier or announced change.
pub(crate) fn render() -> String {
    use std::fmt::Write;
    let mut out = format!(
        "# Built-in list prices, compiled {AS_OF}: USD per 1M tokens (standard tier), taken as credits one for \
         one.\n# Sources: docs/BILLING.md; (3p) marks a third party's figure.\n"
    );
    let _ = writeln!(
        out,
        "{:<24} {:<9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>8}  source",
        "model", "vendor", "input", "cached", "write5m", "write1h", "output", "context", "max_out"
    );
    let cell = |v: Option<&str>| v.unwrap_or("=input").to_string();
    let line =
        |out: &mut String, name: &str, vendor: &str, r: &Row, ctx: &str, max: &str, src: &str| {
            let w1h = r.write_1h.or(r.write).unwrap_or("=input");
            let _ = writeln!(
                out,
                "{name:<24} {vendor:<9} {:>8} {:>8} {:>8} {w1h:>8} {:>8} {ctx:>10} {max:>8}  {src}",
                r.input,
                cell(r.cached),
                cell(r.write),
                r.output
            );
        };
    let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for l in TABLE {
        let name = match l.aliases {
            [] => l.model.to_string(),
            a => format!("{} ({})", l.model, a.join(", ")),
        };
        line(
            &mut out,
            &name,
            l.vendor,
            &l.prices,
            &n(l.context),
            &n(l.max_output),
            l.source,
        );
        if let Some((above, r)) = &l.tier {
            line(
                &mut out,
                &format!("  above {above} in"),
                "",
                r,
                "",
                "",
                "whole request",
            );
        }
        if let Some((from, r)) = &l.then {
            line(
                &mut out,
                &format!("  from {from}"),
                "",
                r,
                "",
                "",
                "announced",
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_is_an_exact_price_and_every_name_is_unique() {
        let mut names = std::collections::HashSet::new();
        for l in TABLE {
            for r in std::iter::once(&l.prices)
                .chain(l.tier.as_ref().map(|t| &t.1))
                .chain(l.then.as_ref().map(|t| &t.1))
            {
                for f in [Some(r.input), r.cached, r.write, r.write_1h, Some(r.output)]
                    .into_iter()
                    .flatten()
                {
                    let m = Money::parse(f).unwrap_or_else(|e| panic!("{}: {e}", l.model));
                    crate::money::check_price(m).unwrap();
                }
            }
            for n in std::iter::once(l.model).chain(l.aliases.iter().copied()) {
                assert!(names.insert(n), "{n} twice");
                assert!(undated(n).is_none(), "{n}");
            }
            assert!(!l.source.is_empty());
            if let Some((from, _)) = l.then {
                assert!(l.sheet().later.is_some(), "{}: {from}", l.model);
            }
        }
    }

    /// The worked examples of docs/BILLING.md, at the table's prices.
    #[test]
    fn the_documented_examples_cost_what_the_doc_says() {
        use crate::protocol::canon::Usage;
        let bill = |model: &str, u: Usage| find(model).unwrap().sheet().bill(&u, 0);
        let claude = Usage {
            input_tokens: 36_200,
            cached_input_tokens: 30_000,
            cache_write_tokens: 5_000,
            cache_write_1h_tokens: 3_000,
            output_tokens: 400,
            reasoning_tokens: 0,
        };
        assert_eq!(bill("claude-sonnet-4-6", claude).cost.to_string(), "0.0441");
        let gpt = Usage {
            input_tokens: 300_000,
            cached_input_tokens: 250_000,
            cache_write_tokens: 20_000,
            cache_write_1h_tokens: 0,
            output_tokens: 3_000,
            reasoning_tokens: 2_000,
        };
        let b = bill("gpt-6.1-terra", gpt);
        assert_eq!(
            (b.cost.to_string(), b.tier),
            ("0.1575".into(), Some(272_000))
        );
        let gemini = Usage {
            input_tokens: 12_000,
            cached_input_tokens: 8_000,
            output_tokens: 2_000,
            reasoning_tokens: 1_500,
            ..Usage::default()
        };
        assert_eq!(bill("gemini-2.5-pro", gemini).cost.to_string(), "0.026");
    }

    #[test]
    fn names_snapshots_and_aliases_are_found() {
        assert_eq!(
            find("claude-opus-4-5-20251101").unwrap().model,
            "claude-opus-4-5"
        );
        assert_eq!(find("gpt-4o-2024-08-06").unwrap().model, "gpt-4o");
        assert_eq!(find("gpt-5.6").unwrap().model, "gpt-5.6-sol");
        assert!(find("gpt-4o-mini-2024-07-18").is_some());
        assert!(find("real-chat-model").is_none());
        assert!(find("claude-opus-4-5-2025").is_none());
        let h = find("claude-haiku-5-5").unwrap().sheet();
        assert_eq!(h.tiers[0].above_input_tokens, 100_000);
        assert_eq!(h.base.rates().cache_write_1h, Money::parse("0.2").unwrap());
    }
}
