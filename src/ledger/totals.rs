//! What the ledger's records add up to: per key its total spend, its spend per UTC day for the days a
//! budget period may still count, and its last use; per group its total spend. The start's replay, the
//! writer (for checkpoints) and retention fold records into it with one function, [`Totals::fold`], reading
//! only the fields it needs from a line, so fields added to records later change nothing here.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::budget::{Period, PeriodSpend};
use crate::money::Money;

const DAY: u64 = 86_400;

/// One key's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyTotals {
    /// Everything it spent (exact decimal text on disk).
    #[serde(serialize_with = "money_text", deserialize_with = "money_from_text")]
    pub spent: Money,
    /// Spend per UTC day (the day's start, Unix seconds), for the days the current budget periods may count
    /// (on disk: the first day and each day's picocredits).
    #[serde(
        default,
        serialize_with = "days_units",
        deserialize_with = "days_from_units",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub days: BTreeMap<u64, Money>,
    /// The latest `ts` of its records.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_used: String,
    /// How many of its records were folded in.
    #[serde(default)]
    pub records: u64,
}

/// Totals of many records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Each key's totals, by key name.
    #[serde(default)]
    pub keys: HashMap<String, KeyTotals>,
    /// Total spend per group (the group each record names).
    #[serde(
        default,
        serialize_with = "groups_text",
        deserialize_with = "groups_from_text"
    )]
    pub groups: HashMap<String, Money>,
    /// How many records were folded in.
    #[serde(default)]
    pub records: u64,
    /// Not kept: the day of the last date folded, and the first day worth keeping.
    #[serde(skip)]
    pub scratch: Scratch,
}

/// What folding many lines reuses (not part of the totals: two totals with different scratch are equal).
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    /// Days before this are not kept (they count in no budget period any more); 0: all are.
    pub floor: u64,
    /// The date part of the last `ts` folded and its day.
    last: Option<([u8; 10], u64)>,
}

impl PartialEq for Scratch {
    fn eq(&self, _: &Scratch) -> bool {
        true
    }
}

impl Scratch {
    /// The start of the UTC day of `ts` (RFC 3339 in UTC as the ledger writes it), parsed only when its date
    /// differs from the last one's.
    fn day(&mut self, ts: &str) -> Option<u64> {
        let date: Option<[u8; 10]> = ts.as_bytes().get(..10).and_then(|d| d.try_into().ok());
        if let (Some(d), Some((last, day))) = (date, self.last) {
            if d == last && ts.ends_with('Z') {
                return Some(day);
            }
        }
        let ms = crate::util::parse_rfc3339_millis(ts)?;
        let day = (ms / 1000).max(0) as u64 / DAY * DAY;
        if ts.ends_with('Z') {
            self.last = date.map(|d| (d, day));
        }
        Some(day)
    }
}

/// What a line was.
#[derive(Debug)]
pub enum Line<'a> {
    /// A record, counted; its `ts`.
    Record(Cow<'a, str>),
    /// Nothing but white space.
    Blank,
    /// A record with an impossible value (a negative or non-finite cost, a token count that is not a
    /// non-negative integer): not counted.
    Impossible(String),
    /// Not a record at all: skipped.
    NotRecord(String),
}

/// The fields the totals need; the token counts are there only to be checked (non-negative integers).
#[derive(Deserialize)]
struct Spend<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    cost: f64,
    #[serde(default, borrow)]
    ts: Cow<'a, str>,
    #[serde(default, borrow)]
    group: Cow<'a, str>,
    #[serde(rename = "input_tokens")]
    _input: u64,
    #[serde(rename = "output_tokens")]
    _output: u64,
    #[serde(default, rename = "cached_input_tokens")]
    _cached: u64,
    #[serde(default, rename = "reasoning_tokens")]
    _reasoning: u64,
}

/// Whether a line that is not a valid record still looks like one (an object with a cost): a damaged or
/// forged record rather than a stray line.
fn looks_like_record(text: &[u8]) -> bool {
    text.first() == Some(&b'{') && text.windows(6).any(|w| w == b"\"cost\"")
}

/// The first day a budget period holding `now` (or any later moment) may count.
pub(crate) fn first_counted_day(now: u64) -> u64 {
    Period::Monthly
        .start_of(now)
        .min(Period::Weekly.start_of(now))
}

