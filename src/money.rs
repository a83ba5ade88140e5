//! Money as an integer: an amount of credits is a whole number of picocredits (10⁻¹² credit).
//!
//! The unit is small enough that any price with up to 6 decimals per 1M tokens makes every cost exact (one
//! token at 0.000001 credits per 1M is 1 unit), and the `i128` behind it holds 1.7 × 10²⁶ credits, beyond any
//! real balance. Prices, costs, reservations, balances, the ledger, the keys file, metrics, the console and
//! CSV all carry this type; JSON shows it as a plain decimal number (`0.0000333`, never
//! `0.000033299999999999996`). Amounts written by older versions as floats are read rounded to the unit.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

/// Picocredits per credit.
pub const UNITS_PER_CREDIT: i128 = 1_000_000_000_000;

/// Decimal places of the unit.
pub const DECIMALS: usize = 12;

/// The largest number of decimals a price (credits per 1M tokens) may have, so that every cost is exact.
pub const PRICE_DECIMALS: usize = 6;

/// An amount of credits, held as a whole number of picocredits (see the module documentation).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i128);

/// Set once a float amount had to be rounded to the unit (reported once in the log).
static ROUNDED: AtomicBool = AtomicBool::new(false);

impl Money {
    /// No credits.
    pub const ZERO: Money = Money(0);

    /// The amount of `units` picocredits.
    pub const fn from_units(units: i128) -> Money {
        Money(units)
    }

    /// The amount in picocredits.
    pub const fn units(self) -> i128 {
        self.0
    }

    /// Whole credits.
    pub const fn credits(n: i64) -> Money {
        Money(n as i128 * UNITS_PER_CREDIT)
    }

    /// Parses a decimal amount exactly (`12`, `0.25`, `-1.5`, `1e-6`); more decimals than the unit holds, or
    /// a value that is not a finite number, is an error.
    pub fn parse(text: &str) -> Result<Money, MoneyError> {
        let t = text.trim();
        let (mantissa, exp) = match t.find(['e', 'E']) {
            Some(i) => (
                &t[..i],
                t[i + 1..]
                    .parse::<i32>()
                    .map_err(|_| MoneyError::NotANumber(text.to_string()))?,
            ),
            None => (t, 0),
        };
        let (neg, digits) = match mantissa.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, mantissa.strip_prefix('+').unwrap_or(mantissa)),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(MoneyError::NotANumber(text.to_string()));
        }
        // All digits as one integer, and the power of ten it is to be divided by.
        let all: String = format!("{int}{frac}");
        let all = all.trim_start_matches('0');
        let scale = frac.len() as i64 - exp as i64;
        let significant = all.trim_end_matches('0');
        let trailing_zeros = (all.len() - significant.len()) as i64;
        if scale - trailing_zeros > DECIMALS as i64 {
            return Err(MoneyError::TooFine(text.to_string()));
        }
        let value: i128 = if all.is_empty() {
            0
        } else {
            all.parse::<i128>()
                .map_err(|_| MoneyError::TooLarge(text.to_string()))?
        };
        let shift = DECIMALS as i64 - scale;
        let units = if shift >= 0 {
            10i128
                .checked_pow(shift as u32)
                .and_then(|p| value.checked_mul(p))
        } else {
            Some(value / 10i128.pow((-shift) as u32))
        }
        .ok_or_else(|| MoneyError::TooLarge(text.to_string()))?;
        Ok(Money(if neg { -units } else { units }))
    }

    /// An amount from a float written by an older version (or a JSON number), rounded to the unit; None
    /// when it is not finite or out of range. Noticing a float finer than the unit is said once in the log.
    pub fn from_f64(v: f64) -> Option<Money> {
        if !v.is_finite() || v.abs() > 1e26 {
            return None;
        }
        // The shortest text that reads back as `v` is the amount meant; its decimals beyond the unit are noise.
        let text = format!("{v}");
        match Money::parse(&text) {
            Ok(m) => Some(m),
            Err(_) => {
                if !ROUNDED.swap(true, Ordering::Relaxed) {
                    log::info!(
                        "amounts written as floats finer than 0.000000000001 credits (such as {text}) are read \
                         rounded to that unit"
                    );
                }
                Some(Money((v * UNITS_PER_CREDIT as f64).round() as i128))
            }
        }
    }

    /// The nearest float (for JSON numbers: for amounts up to 15 significant digits it prints back as the
    /// exact decimal).
    pub fn to_f64(self) -> f64 {
        // Through the decimal text, so the float is the one nearest the exact amount.
        self.to_string().parse().unwrap_or(0.0)
    }

    /// Whether the amount is below zero.
    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// The sum; None when it overflows.
    pub fn checked_add(self, o: Money) -> Option<Money> {
        self.0.checked_add(o.0).map(Money)
    }

    /// The sum, held at the bounds of `i128` instead of overflowing.
    pub fn saturating_add(self, o: Money) -> Money {
        Money(self.0.saturating_add(o.0))
    }

    /// The difference, held at the bounds of `i128` instead of overflowing.
    pub fn saturating_sub(self, o: Money) -> Money {
        Money(self.0.saturating_sub(o.0))
    }

    /// The cost of `tokens` at this price (credits per 1M tokens): exact when the price has at most
    /// `PRICE_DECIMALS` decimals (which `check` and the config enforce).
    pub fn per_million(self, tokens: u64) -> Money {
        Money(self.0.saturating_mul(tokens as i128) / 1_000_000)
    }

    /// This amount times `factor` (a multiplier, such as a surcharge's 1.1), rounded up to the unit so a
    /// surcharge never bills less than it says. Saturating.
    pub fn times(self, factor: Money) -> Money {
        let product = self.0.saturating_mul(factor.0);
        Money(product / UNITS_PER_CREDIT + i128::from(product % UNITS_PER_CREDIT > 0))
    }

    /// Whether this price is fine enough for exact costs (at most `PRICE_DECIMALS` decimals).
    pub fn is_exact_price(self) -> bool {
        self.0 % 1_000_000 == 0
    }
}

