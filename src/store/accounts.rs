//! Balances, reservations and rate windows in the store: the calls behind `access/accounts.rs` when there
//! is a `[store]`. Admission is one script (`lua/admit.lua`, the same rules as the in-process accounts); the
//! end of a request (`lua/settle_many.lua`) is not waited for: it is carried by the next admission of its key,
//! inside that same script call, or sent by the settler thread 2 ms later (`lua/settle.lua`, every due
//! settlement in one call). So a key with limits, a credit or a budget costs one script call in one round
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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::answer::{money, Answer};
use super::{batch, lock, Store, StoreError};
use crate::budget::{Budget, Period};
use crate::money::Money;
use crate::standing::{Limits, Standing, Verdict};

/// How long a settlement may wait for the next admission of its key before the settler thread sends it.
pub const SETTLE_AFTER: Duration = Duration::from_millis(2);

/// Settlements sent in one script call by the settler thread at most.
const SETTLE_BATCH: usize = 200;

/// How long the markers of drawn requests that may go wait for a settler's call, when no settlement makes
/// one sooner.
const FORGET_AFTER: Duration = Duration::from_millis(50);

/// An admission waiting for its round trip (`Store::admit`, `batch.rs`): its key, what it shares with the
/// admissions of the same key asked with it (see `lua/admit.lua`: ARGV 2 to 13), its own id, cost and tokens,
/// and the key's waiting settlements it carries.
pub(super) struct Ask {
    pub(super) key: String,
    pub(super) shared: [String; 12],
    pub(super) own: [String; 3],
    pub(super) settles: Carried,
}

/// A script call and the settlements it carries.
pub(super) type Call = (redis::Cmd, Carried);

/// The settlements waiting to be sent: the store's queue, which every carrier of some of them can put them
/// back in.
pub(super) type Queue = Arc<Mutex<Vec<Pending>>>;

/// Settlements taken from the queue to ride in a script call. Dropped before `sent` (the call failed, its
/// worker gave up, or a panic unwound it on the way) they go back in the queue, so that none is lost: a
/// settlement that did reach the store finds itself done when sent again.
pub(super) struct Carried {
    items: Vec<Pending>,
    queue: Queue,
}

impl Carried {
    pub(super) fn new(items: Vec<Pending>, queue: &Queue) -> Self {
        Carried {
            items,
            queue: Arc::clone(queue),
        }
    }

    pub(super) fn items(&self) -> &[Pending] {
        &self.items
    }

    /// Moves `other`'s settlements into this one (both of one queue).
    pub(super) fn append(&mut self, other: &mut Carried) {
        self.items.append(&mut other.items);
    }

    /// The store has them: they are not put back.
    pub(super) fn sent(self) -> Vec<Pending> {
        self.into_items()
    }

    /// Out of the guard: the caller answers for them.
    pub(super) fn into_items(mut self) -> Vec<Pending> {
        std::mem::take(&mut self.items)
    }
}

impl Drop for Carried {
    fn drop(&mut self) {
        if !self.items.is_empty() {
            lock(&self.queue).append(&mut self.items);
        }
    }
}

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

