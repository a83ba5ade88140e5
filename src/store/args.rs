//! How values are written for the store's scripts: amounts and token counts saturated where a script's Lua
//! number stops being exact, and the budget period fields of `per:K`. Admission, settlement, allotments and
//! shipping all write them so.

use crate::budget::Period;
use crate::money::Money;

/// The field of a budget period's spend in `per:K`: `d`, `w` or `m` and the period's start.
pub(super) fn period_field(period: Period, now: u64) -> String {
    format!("{}{}", period.letter(), period.start_of(now))
}

/// The largest whole number a script's Lua double holds exactly (2^53 - 1).
const SCRIPT_MAX: u64 = (1 << 53) - 1;

/// An amount as the scripts take it, saturated at `SCRIPT_MAX` whole credits (their money is split into
/// whole credits and picocredits, each exact only up to 2^53): a huge reservation stays huge, never wraps.
pub(super) fn units(m: Money) -> String {
    let max = SCRIPT_MAX as i128 * crate::money::UNITS_PER_CREDIT;
    m.units().min(max).to_string()
}

/// A token count as the scripts take it, saturated at `SCRIPT_MAX`.
pub(super) fn script_tokens(n: u64) -> u64 {
    n.min(SCRIPT_MAX)
}
