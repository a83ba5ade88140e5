//! Balances, reservations and rate windows in the store: the calls behind `access/accounts.rs` when there
//! is a `[store]`. Admission is one script (`lua/admit.lua`, the same rules as the in-process accounts); the
//! end of a request (`lua/settle_many.lua`) is not waited for (`settle.rs`): it is carried by the next
//! admission of its key, inside that same script call, or sent by the settler thread 2 ms later
//! (`lua/settle.lua`, every settlement waiting then in one call). So a key with limits, a credit or a budget costs one script call in one round
//! trip per request, a key without none. Every record also reaches the store through the shipper
//! (`ship.rs`); a request settled at its end leaves a marker so its record does not count twice, and one
//! whose settlement failed (the store did not answer) is settled by its record.
//!
//! A reservation carries a lease. This instance renews the leases of the reservations it holds until they
//! are settled (`renew_leases`, from the store thread); the reservations of an instance that was killed stop
//! being renewed, and an admission of their key (looking at most once a second, 1,000 at a time) gives their
//! credit and slot back once the lease has run out (`[store] lease_secs`, 30 s by default), leaving the
//! marker 'd' for one more lease: an instance that was only cut off from the store holds them again at its
//! next renewal (`renew_leases`).

use std::collections::HashMap;

use super::answer::{money, ScriptReply};
use super::args::{period_field, script_tokens, units};
use super::settle::Carried;
use super::{batch, Store, StoreError};
use crate::budget::{Budget, Period};
use crate::money::Money;
use crate::standing::{Limits, Standing, Verdict};
use crate::util::lock;

/// An admission waiting for its round trip (`Store::admit`, `batch.rs`): its key, what it shares with the
/// admissions of the same key asked with it (see `lua/admit.lua`: ARGV 2 to 13), its own id, cost and tokens,
/// and the key's waiting settlements it carries.
pub(super) struct AdmitCall {
    pub(super) key: String,
    pub(super) shared: [String; 12],
    pub(super) own: [String; 3],
    pub(super) settles: Carried,
}

/// A script call and the settlements it carries.
pub(super) type Call = (redis::Cmd, Carried);

/// A reservation this instance holds in the store, as admission made it: renewed until its request ends,
/// and made again with these if another instance's look for dead leases gave it back meanwhile.
#[derive(Clone)]
pub(super) struct Held {
    key: String,
    /// The worst case, in picocredits as sent.
    cost: String,
    tokens: u64,
    /// It holds a concurrency slot.
    slot: bool,
}

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

/// What the admission script answered: the key's standing, and the credit and budget the store holds for it
/// (the ones it was judged by).
#[derive(Debug, Clone)]
pub struct AdmitReply {
    pub standing: Standing,
    pub credit: Option<Money>,
    pub budget: Option<Budget>,
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(String::new, |n| n.to_string())
}

/// The keys of one key name's account.
pub(super) struct AccountKeys {
    pub acct: String,
    pub res: String,
    pub lease: String,
    /// The rate window: the last minute's admissions (zset) and their tokens (hash).
    pub win: String,
    pub winv: String,
    pub per: String,
}

impl Store {
    pub(super) fn account_keys(&self, key: &str) -> AccountKeys {
        AccountKeys {
            acct: self.k(&format!("acct:{key}")),
            res: self.k(&format!("res:{key}")),
            lease: self.k(&format!("lease:{key}")),
            win: self.k(&format!("win:{key}")),
            winv: self.k(&format!("winv:{key}")),
            per: self.k(&format!("per:{key}")),
        }
    }

    /// Admission of request `id` of key `key`: its standing, with the reservation made when admitted, and
    /// the credit and budget it was judged by. The key's credit, own budget, expiry and state are the
    /// store's (its terms, kept with its record): the amounts in `limits.credit` and `limits.budget` are not
    /// sent, only whether the request is held to a balance at all (either is set). Its group's rate limits
    /// come from `limits`, and `group_budget` applies when the key has no budget of its own.
    pub fn admit(
        &self,
        key: &str,
        id: &str,
        cost: Money,
        limits: &Limits,
        group_budget: Option<Budget>,
    ) -> Result<AdmitReply, StoreError> {
        let (budget, letter) = match group_budget {
            Some(b) => (units(b.amount), b.period.letter().to_string()),
            None => (String::new(), String::new()),
        };
        let field = |p| period_field(p, limits.now);
        let ask = AdmitCall {
            key: key.to_string(),
            shared: [
                opt(limits.rpm),
                opt(limits.tpm),
                opt(limits.max_concurrent),
                self.settings.lease.as_millis().to_string(),
                budget,
                letter,
                limits.now.to_string(),
                key.to_string(),
                field(Period::Daily),
                field(Period::Weekly),
                field(Period::Monthly),
                if limits.credit.is_some() || limits.budget.is_some() {
                    "1".to_string()
                } else {
                    String::new()
                },
            ],
            own: [
                id.to_string(),
                units(cost.max(Money::ZERO)),
                script_tokens(limits.tokens).to_string(),
            ],
            // The key's settlements still waiting ride in the same script call, applied first: a client's
            // next request is judged after its last one ended.
            settles: self.take_pending(|p| p.key == key),
        };
        // Admissions of workers asking at the same moment share one round trip, and those of one key one
        // script call (`batch.rs`); a worker waits no longer for another's round trip than for its own.
        let reply = self.admissions.submit(
            ask,
            self.settings.timeout,
            |asks| self.admit_together(asks),
            |failed| match failed {
                batch::Failed::TimedOut(ask) => {
                    // Its settlements were not sent: dropped, they wait for the next call.
                    drop(ask);
                    Err(StoreError {
                        unavailable: true,
                        message:
                            "the store did not answer in time (the admission waited for another's \
                                  round trip)"
                                .into(),
                    })
                }
                batch::Failed::Broken => Err(StoreError {
                    unavailable: false,
                    message: "the admission's batch failed".into(),
                }),
            },
        )?;
        let a = ScriptReply::read(reply, 13, "admission")?;
        let verdict = Verdict::from_code(a.int(0)?);
        let standing = Standing {
            verdict,
            rpm_used: a.count(1)?,
            rpm_reset: a.ms(2)?,
            tpm_used: a.count(3)?,
            tpm_reset: a.ms(4)?,
            tpm_wait: a.ms(5)?,
            spent: a.money(7)?,
            period_spent: a.money(9)?,
        };
        // Renewed from here until the request ends (only once the whole answer was read: a reservation
        // with no `Reservation` to end it would be renewed for ever).
        if verdict == Verdict::Admitted {
            let held = Held {
                key: key.to_string(),
                cost: units(cost.max(Money::ZERO)),
                tokens: script_tokens(limits.tokens),
                slot: limits.max_concurrent.is_some(),
            };
            lock(&self.leases).insert(id.to_string(), held);
        }
        Ok(AdmitReply {
            standing,
            credit: a.credit(10)?,
            budget: a.budget(11, 12)?,
        })
    }

