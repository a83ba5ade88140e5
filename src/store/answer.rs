//! A script's answer read by position: the counts, amounts, credit and budget the account scripts
//! (`lua/admit.lua`, `lua/allot.lua`) answer with, an amount as decimal text ('' for none).

use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::StoreError;
use crate::budget::{Budget, Period};
use crate::money::Money;

/// A script's answer: its values, read by position (an amount as decimal text, '' for none).
pub(super) struct ScriptReply {
    values: Vec<Value>,
    script: &'static str,
}

impl ScriptReply {
    /// `reply` as `n` values of script `script` (named in errors).
    pub(super) fn read(
        reply: Value,
        n: usize,
        script: &'static str,
    ) -> Result<ScriptReply, StoreError> {
        let a = ScriptReply {
            values: Vec::new(),
            script,
        };
        let values: Vec<Value> = FromRedisValue::from_redis_value(reply).map_err(|e| a.bad(&e))?;
        if values.len() != n {
            return Err(a.bad(&format!("{} values", values.len())));
        }
        Ok(ScriptReply { values, script })
    }

    fn bad(&self, e: &dyn std::fmt::Display) -> StoreError {
        StoreError {
            unavailable: false,
            message: format!("the {} script's answer: {e}", self.script),
        }
    }

    pub(super) fn int(&self, i: usize) -> Result<i64, StoreError> {
        i64::from_redis_value(self.values[i].clone()).map_err(|e| self.bad(&e))
    }

    /// A count (never below zero).
    pub(super) fn count(&self, i: usize) -> Result<u64, StoreError> {
        Ok(self.int(i)?.max(0) as u64)
    }

    /// Milliseconds.
    pub(super) fn ms(&self, i: usize) -> Result<Duration, StoreError> {
        Ok(Duration::from_millis(self.count(i)?))
    }

    fn text(&self, i: usize) -> Result<String, StoreError> {
        String::from_redis_value(self.values[i].clone()).map_err(|e| self.bad(&e))
    }

    pub(super) fn money(&self, i: usize) -> Result<Money, StoreError> {
        Ok(money(&self.text(i)?))
    }

    /// A credit ('' none).
    pub(super) fn credit(&self, i: usize) -> Result<Option<Money>, StoreError> {
        let c = self.text(i)?;
        Ok((!c.is_empty()).then(|| money(&c)))
    }

    /// A budget: its amount ('' none) and its period's letter.
    pub(super) fn budget(
        &self,
        amount: usize,
        period: usize,
    ) -> Result<Option<Budget>, StoreError> {
        let amount = self.text(amount)?;
        Ok(Period::from_letter(&self.text(period)?)
            .filter(|_| !amount.is_empty())
            .map(|period| Budget {
                amount: money(&amount),
                period,
            }))
    }
}

/// An amount as the scripts write it (picocredits in decimal; anything else is zero).
pub(super) fn money(s: &str) -> Money {
    Money::from_units(s.parse::<i128>().unwrap_or(0))
}