/// A settlement not yet sent.
pub(super) struct Pending {
    pub(super) key: String,
    pub(super) id: String,
    pub(super) cost: Money,
    pub(super) tokens: u64,
    pub(super) admitted_at: u64,
    pub(super) since: Instant,
    /// The allotment the request was drawn from (empty: it was admitted with a reservation of its own).
    pub(super) allot: String,
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

/// The field of a budget period's spend in `per:K`: `d`, `w` or `m` and the period's start.
pub fn period_field(period: Period, now: u64) -> String {
    format!("{}{}", period.letter(), period.start_of(now))
}

/// What the admission script answered: the key's standing, and the credit and budget the store holds for it
/// (the ones it was judged by).
#[derive(Debug, Clone)]
pub struct Admission {
    pub standing: Standing,
    pub credit: Option<Money>,
    pub budget: Option<Budget>,
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
    ) -> Result<Admission, StoreError> {
        let (budget, letter) = match group_budget {
            Some(b) => (units(b.amount), b.period.letter().to_string()),
            None => (String::new(), String::new()),
        };
        let field = |p| period_field(p, limits.now);
        let ask = Ask {
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
        let a = Answer::read(reply, 13, "admission")?;
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
        Ok(Admission {
            standing,
            credit: a.credit(10)?,
            budget: a.budget(11, 12)?,
        })
    }

    /// Settles request `id`: its actual cost counts (in the budget periods of `admitted_at`, Unix seconds),
    /// its reservation and slot are given back, its tpm tokens become `tokens`; its record, when shipped, does
    /// not count the cost again. The settlement is not waited for: it goes with the next admission of the
    /// same key on this instance (inside its script call, applied before it, so a client's next request is
    /// judged after its last one ended), or with the settler thread once it is `SETTLE_AFTER` old. Until it is
    /// sent, the reservation stays held and renewed; if it never is (a crash), the request's record settles
    /// it when shipped.
    pub fn settle(&self, key: &str, id: &str, cost: Money, tokens: u64, admitted_at: u64) {
        self.queue_settlement(Pending {
            key: key.to_string(),
            id: id.to_string(),
            cost,
            tokens,
            admitted_at,
            since: Instant::now(),
            allot: String::new(),
        });
    }

    /// Queues a settlement (see [`Store::settle`]; a drawn request's: `allot/`).
    pub(super) fn queue_settlement(&self, p: Pending) {
        lock(&self.pending).push(p);
        let _ = self.settle_wake.0.try_send(());
    }

    /// Takes the waiting settlements `pick` chooses.
    fn take_pending(&self, pick: impl Fn(&Pending) -> bool) -> Carried {
        let mut pending = lock(&self.pending);
        if pending.is_empty() {
            return Carried::new(Vec::new(), &self.pending);
        }
        let (taken, kept): (Vec<Pending>, Vec<Pending>) = pending.drain(..).partition(|p| pick(p));
        *pending = kept;
        Carried::new(taken, &self.pending)
    }

    /// What settlements of one key send (see `lua/settle_many.lua`): in groups of those that share the
    /// periods of their admission and their allotment, each group its count, the period fields and the
    /// allotment, then each settlement's id, cost and tokens.
    pub(super) fn settle_groups<'a>(items: impl Iterator<Item = &'a Pending>) -> Vec<String> {
        // (day, week and month starts, allotment) -> the group's settlements
        let mut groups: Vec<([u64; 3], &str, Vec<&Pending>)> = Vec::new();
        for p in items {
            let starts = [Period::Daily, Period::Weekly, Period::Monthly]
                .map(|per| per.start_of(p.admitted_at));
            match groups
                .iter_mut()
                .find(|(s, a, _)| *s == starts && *a == p.allot)
            {
                Some((_, _, g)) => g.push(p),
                None => groups.push((starts, &p.allot, vec![p])),
            }
        }
        let mut args = Vec::new();
        for (starts, allot, g) in groups {
            args.push(g.len().to_string());
            for (per, start) in [Period::Daily, Period::Weekly, Period::Monthly]
                .into_iter()
                .zip(starts)
            {
                args.push(format!("{}{start}", per.letter()));
            }
            args.push(allot.to_string());
            for p in g {
                args.push(p.id.clone());
                args.push(units(p.cost.max(Money::ZERO)));
                args.push(script_tokens(p.tokens).to_string());
            }
        }
        args
    }

    /// Once the oldest settlement has waited `SETTLE_AFTER` (or `all`), sends every one waiting: those not
    /// due yet go in the same calls rather than in calls of their own a moment later (a busy key drawn from
    /// an allotment makes no admission call for its settlements to ride in). The settler thread calls this.
    /// Returns how long until the oldest of those left is due (None: none left).
    pub fn settle_due(&self, all: bool) -> Result<Option<Duration>, StoreError> {
        let forgets_due = {
            let mut f = lock(&self.forget_since);
            match *f {
                Some(t) if all || t.elapsed() >= FORGET_AFTER => {
                    *f = None;
                    true
                }
                _ => false,
            }
        };
        let due_now = all
            || forgets_due
            || lock(&self.pending)
                .iter()
                .any(|p| p.since.elapsed() >= SETTLE_AFTER);
        let mut due = if due_now {
            self.take_pending(|_| true).into_items()
        } else {
            Vec::new()
        };
        let mut forgets = if due_now {
            std::mem::take(&mut *lock(&self.forgets))
        } else {
            Vec::new()
        };
        while !due.is_empty() || !forgets.is_empty() {
            let rest = due.split_off(due.len().min(SETTLE_BATCH));
            let later = forgets.split_off(forgets.len().min(4 * SETTLE_BATCH));
            // Those not sent yet go back if this call fails (or unwinds).
            let rest = Carried::new(rest, &self.pending);
            let call = self.settle_call(Carried::new(due, &self.pending), &forgets);
            if let Some(Err(e)) = self.send(vec![call]).pop() {
                self.forget_later(forgets.into_iter().chain(later));
                return Err(e);
            }
            due = rest.into_items();
            forgets = later;
        }
        let forget_wait =
            lock(&self.forget_since).map(|t| FORGET_AFTER.saturating_sub(t.elapsed()));
        Ok(lock(&self.pending)
            .iter()
            .map(|p| SETTLE_AFTER.saturating_sub(p.since.elapsed()))
            .chain(forget_wait)
            .min())
    }