/// Checks a price (credits per 1M tokens): 0 or more, with at most `PRICE_DECIMALS` decimals so that every
/// cost is a whole number of units.
pub fn check_price(p: Money) -> Result<(), MoneyError> {
    if p.is_negative() {
        return Err(MoneyError::NegativePrice(p));
    }
    if !p.is_exact_price() {
        return Err(MoneyError::PriceTooFine(p));
    }
    Ok(())
}

/// Why a text is not an amount, or an amount not a price.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoneyError {
    /// The text (as written) is not a decimal number.
    NotANumber(String),
    /// The text has more decimals than the unit holds.
    TooFine(String),
    /// The text is beyond the amounts a `Money` holds.
    TooLarge(String),
    /// A price below 0.
    NegativePrice(Money),
    /// A price with more than `PRICE_DECIMALS` decimals (a cost would not be a whole number of units).
    PriceTooFine(Money),
}

impl fmt::Display for MoneyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoneyError::NotANumber(text) => write!(f, "{text:?} is not a number"),
            MoneyError::TooFine(text) => write!(
                f,
                "{text:?} has more than {DECIMALS} decimals (the smallest amount is 0.000000000001)"
            ),
            MoneyError::TooLarge(text) => write!(f, "{text:?} is too large"),
            MoneyError::NegativePrice(p) => write!(
                f,
                "expected a price of 0 or more credits per 1M tokens, got {p}"
            ),
            MoneyError::PriceTooFine(p) => write!(
                f,
                "{p} has more than {PRICE_DECIMALS} decimals: prices per 1M tokens go down to 0.000001 (one unit per token)"
            ),
        }
    }
}

impl std::error::Error for MoneyError {}

impl std::str::FromStr for Money {
    type Err = MoneyError;
    fn from_str(s: &str) -> Result<Money, MoneyError> {
        Money::parse(s)
    }
}

impl std::ops::Add for Money {
    type Output = Money;
    fn add(self, o: Money) -> Money {
        Money(self.0.saturating_add(o.0))
    }
}

impl std::ops::Sub for Money {
    type Output = Money;
    fn sub(self, o: Money) -> Money {
        Money(self.0.saturating_sub(o.0))
    }
}

