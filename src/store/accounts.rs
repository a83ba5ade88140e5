//! Balances, reservations and rate windows in the store: the calls behind `access/accounts.rs` when there
//! is a `[store]`. Admission is one script (`lua/admit.lua`, the same rules as the in-process accounts), the
//! end of a request another (`lua/settle.lua`): two round trips for a key with limits, a credit or a budget,
//! none for a key without. Every record also reaches the store through the shipper (`ship.rs`); a request
//! settled at its end leaves a marker so its record does not count twice, and one whose settlement failed
//! (the store did not answer) is settled by its record.
//!
//! A reservation carries a lease. This instance renews the leases of the reservations it holds until they
//! are settled (`renew_leases`, from the store thread); the reservations of an instance that was killed stop
//! being renewed, and the next admission of their key gives their credit and slot back once the lease has
//! run out (`[store] lease_secs`, 30 s by default).

use std::collections::HashMap;
use std::time::Duration;

use super::{lock, Store, StoreError};
use crate::access::budget::Period;
use crate::access::standing::{Limits, Standing, Verdict};
use crate::money::Money;

/// A key's balance as the store has it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Balance {
    pub spent: Money,
    /// Reserved by requests in flight on every instance.
    pub reserved: Money,
    pub in_flight: u64,
    /// The newest `ts` of the key's shipped records.
    pub last_used: Option<String>,
}

/// The field of a budget period's spend in `per:K`: `d`, `w` or `m` and the period's start.
pub fn period_field(period: Period, now: u64) -> String {
    let letter = match period {
        Period::Daily => 'd',
        Period::Weekly => 'w',
        Period::Monthly => 'm',
    };
    format!("{letter}{}", period.start_of(now))
}

fn units(m: Money) -> String {
    m.units().to_string()
}

fn money(s: &str) -> Money {
    Money::from_units(s.parse::<i128>().unwrap_or(0))
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(String::new, |n| n.to_string())
}

/// The keys of one key name's account.
pub(super) struct AccountKeys {
    pub acct: String,
    pub res: String,
    pub lease: String,
    pub rpm: String,
    pub tpm: String,
    pub tpmv: String,
    pub per: String,
}

impl Store {
    pub(super) fn account_keys(&self, key: &str) -> AccountKeys {
        AccountKeys {
            acct: self.k(&format!("acct:{key}")),
            res: self.k(&format!("res:{key}")),
            lease: self.k(&format!("lease:{key}")),
            rpm: self.k(&format!("rpm:{key}")),
            tpm: self.k(&format!("tpm:{key}")),
            tpmv: self.k(&format!("tpmv:{key}")),
            per: self.k(&format!("per:{key}")),
        }
    }

    /// Admission of request `id` of key `key`: its standing, with the reservation made when admitted.
    pub fn admit(
        &self,
        key: &str,
        id: &str,
        cost: Money,
        limits: &Limits,
    ) -> Result<Standing, StoreError> {
        let k = self.account_keys(key);
        let (budget, field) = match limits.budget {
            Some(b) => (units(b.amount), period_field(b.period, limits.now)),
            None => (String::new(), String::new()),
        };
        let args = [
            id.to_string(),
            units(cost.max(Money::ZERO)),
            limits.tokens.to_string(),
            limits
                .credit
                .map_or_else(String::new, |c| units(c.max(Money::ZERO))),
            opt(limits.rpm),
            opt(limits.tpm),
            opt(limits.max_concurrent),
            self.settings.lease.as_millis().to_string(),
            budget,
            field,
        ];
        let keys = [k.acct, k.res, k.lease, k.rpm, k.tpm, k.tpmv, k.per];
        let (
            verdict,
            rpm_used,
            rpm_reset,
            tpm_used,
            tpm_reset,
            tpm_wait,
            _in_flight,
            spent,
            _reserved,
            pspent,
        ): (i64, u64, i64, u64, i64, i64, i64, String, String, String) =
            self.run(|s| &s.admit, &keys, &args)?;
        let verdict = Verdict::from_code(verdict);
        if verdict == Verdict::Admitted {
            lock(&self.leases).insert(id.to_string(), key.to_string());
        }
        let ms = |v: i64| Duration::from_millis(v.max(0) as u64);
        Ok(Standing {
            verdict,
            rpm_used,
            rpm_reset: ms(rpm_reset),
            tpm_used,
            tpm_reset: ms(tpm_reset),
            tpm_wait: ms(tpm_wait),
            spent: money(&spent),
            period_spent: money(&pspent),
        })
    }