impl Totals {
    /// Adds one ledger line (without its newline).
    pub fn fold<'a>(&mut self, text: &'a [u8]) -> Line<'a> {
        if text.iter().all(u8::is_ascii_whitespace) {
            return Line::Blank;
        }
        let s = match serde_json::from_slice::<Spend>(text) {
            Ok(s) if s.cost.is_finite() && s.cost >= 0.0 => s,
            Ok(s) => return Line::Impossible(format!("an impossible cost ({})", s.cost)),
            Err(e) if looks_like_record(text) => return Line::Impossible(e.to_string()),
            Err(e) => return Line::NotRecord(e.to_string()),
        };
        let cost = Money::from_f64(s.cost).unwrap_or_default();
        let k = match self.keys.get_mut(s.key.as_ref()) {
            Some(k) => k,
            None => self.keys.entry(s.key.to_string()).or_default(),
        };
        k.spent += cost;
        k.records += 1;
        if cost != Money::ZERO {
            if let Some(day) = self.scratch.day(&s.ts).filter(|d| *d >= self.scratch.floor) {
                *k.days.entry(day).or_default() += cost;
            }
        }
        if k.last_used.as_str() < s.ts.as_ref() {
            // (The buffer is reused: records come in time order, so nearly every one is the latest.)
            k.last_used.clear();
            k.last_used.push_str(&s.ts);
        }
        if cost != Money::ZERO {
            match self.groups.get_mut(s.group.as_ref()) {
                Some(g) => *g += cost,
                None => {
                    self.groups.insert(s.group.to_string(), cost);
                }
            }
        }
        self.records += 1;
        Line::Record(s.ts)
    }

    /// Forgets the days no budget period holding `now` or later can count (their spend stays in `spent`).
    pub fn prune(&mut self, now: u64) {
        let first = first_counted_day(now);
        for k in self.keys.values_mut() {
            if k.days.first_key_value().is_some_and(|(d, _)| *d < first) {
                k.days = k.days.split_off(&first);
            }
        }
    }

    /// Adds `other` to these totals.
    pub fn merge(&mut self, other: &Totals) {
        for (name, o) in &other.keys {
            let k = self.keys.entry(name.clone()).or_default();
            k.spent += o.spent;
            k.records += o.records;
            for (d, m) in &o.days {
                *k.days.entry(*d).or_default() += *m;
            }
            if k.last_used < o.last_used {
                k.last_used = o.last_used.clone();
            }
        }
        for (g, m) in &other.groups {
            *self.groups.entry(g.clone()).or_default() += *m;
        }
        self.records += other.records;
    }

    /// Spend per key in all and in the budget periods holding `now`, and each key's last use: what the
    /// accounts start from.
    pub fn balances(&self, now: u64) -> Balances {
        let first = first_counted_day(now);
        // The periods holding `now`: a day counts in each whose [start, end) holds it.
        let spans = Period::ALL.map(|p| {
            let start = p.start_of(now);
            (start, p.end_of(start))
        });
        let none = PeriodSpend::at(now);
        let mut out = Balances::default();
        for (name, k) in &self.keys {
            out.spent.insert(name.clone(), k.spent);
            let mut sums = [Money::ZERO; 3];
            let mut any = false;
            for (d, m) in k.days.range(first..) {
                for (i, (start, end)) in spans.iter().enumerate() {
                    if (*start..*end).contains(d) {
                        sums[i] += *m;
                        any = true;
                    }
                }
            }
            if any {
                out.periods.insert(name.clone(), none.with(sums));
            }
            if !k.last_used.is_empty() {
                out.last_used.insert(name.clone(), k.last_used.clone());
            }
        }
        out
    }
}

/// Spend per key in all, in the current budget periods, and each key's last use.
#[derive(Debug, Default)]
pub struct Balances {
    pub spent: HashMap<String, Money>,
    pub periods: HashMap<String, PeriodSpend>,
    pub last_used: HashMap<String, String>,
}

/// An amount written as exact decimal text (read directly: no untagged enum on the start's path).
struct Text(Money);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t: Cow<'de, str> = Deserialize::deserialize(d)?;
        Money::parse(&t).map(Text).map_err(serde::de::Error::custom)
    }
}

fn money_from_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Money, D::Error> {
    Text::deserialize(d).map(|t| t.0)
}

fn days_from_units<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<u64, Money>, D::Error> {
    let v: Vec<i64> = Deserialize::deserialize(d)?;
    let bad = || serde::de::Error::custom("a day out of range");
    let mut it = v.into_iter();
    let Some(first) = it.next() else {
        return Ok(BTreeMap::new());
    };
    let mut day = u64::try_from(first).map_err(|_| bad())?;
    let mut out = BTreeMap::new();
    while let Some(u) = it.next() {
        let units = match u {
            BIG => {
                let (hi, lo) = (it.next().ok_or_else(bad)?, it.next().ok_or_else(bad)?);
                ((hi as i128) << 62) | lo as i128
            }
            u if u < 0 => {
                day = day.saturating_add(u.unsigned_abs());
                continue;
            }
            u => u as i128,
        };
        out.insert(day.saturating_mul(DAY), Money::from_units(units));
        day += 1;
    }
    Ok(out)
}