impl std::ops::AddAssign for Money {
    fn add_assign(&mut self, o: Money) {
        self.0 = self.0.saturating_add(o.0);
    }
}

impl std::iter::Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, |a, b| a + b)
    }
}

/// The exact decimal: `0.0000333`, `1.224`, `5`, `-0.5`.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.0 < 0;
        let abs = self.0.unsigned_abs();
        let int = abs / UNITS_PER_CREDIT as u128;
        let frac = abs % UNITS_PER_CREDIT as u128;
        let sign = if neg { "-" } else { "" };
        if frac == 0 {
            write!(f, "{sign}{int}")
        } else {
            let digits = format!("{frac:0width$}", width = DECIMALS);
            write!(f, "{sign}{int}.{}", digits.trim_end_matches('0'))
        }
    }
}

impl fmt::Debug for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Money({self})")
    }
}

/// A JSON number (the exact decimal as far as a float carries it: 15 significant digits).
impl serde::Serialize for Money {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.to_f64())
    }
}

/// From a JSON number (rounded to the unit) or a decimal string (exact).
impl<'de> serde::Deserialize<'de> for Money {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(v) => Money::from_f64(v)
                .ok_or_else(|| serde::de::Error::custom(format!("{v} is not an amount"))),
            Raw::Text(t) => Money::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_exactly_and_print_without_noise() {
        for (text, units) in [
            ("0", 0),
            ("5", 5 * UNITS_PER_CREDIT),
            ("0.3", 300_000_000_000),
            ("1.224", 1_224_000_000_000),
            ("0.000000000001", 1),
            ("-1.5", -1_500_000_000_000),
            ("1e-6", 1_000_000),
            ("2.5E3", 2_500 * UNITS_PER_CREDIT),
            ("0.100000000000000", 100_000_000_000),
        ] {
            assert_eq!(Money::parse(text).unwrap().units(), units, "{text}");
        }
        assert!(
            Money::parse("0.0000000000001").is_err(),
            "finer than the unit"
        );
        assert!(Money::parse("abc").is_err());
        assert!(Money::parse("1.2.3").is_err());
        assert_eq!(Money::parse("0.0000333").unwrap().to_string(), "0.0000333");
        assert_eq!(Money::parse("-0.5").unwrap().to_string(), "-0.5");
        assert_eq!(Money::credits(7).to_string(), "7");
    }

    #[test]
    fn a_multiplier_rounds_up_to_the_unit() {
        let m = |t: &str| Money::parse(t).unwrap();
        assert_eq!(m("2.5").times(m("1.1")), m("2.75"));
        assert_eq!(m("0.000000000001").times(m("1.1")), m("0.000000000002"));
        assert_eq!(m("3").times(m("1")), m("3"));
    }

    #[test]
    fn costs_add_up_to_the_unit() {
        // 0.3 and 1.2 per 1M tokens: the float version gave 0.000033299999999999996 and 1.2239999999999824.
        let (input, output) = (Money::parse("0.3").unwrap(), Money::parse("1.2").unwrap());
        let cost = input.per_million(11) + output.per_million(25);
        assert_eq!(cost.to_string(), "0.0000333");
        let one = Money::parse("0.001224").unwrap();
        let total: Money = (0..1000).map(|_| one).sum();
        assert_eq!(total.to_string(), "1.224");
        assert!(
            !Money::parse("0.0000001").unwrap().is_exact_price(),
            "7 decimals per 1M"
        );
        assert!(Money::parse("0.000001").unwrap().is_exact_price());
    }

    #[test]
    fn floats_from_older_files_are_rounded_to_the_unit() {
        assert_eq!(
            Money::from_f64(0.000033299999999999996)
                .unwrap()
                .to_string(),
            "0.0000333"
        );
        assert_eq!(
            Money::from_f64(1.2239999999999824).unwrap().to_string(),
            "1.224"
        );
        assert_eq!(Money::from_f64(f64::NAN), None);
        let m: Money = serde_json::from_str("0.0000333").unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), "0.0000333");
        let back: f64 = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, 0.0000333);
    }
}
