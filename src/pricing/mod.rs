//! Prices and the one billing rule: a model's price sheet (five prices per 1M tokens, long-context tiers,
//! where the prices came from) and [`PriceSheet::bill`], which turns normalised usage (`protocol::canon`)
//! into a cost the same way on every path. The built-in list prices are in `list.rs`.

pub(crate) mod list;

use crate::money::Money;
use crate::protocol::canon::{InputSplit, Usage};

/// The five prices of a model, in credits per 1M tokens. Unset prices follow the others: cache reads and
/// writes cost the input price, 1-hour writes the 5-minute write price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prices {
    pub input: Money,
    /// Cache reads.
    pub cached_input: Option<Money>,
    /// Cache writes of five minutes, and writes whose lifetime the upstream does not state.
    pub cache_write: Option<Money>,
    /// Cache writes of one hour.
    pub cache_write_1h: Option<Money>,
    pub output: Money,
}

/// The price of each kind of token, the unset ones resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    pub input: Money,
    pub cache_read: Money,
    pub cache_write_5m: Money,
    pub cache_write_1h: Money,
    pub output: Money,
}

impl Prices {
    pub fn rates(&self) -> Rates {
        let write = self.cache_write.unwrap_or(self.input);
        Rates {
            input: self.input,
            cache_read: self.cached_input.unwrap_or(self.input),
            cache_write_5m: write,
            cache_write_1h: self.cache_write_1h.unwrap_or(write),
            output: self.output,
        }
    }

    /// Every price that is set, with its config name.
    pub fn named(&self) -> [(&'static str, Option<Money>); 5] {
        [
            ("input_price", Some(self.input)),
            ("cached_input_price", self.cached_input),
            ("cache_write_price", self.cache_write),
            ("cache_write_1h_price", self.cache_write_1h),
            ("output_price", Some(self.output)),
        ]
    }
}

/// A long-context tier: a request whose whole input (uncached, cache reads and cache writes) is above
/// `above_input_tokens` is billed entirely at the tier's prices; the prices a tier leaves unset are the
/// model's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tier {
    pub above_input_tokens: u64,
    pub input: Option<Money>,
    pub cached_input: Option<Money>,
    pub cache_write: Option<Money>,
    pub cache_write_1h: Option<Money>,
    pub output: Option<Money>,
}

impl Tier {
    /// The model's prices with this tier's on top.
    pub fn over(&self, base: &Prices) -> Prices {
        Prices {
            input: self.input.unwrap_or(base.input),
            cached_input: self.cached_input.or(base.cached_input),
            cache_write: self.cache_write.or(base.cache_write),
            cache_write_1h: self.cache_write_1h.or(base.cache_write_1h),
            output: self.output.unwrap_or(base.output),
        }
    }
}

/// Where a model's prices come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The config file, or the console.
    Set,
    /// The built-in list prices of this model of the table (`list.rs`).
    List(&'static str),
    /// `prices = "none"`: free on purpose.
    OptedOut,
    /// No price anywhere: it costs nothing (a warning says so when its upstream is paid).
    Unset,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Set => "config",
            Source::List(_) => "list",
            Source::OptedOut => "none",
            Source::Unset => "unset",
        }
    }
}

/// A model's prices: the base, its tiers (by rising threshold) and their source; list prices that change
/// on a known date carry the sheet in force from then.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceSheet {
    pub base: Prices,
    pub tiers: Vec<Tier>,
    pub source: Source,
    /// From this Unix time on, these prices (a vendor's announced change).
    pub later: Option<Box<(u64, PriceSheet)>>,
}

impl Default for PriceSheet {
    fn default() -> Self {
        PriceSheet {
            base: Prices::default(),
            tiers: Vec::new(),
            source: Source::Unset,
            later: None,
        }
    }
}

/// What a request was billed: the cost, its input by kind, and the tier applied (its threshold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bill {
    pub cost: Money,
    pub split: InputSplit,
    pub tier: Option<u64>,
}

impl PriceSheet {
    /// The sheet in force at `now` (Unix seconds).
    pub fn in_force(&self, now: u64) -> &PriceSheet {
        match &self.later {
            Some(l) if now >= l.0 => l.1.in_force(now),
            _ => self,
        }
    }

    /// The prices for a request of `input` tokens: those of the highest tier it is above, else the base;
    /// with that tier's threshold.
    pub fn prices_for(&self, input: u64) -> (Prices, Option<u64>) {
        match self
            .tiers
            .iter()
            .rev()
            .find(|t| input > t.above_input_tokens)
        {
            Some(t) => (t.over(&self.base), Some(t.above_input_tokens)),
            None => (self.base, None),
        }
    }

    /// The one billing rule: every kind of token at its price, the whole request at the tier its whole input
    /// falls in. Reasoning is part of the output and never billed apart.
    pub fn bill(&self, u: &Usage, now: u64) -> Bill {
        let sheet = self.in_force(now);
        let (prices, tier) = sheet.prices_for(u.input_tokens);
        let r = prices.rates();
        let s = u.split();
        let cost = r.input.per_million(s.uncached)
            + r.cache_read.per_million(s.cache_reads)
            + r.cache_write_5m.per_million(s.cache_writes_5m)
            + r.cache_write_1h.per_million(s.cache_writes_1h)
            + r.output.per_million(u.output_tokens);
        Bill {
            cost,
            split: s,
            tier,
        }
    }

    /// The most a request of `input` estimated input tokens and `output` output tokens can cost: at the
    /// tier its estimated input falls in, every input token at the dearest input kind (a request may write
    /// all of it to a cache).
    pub fn worst_case(&self, input: u64, output: u64, now: u64) -> Money {
        let (prices, _) = self.in_force(now).prices_for(input);
        let r = prices.rates();
        let dearest = [r.input, r.cache_read, r.cache_write_5m, r.cache_write_1h]
            .into_iter()
            .max()
            .unwrap_or(r.input);
        dearest.per_million(input) + r.output.per_million(output)
    }