    /// Gives back request `id`'s whole reservation: the request ends without a usage record.
    pub fn release(&self, key: &str, id: &str) -> Result<(), StoreError> {
        lock(&self.leases).remove(id);
        let k = self.account_keys(key);
        let _: i64 = self.run(
            |s| &s.release,
            &[k.acct, k.res, k.lease, k.winv],
            &[id.to_string()],
        )?;
        Ok(())
    }

    /// The reservation of request `id` was settled by its shipped record: no more renewing.
    pub(super) fn shipped(&self, id: &str) {
        lock(&self.leases).remove(id);
    }

    /// Renews the leases of every reservation this instance holds (the store thread calls this well within
    /// `lease_secs`). A reservation another instance's look for dead leases gave back while this one could
    /// not reach the store (its entry is the marker 'd') belongs to a request that still runs here, so it is
    /// held again as admission held it. Only a 'd' is: the request's record, shipped, or its release removes
    /// it, so a request whose record counted its cost is never held again (its settlement would count the
    /// cost a second time), whenever the calls reach Redis. Shipping also waits meanwhile, and a shipped
    /// record's request leaves `leases` in the same step (`ship_batch`). Returns how many are held.
    pub fn renew_leases(&self) -> Result<usize, StoreError> {
        let _shipping = lock(&self.shipping);
        let mut held: Vec<(String, String)> = lock(&self.leases)
            .iter()
            .map(|(id, h)| (id.clone(), h.key.clone()))
            .collect();
        // And the allotments (`allot/`): one given back is not held again but replaced.
        let requests = held.len();
        held.extend(self.allotments_held());
        let mut gone = Vec::new();
        for chunk in held.chunks(500) {
            let keys: Vec<String> = chunk
                .iter()
                .flat_map(|(_, key)| {
                    [
                        self.k(&format!("lease:{key}")),
                        self.k(&format!("res:{key}")),
                    ]
                })
                .collect();
            let mut args = vec![self.settings.lease.as_millis().to_string()];
            args.extend(chunk.iter().map(|(id, _)| id.clone()));
            let missing: Vec<usize> = self.run(|s| &s.renew, &keys, &args)?;
            gone.extend(
                missing
                    .into_iter()
                    .filter_map(|i| chunk.get(i.wrapping_sub(1)).map(|(id, _)| id.clone())),
            );
        }
        let allots: Vec<String> = held[requests..].iter().map(|(id, _)| id.clone()).collect();
        let (allots_gone, gone): (Vec<String>, Vec<String>) =
            gone.into_iter().partition(|id| allots.contains(id));
        if !allots_gone.is_empty() {
            self.allotments_gone(&allots_gone);
        }
        if !gone.is_empty() {
            self.hold_again(&gone)?;
        }
        Ok(held.len())
    }

    /// Makes the reservations `ids` again (`lua/rehold.lua`), those still held here.
    fn hold_again(&self, ids: &[String]) -> Result<(), StoreError> {
        let items: Vec<(String, Held)> = {
            let leases = lock(&self.leases);
            ids.iter()
                .filter_map(|id| leases.get(id).map(|h| (id.clone(), h.clone())))
                .collect()
        };
        let mut again = 0;
        for chunk in items.chunks(300) {
            let mut keys = Vec::with_capacity(chunk.len() * 3);
            let mut args = vec![self.settings.lease.as_millis().to_string()];
            for (id, h) in chunk {
                let k = self.account_keys(&h.key);
                keys.extend([k.acct, k.res, k.lease]);
                args.extend([
                    id.clone(),
                    h.cost.clone(),
                    h.tokens.to_string(),
                    if h.slot { "1" } else { "0" }.to_string(),
                ]);
            }
            // A request that ended before this call reached Redis left no 'd' to hold again: its release
            // removed it, its settlement made it 's'.
            let n: i64 = self.run(|s| &s.rehold, &keys, &args)?;
            again += n;
        }
        if again > 0 {
            log::warn!(
                "store: {again} reservation(s) of requests still running here had been given back by another \
                 instance (their lease ran out while the store was out of reach); they are held again"
            );
        }
        Ok(())
    }

    /// Reservations this instance holds in the store.
    pub fn leases_held(&self) -> usize {
        lock(&self.leases).len()
    }

    /// A key's balance.
    pub fn balance(&self, key: &str) -> Result<Balance, StoreError> {
        let mut all = self.balances(&[key.to_string()])?;
        Ok(all.remove(key).unwrap_or_default())
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
