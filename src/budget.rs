//! Spend budgets that reset: an amount per calendar period in UTC (a day from 00:00, a week from Monday
//! 00:00, a month from the 1st 00:00). Calendar periods rather than a rolling window, so "spent today" and
//! "resets at" are the same for everyone who looks and a reset is one moment, not a slow trickle.

use serde::{Deserialize, Serialize};

use crate::money::Money;
use crate::util::{civil_from_days, days_from_civil};

const DAY: u64 = 86_400;

/// A budget's period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Daily,
    Weekly,
    Monthly,
}

impl Period {
    pub const ALL: [Period; 3] = [Period::Daily, Period::Weekly, Period::Monthly];

    pub fn parse(s: &str) -> Option<Period> {
        match s {
            "daily" | "day" => Some(Period::Daily),
            "weekly" | "week" => Some(Period::Weekly),
            "monthly" | "month" => Some(Period::Monthly),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Period::Daily => "daily",
            Period::Weekly => "weekly",
            Period::Monthly => "monthly",
        }
    }

    /// Its one-letter form in the shared store (`d`, `w`, `m`).
    pub fn letter(self) -> char {
        match self {
            Period::Daily => 'd',
            Period::Weekly => 'w',
            Period::Monthly => 'm',
        }
    }

    /// The period of a one-letter form.
    pub fn from_letter(s: &str) -> Option<Period> {
        Period::ALL
            .into_iter()
            .find(|p| s.len() == 1 && s.starts_with(p.letter()))
    }

    /// Its index in [`Period::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The start (Unix seconds) of the period that holds `now`.
    pub fn start_of(self, now: u64) -> u64 {
        let day = now / DAY;
        match self {
            Period::Daily => day * DAY,
            // 1970-01-01 was a Thursday: Monday is 3 days before day 0's weekday.
            Period::Weekly => day.saturating_sub((day + 3) % 7) * DAY,
            Period::Monthly => {
                let (y, m, _) = civil_from_days(day as i64);
                days_from_civil(y, m, 1) as u64 * DAY
            }
        }
    }

    /// When the period starting at `start` ends (the next one starts).
    pub fn end_of(self, start: u64) -> u64 {
        match self {
            Period::Daily => start + DAY,
            Period::Weekly => start + 7 * DAY,
            Period::Monthly => {
                let (y, m, _) = civil_from_days((start / DAY) as i64);
                let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                days_from_civil(y, m, 1) as u64 * DAY
            }
        }
    }
}

/// A spend budget: at most `amount` credits per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub amount: Money,
    pub period: Period,
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.amount, self.period.name())
    }
}

impl Budget {
    /// `AMOUNT/PERIOD` or an amount and a period given apart, checked.
    pub fn new(amount: Money, period: &str) -> Result<Budget, BudgetError> {
        if amount.is_negative() {
            return Err(BudgetError::Negative(amount));
        }
        let period =
            Period::parse(period).ok_or_else(|| BudgetError::UnknownPeriod(period.to_string()))?;
        Ok(Budget { amount, period })
    }
}

/// Why an amount and a period make no budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetError {
    /// The amount is below 0.
    Negative(Money),
    /// The period (as written) is none of daily, weekly, monthly.
    UnknownPeriod(String),
}

impl std::fmt::Display for BudgetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetError::Negative(amount) => {
                write!(f, "expected an amount of 0 or more, got {amount}")
            }
            BudgetError::UnknownPeriod(period) => {
                write!(f, "expected daily, weekly or monthly, got {period:?}")
            }
        }
    }
}

impl std::error::Error for BudgetError {}

/// Spend per period (daily, weekly, monthly), each with the start of the period it counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeriodSpend([(u64, Money); 3]);

impl PeriodSpend {
    /// Spend counted in the periods that hold `now`.
    pub fn at(now: u64) -> PeriodSpend {
        PeriodSpend(Period::ALL.map(|p| (p.start_of(now), Money::ZERO)))
    }

    /// The same periods with `spent` (daily, weekly, monthly) counted in them.
    pub fn with(self, spent: [Money; 3]) -> PeriodSpend {
        PeriodSpend(Period::ALL.map(|p| (self.0[p.index()].0, spent[p.index()])))
    }

    /// Moves each period that has ended to the one holding `now`, starting it at zero.
    pub fn roll(&mut self, now: u64) {
        for p in Period::ALL {
            let start = p.start_of(now);
            let slot = &mut self.0[p.index()];
            if slot.0 != start {
                *slot = (start, Money::ZERO);
            }
        }
    }

    /// Adds a cost incurred at `at` to the periods that still count it.
    pub fn add(&mut self, at: u64, cost: Money) {
        for p in Period::ALL {
            let slot = &mut self.0[p.index()];
            if slot.0 == p.start_of(at) {
                slot.1 += cost;
            }
        }
    }

    /// Spent in the period `p` that holds `now` (0 when the counted one has ended).
    pub fn spent(&self, p: Period, now: u64) -> Money {
        let (start, spent) = self.0[p.index()];
        if start == p.start_of(now) {
            spent
        } else {
            Money::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> u64 {
        crate::util::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn periods_start_at_utc_calendar_boundaries() {
        let t = at("2026-11-26T15:30:00Z"); // a Thursday
        assert_eq!(Period::Daily.start_of(t), at("2026-11-26T00:00:00Z"));
        assert_eq!(Period::Weekly.start_of(t), at("2026-11-23T00:00:00Z"));
        assert_eq!(Period::Monthly.start_of(t), at("2026-11-01T00:00:00Z"));
        assert_eq!(
            Period::Monthly.end_of(at("2026-12-01T00:00:00Z")),
            at("2027-01-01T00:00:00Z")
        );
        assert_eq!(
            Period::Weekly.end_of(at("2026-11-23T00:00:00Z")),
            at("2026-11-30T00:00:00Z")
        );
        // A Monday starts its own week.
        let monday = at("2026-11-30T00:00:00Z");
        assert_eq!(Period::Weekly.start_of(monday), monday);
    }

    #[test]
    fn spend_resets_when_its_period_ends() {
        let t = at("2026-11-30T23:59:00Z");
        let mut s = PeriodSpend::at(t);
        s.add(t, Money::from_f64(2.0).unwrap());
        assert_eq!(s.spent(Period::Daily, t), Money::from_f64(2.0).unwrap());
        let next = at("2026-12-01T00:00:01Z");
        assert_eq!(s.spent(Period::Daily, next), Money::ZERO);
        assert_eq!(s.spent(Period::Monthly, next), Money::ZERO);
        // Weeks start on Mondays: 2026-11-30 is one, so the week goes on.
        assert_eq!(s.spent(Period::Weekly, next), Money::from_f64(2.0).unwrap());
        s.roll(next);
        // A cost incurred before the roll counts in no new period.
        s.add(t, Money::from_f64(1.0).unwrap());
        assert_eq!(s.spent(Period::Daily, next), Money::ZERO);
        assert_eq!(s.spent(Period::Weekly, next), Money::from_f64(3.0).unwrap());
    }
}