fn groups_from_text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<HashMap<String, Money>, D::Error> {
    let m: HashMap<String, Text> = Deserialize::deserialize(d)?;
    Ok(m.into_iter().map(|(k, v)| (k, v.0)).collect())
}

fn money_text<S: serde::Serializer>(m: &Money, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(m)
}

/// In a day array: the next two numbers are one amount too large for one (high and low 62 bits).
const BIG: i64 = i64::MIN;

/// Days as `[first day (days since 1970), picocredits of that day, of the next, ...]`, a run of days without
/// spend written as minus its length: a start reads many of them, and 64-bit integers parse fastest (an
/// amount beyond them, over 9 million credits in a day, is written as `BIG, high, low`).
fn days_units<S: serde::Serializer>(days: &BTreeMap<u64, Money>, s: S) -> Result<S::Ok, S::Error> {
    let mut out: Vec<i64> = Vec::with_capacity(days.len() + 1);
    let mut next = None;
    for (d, m) in days {
        let d = d / DAY;
        match next {
            None => out.push(d as i64),
            Some(n) if d > n => out.push(-((d - n) as i64)),
            _ => {}
        }
        match i64::try_from(m.units()) {
            Ok(u) if u >= 0 => out.push(u),
            _ => {
                let u = m.units().max(0);
                out.extend([BIG, (u >> 62) as i64, (u & ((1 << 62) - 1)) as i64]);
            }
        }
        next = Some(d + 1);
    }
    s.collect_seq(out)
}

fn groups_text<S: serde::Serializer>(g: &HashMap<String, Money>, s: S) -> Result<S::Ok, S::Error> {
    let sorted: BTreeMap<&String, String> = g.iter().map(|(k, m)| (k, m.to_string())).collect();
    s.collect_map(sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(key: &str, cost: &str, ts: &str) -> String {
        format!(
            "{{\"ts\":\"{ts}\",\"key\":\"{key}\",\"group\":\"g\",\"cost\":{cost},\"input_tokens\":1,\"output_tokens\":2,\"tier\":\"later-field\"}}"
        )
    }

    #[test]
    fn folds_spend_days_and_last_use_and_survives_a_round_trip() {
        let mut t = Totals::default();
        for l in [
            line("a", "0.1", "2026-03-30T10:00:00.000Z"),
            line("a", "0.2", "2026-03-31T10:00:00.000Z"),
            line("b", "0", "2026-03-31T11:00:00.000Z"),
        ] {
            assert!(matches!(t.fold(l.as_bytes()), Line::Record(_)));
        }
        assert!(matches!(t.fold(b"  "), Line::Blank));
        assert!(matches!(
            t.fold(line("a", "-1", "2026-03-31T10:00:00.000Z").as_bytes()),
            Line::Impossible(_)
        ));
        assert!(matches!(t.fold(b"hello"), Line::NotRecord(_)));
        assert_eq!(t.records, 3);
        let a = &t.keys["a"];
        assert_eq!(a.spent, Money::parse("0.3").unwrap());
        assert_eq!(a.last_used, "2026-03-31T10:00:00.000Z");
        assert_eq!(t.groups["g"], Money::parse("0.3").unwrap());
        let back: Totals = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        // Days far apart, as a run of empty days.
        let mut far = t.clone();
        far.keys.get_mut("a").unwrap().days.insert(
            crate::util::parse_rfc3339("2031-01-01T00:00:00Z").unwrap(),
            Money::parse("7").unwrap(),
        );
        far.keys.get_mut("a").unwrap().days.insert(
            crate::util::parse_rfc3339("2031-01-02T00:00:00Z").unwrap(),
            Money::from_units(i128::from(i64::MAX) * 1000 + 7),
        );
        let text = serde_json::to_string(&far).unwrap();
        assert!(text.len() < 1000, "{text}");
        assert_eq!(serde_json::from_str::<Totals>(&text).unwrap(), far);
        // Periods at 2026-04-01 (a Wednesday): the month is new, the week began on Monday 03-30.
        let now = crate::util::parse_rfc3339("2026-04-01T12:00:00Z").unwrap();
        let b = t.balances(now);
        let p = b.periods["a"];
        assert_eq!(p.spent(Period::Weekly, now), Money::parse("0.3").unwrap());
        assert_eq!(p.spent(Period::Monthly, now), Money::ZERO);
        assert_eq!(p.spent(Period::Daily, now), Money::ZERO);
        t.prune(now);
        assert_eq!(t.keys["a"].days.len(), 2, "the week still counts both days");
        t.prune(crate::util::parse_rfc3339("2026-04-07T00:00:00Z").unwrap());
        assert!(t.keys["a"].days.is_empty());
        assert_eq!(t.keys["a"].spent, Money::parse("0.3").unwrap());
    }
}