    /// Drawn requests whose markers may go (`allot/`), sent with the settler's next call.
    pub(super) fn forget_later(&self, ids: impl Iterator<Item = (String, String)>) {
        let mut f = lock(&self.forgets);
        let was = f.len();
        f.extend(ids);
        if f.len() > was {
            lock(&self.forget_since).get_or_insert_with(Instant::now);
            drop(f);
            let _ = self.settle_wake.0.try_send(());
        }
    }

    /// The settler thread: sends due settlements until the store is told to stop (`cluster::leave` sends
    /// what is left).
    pub fn settler(&self) {
        while !self.stopping() {
            match self.settle_due(false) {
                Ok(Some(wait)) => std::thread::sleep(wait.max(Duration::from_micros(200))),
                Ok(None) => {
                    let _ = self.settle_wake.1.recv_timeout(Duration::from_millis(500));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
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

    fn pending(id: &str) -> Pending {
        Pending {
            key: "k".into(),
            id: id.into(),
            cost: Money::ZERO,
            tokens: 0,
            admitted_at: 0,
            since: Instant::now(),
            allot: String::new(),
        }
    }

    /// Settlements on their way to the store are never lost: unsent when a panic unwinds through their
    /// call (or the call fails), they are back in the queue; sent, they are not.
    #[test]
    fn carried_settlements_go_back_to_the_queue_unless_sent() {
        let queue: Queue = Arc::new(Mutex::new(Vec::new()));
        let q = Arc::clone(&queue);
        let unwound = std::panic::catch_unwind(move || {
            let mut carried = Carried::new(vec![pending("a")], &q);
            carried.append(&mut Carried::new(vec![pending("b")], &q));
            panic!(
                "a bug between taking the settlements and sending them: {}",
                carried.items().len()
            );
        });
        assert!(unwound.is_err());
        let ids: Vec<String> = lock(&queue).iter().map(|p| p.id.clone()).collect();
        assert_eq!(ids, ["a", "b"]);
        let items: Vec<Pending> = lock(&queue).drain(..).collect();
        let sent = Carried::new(items, &queue).sent();
        assert_eq!(sent.len(), 2);
        assert!(lock(&queue).is_empty());
    }

    /// Settlements of one key go in groups that share their admission's periods and their allotment.
    #[test]
    fn settlements_go_in_groups_of_the_same_periods_and_allotment() {
        let t = crate::util::parse_rfc3339("2026-11-25T13:00:00Z").unwrap();
        let at = |id: &str, admitted_at: u64, allot: &str| Pending {
            admitted_at,
            allot: allot.into(),
            cost: Money::from_units(5),
            ..pending(id)
        };
        let items = [
            at("a", t, ""),
            at("b", t + 60, "x"),
            at("c", t + 7200, ""),
            at("d", t + 86_400, ""),
        ];
        let args = Store::settle_groups(items.iter());
        let day = |s: u64| period_field(Period::Daily, s);
        let (week, month) = (
            period_field(Period::Weekly, t),
            period_field(Period::Monthly, t),
        );
        let group = |n: &str, d: String, allot: &str| {
            vec![
                n.to_string(),
                d,
                week.clone(),
                month.clone(),
                allot.to_string(),
            ]
        };
        let one = |id: &str| vec![id.to_string(), units(Money::from_units(5)), "0".to_string()];
        let want: Vec<String> = [
            group("2", day(t), ""),
            one("a"),
            one("c"),
            group("1", day(t), "x"),
            one("b"),
            group("1", day(t + 86_400), ""),
            one("d"),
        ]
        .concat();
        assert_eq!(args, want);
    }

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