    /// Every price of the base and the tiers, with the field it is set in.
    pub fn all_prices(&self) -> Vec<(String, Money)> {
        let mut out: Vec<(String, Money)> = self
            .base
            .named()
            .iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect();
        for (i, t) in self.tiers.iter().enumerate() {
            for (k, v) in [
                ("input_price", t.input),
                ("cached_input_price", t.cached_input),
                ("cache_write_price", t.cache_write),
                ("cache_write_1h_price", t.cache_write_1h),
                ("output_price", t.output),
            ] {
                if let Some(v) = v {
                    out.push((format!("tiers[{i}].{k}"), v));
                }
            }
        }
        out
    }

    /// The prices in force at `now` as the console and the audit trail show them: the five prices (unset
    /// ones null), the tiers, and where they come from (`price_source`: config, list, none or unset; with
    /// the list's model and date).
    pub fn json(&self, now: u64) -> serde_json::Value {
        use serde_json::json;
        let s = self.in_force(now);
        let b = &s.base;
        let tiers: Vec<serde_json::Value> = s
            .tiers
            .iter()
            .map(|t| {
                json!({"above_input_tokens": t.above_input_tokens, "input_price": t.input,
                       "cached_input_price": t.cached_input, "cache_write_price": t.cache_write,
                       "cache_write_1h_price": t.cache_write_1h, "output_price": t.output})
            })
            .collect();
        let (list_model, list_date) = match s.source {
            Source::List(m) => (Some(m), Some(list::AS_OF)),
            _ => (None, None),
        };
        json!({
            "input_price": b.input, "cached_input_price": b.cached_input,
            "cache_write_price": b.cache_write, "cache_write_1h_price": b.cache_write_1h,
            "output_price": b.output, "tiers": tiers, "price_source": s.source.name(),
            "list_model": list_model, "list_date": list_date,
        })
    }

    /// The prices in a line for people: `input 3, cache reads 0.3, 5m writes 3.75, 1h writes 6, output 15`
    /// and each tier's after it.
    pub fn describe(&self) -> String {
        let line = |p: &Prices| {
            let r = p.rates();
            format!(
                "input {}, cache reads {}, 5m writes {}, 1h writes {}, output {}",
                r.input, r.cache_read, r.cache_write_5m, r.cache_write_1h, r.output
            )
        };
        let mut out = line(&self.base);
        for t in &self.tiers {
            out.push_str(&format!(
                "; above {} input tokens: {}",
                t.above_input_tokens,
                line(&t.over(&self.base))
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Money {
        Money::parse(s).unwrap()
    }

    fn sheet() -> PriceSheet {
        PriceSheet {
            base: Prices {
                input: m("3"),
                cached_input: Some(m("0.3")),
                cache_write: Some(m("3.75")),
                cache_write_1h: Some(m("6")),
                output: m("15"),
            },
            tiers: vec![Tier {
                above_input_tokens: 200_000,
                input: Some(m("6")),
                output: Some(m("22.5")),
                ..Tier::default()
            }],
            source: Source::Set,
            later: None,
        }
    }

    #[test]
    fn every_kind_at_its_price() {
        let u = Usage {
            input_tokens: 1_000_000 + 2_000_000 + 3_000_000 + 4_000_000,
            cached_input_tokens: 2_000_000,
            cache_write_tokens: 7_000_000,
            cache_write_1h_tokens: 4_000_000,
            output_tokens: 1_000_000,
            reasoning_tokens: 500_000,
        };
        // Above the tier: input 6, reads and writes the model's (not set by the tier), output 22.5.
        let b = sheet().bill(&u, 0);
        assert_eq!(b.tier, Some(200_000));
        assert_eq!(b.cost, m("6") + m("0.6") + m("11.25") + m("24") + m("22.5"));
        // Below it.
        let small = Usage {
            input_tokens: 100,
            cached_input_tokens: 10,
            cache_write_tokens: 30,
            cache_write_1h_tokens: 20,
            output_tokens: 5,
            reasoning_tokens: 5,
        };
        let b = sheet().bill(&small, 0);
        assert_eq!(b.tier, None);
        let expect = m("3").per_million(60)
            + m("0.3").per_million(10)
            + m("3.75").per_million(10)
            + m("6").per_million(20)
            + m("15").per_million(5);
        assert_eq!(b.cost, expect);
        // Exactly at the threshold is not above it.
        let at = Usage {
            input_tokens: 200_000,
            ..Usage::default()
        };
        assert_eq!(sheet().bill(&at, 0).tier, None);
    }

    #[test]
    fn unset_prices_follow_the_others_and_the_worst_case_covers_writes() {
        let p = Prices {
            input: m("2"),
            cache_write: Some(m("2.5")),
            output: m("10"),
            ..Prices::default()
        };
        let r = p.rates();
        assert_eq!((r.cache_read, r.cache_write_1h), (m("2"), m("2.5")));
        let s = PriceSheet {
            base: p,
            ..PriceSheet::default()
        };
        assert_eq!(s.worst_case(1_000_000, 1_000_000, 0), m("2.5") + m("10"));
    }

    #[test]
    fn dated_prices_take_over_on_their_day() {
        let mut s = sheet();
        let mut next = sheet();
        next.base.input = m("4");
        s.later = Some(Box::new((1000, next)));
        assert_eq!(s.in_force(999).base.input, m("3"));
        assert_eq!(s.in_force(1000).base.input, m("4"));
    }
}