    /// Settles request `id`: its actual cost counts now (in the budget periods of `admitted_at`, Unix
    /// seconds), its reservation and slot are given back, its tpm tokens become `tokens`. Its record, when
    /// shipped, does not count the cost again. When this fails the reservation stays (and is renewed) until
    /// the record is shipped, which settles it then.
    pub fn settle(
        &self,
        key: &str,
        id: &str,
        cost: Money,
        tokens: u64,
        admitted_at: u64,
    ) -> Result<(), StoreError> {
        let k = self.account_keys(key);
        let field = |p| period_field(p, admitted_at);
        let _: i64 = self.run(
            |s| &s.settle,
            &[k.acct, k.res, k.lease, k.tpmv, k.per],
            &[
                id.to_string(),
                units(cost.max(Money::ZERO)),
                tokens.to_string(),
                field(Period::Daily),
                field(Period::Weekly),
                field(Period::Monthly),
            ],
        )?;
        lock(&self.leases).remove(id);
        Ok(())
    }

    /// Gives back request `id`'s whole reservation: the request ends without a usage record.
    pub fn release(&self, key: &str, id: &str) -> Result<(), StoreError> {
        lock(&self.leases).remove(id);
        let k = self.account_keys(key);
        let _: i64 = self.run(
            |s| &s.release,
            &[k.acct, k.res, k.lease, k.tpmv],
            &[id.to_string()],
        )?;
        Ok(())
    }

    /// The reservation of request `id` was settled by its shipped record: no more renewing.
    pub(super) fn shipped(&self, id: &str) {
        lock(&self.leases).remove(id);
    }

    /// Renews the leases of every reservation this instance holds (the store thread calls this well within
    /// a lease). Returns how many.
    pub fn renew_leases(&self) -> Result<usize, StoreError> {
        let held: Vec<(String, String)> = lock(&self.leases)
            .iter()
            .map(|(id, key)| (id.clone(), key.clone()))
            .collect();
        for chunk in held.chunks(500) {
            let keys: Vec<String> = chunk
                .iter()
                .map(|(_, key)| self.k(&format!("lease:{key}")))
                .collect();
            let mut args = vec![self.settings.lease.as_millis().to_string()];
            args.extend(chunk.iter().map(|(id, _)| id.clone()));
            let _: i64 = self.run(|s| &s.renew, &keys, &args)?;
        }
        Ok(held.len())
    }

    /// Reservations this instance holds in the store.
    pub fn leases_held(&self) -> usize {
        lock(&self.leases).len()
    }

    /// A key's balance.
    pub fn balance(&self, key: &str) -> Result<Balance, StoreError> {
        let acct = self.k(&format!("acct:{key}"));
        let v: Vec<Option<String>> = self.with(|con| {
            redis::cmd("HMGET")
                .arg(&acct)
                .arg("spent")
                .arg("reserved")
                .arg("inflight")
                .arg("last_used")
                .query(con)
        })?;
        let get = |i: usize| v.get(i).cloned().flatten();
        Ok(Balance {
            spent: get(0).map_or(Money::ZERO, |s| money(&s)),
            reserved: get(1).map_or(Money::ZERO, |s| money(&s)),
            in_flight: get(2).and_then(|s| s.parse().ok()).unwrap_or(0),
            last_used: get(3),
        })
    }

    /// The balances of many keys in one round trip.
    pub fn balances(&self, keys: &[String]) -> Result<HashMap<String, Balance>, StoreError> {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("HMGET")
                .arg(self.k(&format!("acct:{key}")))
                .arg("spent")
                .arg("reserved")
                .arg("inflight")
                .arg("last_used");
        }
        let rows: Vec<Vec<Option<String>>> = self.with(|con| pipe.query(con))?;
        Ok(keys
            .iter()
            .zip(rows)
            .map(|(key, v)| {
                let get = |i: usize| v.get(i).cloned().flatten();
                (
                    key.clone(),
                    Balance {
                        spent: get(0).map_or(Money::ZERO, |s| money(&s)),
                        reserved: get(1).map_or(Money::ZERO, |s| money(&s)),
                        in_flight: get(2).and_then(|s| s.parse().ok()).unwrap_or(0),
                        last_used: get(3),
                    },
                )
            })
            .collect())
    }

    /// What a key spent in the `period` holding `now`.
    pub fn period_spent(&self, key: &str, period: Period, now: u64) -> Result<Money, StoreError> {
        let per = self.k(&format!("per:{key}"));
        let field = period_field(period, now);
        let v: Option<String> =
            self.with(|con| redis::cmd("HGET").arg(&per).arg(&field).query(con))?;
        Ok(v.map_or(Money::ZERO, |s| money(&s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_fields_name_the_period_start() {
        let t = crate::util::parse_rfc3339("2026-11-25T13:00:00Z").unwrap();
        assert_eq!(
            period_field(Period::Daily, t),
            format!(
                "d{}",
                crate::util::parse_rfc3339("2026-11-25T00:00:00Z").unwrap()
            )
        );
        assert_eq!(
            period_field(Period::Weekly, t),
            format!(
                "w{}",
                crate::util::parse_rfc3339("2026-11-23T00:00:00Z").unwrap()
            )
        );
        assert_eq!(
            period_field(Period::Monthly, t),
            format!(
                "m{}",
                crate::util::parse_rfc3339("2026-11-01T00:00:00Z").unwrap()
            )
        );
    }
}
