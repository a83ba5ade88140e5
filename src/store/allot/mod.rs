//! Allotments: a busy key's requests admitted by this instance without a round trip each. One call
//! (`lua/allot.lua`) takes a slice of the key's credit (and budget) and of its concurrency slots, held in
//! the store under one reservation entry with a lease like a request's; the instance then admits the key's
//! requests from the slice by itself for `[store] allot_ms` (50 ms by default), and asks again (giving back
//! what it did not use, taking a new slice sized to what it drew) in the same call when that ends or the
//! slice runs short. So the store's checks hold for the cluster as they do request by request (the slices
//! of all instances are within the key's credit, budget and slots, so the overspend bound is the same), and
//! what another instance changes in the store (a credit cut, a revocation, an expiry) holds here within
//! `allot_ms`.
//!
//! Which keys: those with a credit, a budget, a concurrency limit or rate limits, once they are busy here
//! (8 admissions within 100 ms), with `max_concurrent` at 16 or more if they have one. A slice is at most
//! half of what is left (of the credit, the budget, the free slots, the requests and tokens the rate
//! window still has room for) and at least four times what the request asking needs: a key close to any
//! of its limits is judged by the store request by request, exactly as before. A slice's requests and
//! tokens are entries in the key's rate window, stamped with the end of the slice's time, so that each
//! counts for at least a minute after its request's admission, as an admission's own entry would; those
//! not drawn go when the slice ends, and the tokens become those of the requests drawn (their real ones
//! once they end).
//!
//! The money: the entry holds what is not drawn yet, the worst cases of the drawn requests still running,
//! and the costs of the ended ones whose settlements have not reached the store yet. A drawn request's end
//! gives its unused worst case back to the slice here, and settles it as any request is settled (with the
//! settler thread, within `SETTLE_AFTER`; `lua/settle_many.lua`, told the allotment): its cost counts into
//! the spend and leaves the entry, and its record, when shipped, counts nothing. So the store counts a drawn
//! request's cost as soon as an admitted one's, whatever the ledger and the shipper do (a full disk, a
//! shipper behind, a crash before the last records were synced), and an allotment ends once its requests
//! have ended and are settled. A record shipped before its request's settlement (`lua/ship.lua`, told the
//! allotment of each record drawn from one) counts the cost and takes it out of the entry instead, and the
//! settlement then counts nothing. A slice whose call failed is not used again (its lease gives it back);
//! one given back by another instance's look for dead leases (this one could not renew it) is replaced by a
//! new one, and its requests still running are unheld until they end (their settlements count them).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod drawn;
mod slice;

use drawn::Drawn;
use slice::{Allot, EndedSlice, Grant, SliceKind, BUSY_WITHIN};

use super::accounts::AdmitReply;
use super::answer::ScriptReply;
use super::args::{period_field, units};
use super::settle::Carried;
use super::{Store, StoreError};
use crate::budget::{Budget, Period};
use crate::money::Money;
use crate::standing::Limits;
use crate::util::lock;

/// The smallest `max_concurrent` shared out in slices: below it, every admission asks the store.
const MIN_CONCURRENT: u64 = 16;
/// Worst cases of the asking request a slice is worth at least, and asked for at least.
const MIN_SLICE: u64 = 4;
const FIRST_SLICE: u64 = 16;
const MAX_SLICE: u64 = 4096;

/// This instance's allotments, per key name, and the requests drawn from them that are not settled yet.
#[derive(Default)]
pub(super) struct Allotments {
    keys: Mutex<HashMap<String, Allot>>,
    drawn: Mutex<HashMap<String, Drawn>>,
}

/// What `allot.lua` answered.
struct Reply {
    code: i64,
    money: Money,
    slots: u64,
    /// Requests and tokens taken in the rate window, and the window after the call.
    requests: u64,
    tokens: u64,
    rpm_used: u64,
    reset: Duration,
    tpm_used: u64,
    spent: Money,
    credit: Option<Money>,
    budget: Option<Budget>,
    period_spent: Money,
}

/// What a call gives back and asks for.
struct Ask<'a> {
    key: &'a str,
    id: &'a str,
    /// The store holds the entry already.
    held: bool,
    give: Money,
    give_slots: u64,
    want: Money,
    want_slots: u64,
    least: Money,
    /// The new slice's number, the requests and tokens asked for in the window, the fewest tokens worth
    /// taking; the slice before's window entries to give back, and the slices' tokens now
    /// (`Allot::window_back`).
    grant: u64,
    want_requests: u64,
    want_tokens: u64,
    least_tokens: u64,
    prev: Option<EndedSlice>,
    fixes: Vec<(String, u64)>,
    /// End it: everything it holds goes back, the entry goes.
    end: bool,
    limits: &'a Limits,
    group_budget: Option<Budget>,
}

fn times(m: Money, n: u64) -> Money {
    Money::from_units(m.units().saturating_mul(n as i128))
}

/// What one request draws: its worst case, whether it holds a slot, and the kind of slice that serves it.
struct Need {
    cost: Money,
    /// Its tokens, estimated.
    tokens: u64,
    slot: bool,
    kind: SliceKind,
    /// The time its limits were read at (Unix seconds).
    at: u64,
}

impl Need {
    fn of(cost: Money, limits: &Limits) -> Need {
        Need {
            cost: cost.max(Money::ZERO),
            tokens: super::args::script_tokens(limits.tokens),
            slot: limits.max_concurrent.is_some(),
            kind: SliceKind {
                for_balance: limits.credit.is_some() || limits.budget.is_some(),
                rpm: limits.rpm.is_some(),
                tpm: limits.tpm.is_some(),
            },
            at: limits.now,
        }
    }
}

/// Whether a request the allotment could not serve asks the store for a new slice: not while one is asked
/// for, nor while a refusal or a slice of another kind is in force, nor for a key that is not busy (its
/// requests are asked of the store one by one; this one counts towards its being busy).
fn may_ask(a: &mut Allot, kind: SliceKind, now: Instant) -> bool {
    !(a.asking
        || (a.dry && now < a.until)
        || (a.live && now < a.until && kind != a.kind)
        || (!a.live && !a.busy(now)))
}

/// A call for the next slice, made up under the allotments' lock and sent after it: what the slice in
/// force gives back (all that is left), and how much the next asks for (twice what the last drew in its
/// time, at least).
struct NextSlice {
    id: String,
    /// When the draw that asks for it was made.
    at: Instant,
    /// The store holds the entry already.
    held: bool,
    give: Money,
    give_slots: u64,
    grant: u64,
    requests: u64,
    slots: u64,
    prev: Option<EndedSlice>,
    fixes: Vec<(String, u64)>,
}

impl NextSlice {
    /// The call's arguments (the window entries given back move into it).
    fn ask<'a>(
        &'a mut self,
        key: &'a str,
        need: &Need,
        limits: &'a Limits,
        group_budget: Option<Budget>,
    ) -> Ask<'a> {
        let n = self.requests;
        Ask {
            key,
            id: &self.id,
            held: self.held,
            give: self.give,
            give_slots: self.give_slots,
            want: times(need.cost, n),
            want_slots: self.slots,
            least: times(need.cost, MIN_SLICE),
            grant: self.grant,
            want_requests: n,
            want_tokens: need.tokens.saturating_mul(n),
            least_tokens: need.tokens.saturating_mul(MIN_SLICE),
            prev: self.prev,
            fixes: std::mem::take(&mut self.fixes),
            end: false,
            limits,
            group_budget,
        }
    }
}

/// Starts the call for the allotment's next slice: a new allotment counts nothing of one before it (its
/// call failed, or it was given back); one in force gives back what is left.
fn next_slice(a: &mut Allot, instance: &str, now: Instant) -> NextSlice {
    let held = a.live;
    let requests = (a.draws * 2).clamp(FIRST_SLICE, MAX_SLICE);
    let slots = (a.running * 2).clamp(MIN_SLICE, 256);
    if !held {
        a.id = crate::util::new_id(&format!("allot:{instance}:"));
        a.running = 0;
        a.unsettled = 0;
        a.draws = 0;
        a.grant = 0;
        a.grant_taken = 0;
        a.grant_drawn = 0;
        a.grants.clear();
    }
    let (prev, fixes) = if held {
        a.window_back(now)
    } else {
        (None, Vec::new())
    };
    let (give, give_slots) = if held {
        (a.free, a.slots)
    } else {
        (Money::ZERO, 0)
    };
    let slice = NextSlice {
        id: a.id.clone(),
        at: now,
        held,
        give,
        give_slots,
        grant: a.grant + 1,
        requests,
        slots,
        prev,
        fixes,
    };
    a.free = Money::ZERO;
    a.slots = 0;
    a.asking = true;
    slice
}

/// The store's answer to a slice's call, when it gave one. A refusal to take the slice (code 8) ends the
/// allotment. Whether a call that failed reached the store is not known: the allotment is not used again,
/// and its lease gives back whatever it holds. A store that did not answer is not asked again for this
/// request (it has had its time): it is answered as admission answers then.
fn answered(
    a: &mut Allot,
    key: &str,
    reply: Result<Reply, StoreError>,
) -> Result<Option<Reply>, StoreError> {
    match reply {
        Ok(r) if r.code != 8 => Ok(Some(r)),
        Ok(_) => {
            a.live = false;
            Ok(None)
        }
        Err(e) => {
            a.live = false;
            log::warn!("store: an allotment of key {key:?} is left to its lease ({e})");
            if e.unavailable {
                Err(e)
            } else {
                Ok(None)
            }
        }
    }
}

/// The slice the store gave at `now`, in the allotment (in force for `allot`).
fn fill(a: &mut Allot, r: &Reply, need: &Need, slice: &NextSlice, now: Instant, allot: Duration) {
    a.live = slice.held || r.money != Money::ZERO || r.slots > 0 || r.requests > 0;
    a.kind = need.kind;
    a.requests = if need.kind.rpm { r.requests } else { 0 };
    a.tokens = r.tokens;
    if r.requests > 0 {
        a.grant = slice.grant;
        a.grant_taken = r.requests;
        a.grant_drawn = 0;
        a.grants.push_back(Grant {
            k: slice.grant,
            tokens: 0,
            current: true,
            dirty: false,
            at: now,
        });
    }
    a.rpm_base = r.rpm_used.saturating_sub(r.requests);
    a.tpm_base = r.tpm_used.saturating_sub(r.tokens);
    a.reset = r.reset;
    a.money = r.credit.is_some() || r.budget.is_some();
    a.conc = need.slot;
    a.free += r.money;
    a.slots += r.slots;
    a.spent = r.spent;
    a.period_spent = r.period_spent;
    a.credit = r.credit;
    a.budget = r.budget;
    a.draws = 0;
    a.until = now + allot;
}

impl Store {
    /// Admits request `id` of `key` from the key's allotment on this instance, taking or renewing the
    /// allotment first when it is used up or over (one call): the store's answer as admission gives it. None:
    /// no allotment for this request (the key is not busy, is close to its limits, or the store refused
    /// it): it is asked of the store as before, which judges and answers. An error: the store did not
    /// answer the allotment's call, and the request is answered as when admission's call fails.
    pub fn draw(
        &self,
        key: &str,
        id: &str,
        cost: Money,
        limits: &Limits,
        group_budget: Option<Budget>,
    ) -> Result<Option<AdmitReply>, StoreError> {
        let allot = self.settings.allot;
        if allot.is_zero() || limits.max_concurrent.is_some_and(|c| c < MIN_CONCURRENT) {
            return Ok(None);
        }
        let need = Need::of(cost, limits);
        let mut keys = lock(&self.allots.keys);
        // Read with the lock held: a draw is never later than the slice's time.
        let now = Instant::now();
        let a = keys
            .entry(key.to_string())
            .or_insert_with(|| Allot::new(now));
        // The key's numbers before this request counts, as admission reports them.
        let admission = a.admission();
        if a.take(need.cost, need.tokens, need.slot, need.kind, now) {
            let drawn = self.drawn_of(key, a, need.cost, need.tokens, need.slot, need.at);
            drop(keys);
            self.note_drawn(id, drawn);
            return Ok(Some(admission));
        }
        if !may_ask(a, need.kind, now) {
            return Ok(None);
        }
        let mut slice = next_slice(a, &self.instance, now);
        drop(keys);
        let reply = self.allot_call(&slice.ask(key, &need, limits, group_budget));
        self.take_slice(key, id, &need, &slice, reply)
    }

    /// The store's answer to a slice's call put in the key's allotment, then the request drawn from it.
    fn take_slice(
        &self,
        key: &str,
        id: &str,
        need: &Need,
        slice: &NextSlice,
        reply: Result<Reply, StoreError>,
    ) -> Result<Option<AdmitReply>, StoreError> {
        let now = slice.at;
        let mut keys = lock(&self.allots.keys);
        let Some(a) = keys.get_mut(key) else {
            return Ok(None);
        };
        a.asking = false;
        let Some(r) = answered(a, key, reply)? else {
            return Ok(None);
        };
        fill(a, &r, need, slice, now, self.settings.allot);
        // Refused (revoked, expired) or nothing to take: the key's requests are asked of the store one by
        // one until `until`, this one too (the store judges it and says why).
        let admission = a.admission();
        a.dry = r.code != 0 || !a.take(need.cost, need.tokens, need.slot, need.kind, now);
        if a.dry {
            return Ok(None);
        }
        let drawn = self.drawn_of(key, a, need.cost, need.tokens, need.slot, need.at);
        drop(keys);
        self.note_drawn(id, drawn);
        Ok(Some(admission))
    }

    /// The allotments this instance holds, for their leases' renewal: (id, key name).
    pub(super) fn allotments_held(&self) -> Vec<(String, String)> {
        lock(&self.allots.keys)
            .iter()
            .filter(|(_, a)| a.live)
            .map(|(key, a)| (a.id.clone(), key.clone()))
            .collect()
    }

    /// Allotments another instance's look for dead leases gave back (this one could not renew them in
    /// time): not used again; the next busy moment of their key takes a new one.
    pub(super) fn allotments_gone(&self, ids: &[String]) {
        let mut keys = lock(&self.allots.keys);
        for a in keys.values_mut() {
            if ids.contains(&a.id) {
                a.live = false;
            }
        }
    }

    /// Gives back what allotments over their time no longer need (the store thread, at each look; `all`:
    /// every allotment, at shutdown, after the settlements were sent): an allotment none of whose requests
    /// runs or waits for its settlement ends, the others give back what is not drawn. Keys neither busy nor
    /// allotted are forgotten.
    pub fn return_allotments(&self, all: bool) {
        let now = Instant::now();
        let mut todo = Vec::new();
        {
            let mut keys = lock(&self.allots.keys);
            keys.retain(|_, a| a.live || a.asking || now.duration_since(a.burst_at) <= BUSY_WITHIN);
            for (key, a) in keys.iter_mut() {
                if !a.live || a.asking || (now < a.until && !all) {
                    continue;
                }
                // At shutdown, settlements that could not be sent are left to their records (each counts
                // its cost when shipped, now or at the next start): what the entry holds for them goes back.
                let end = a.running == 0 && (a.unsettled == 0 || all);
                if !end && a.free == Money::ZERO && a.slots == 0 && !a.window_owed() {
                    continue;
                }
                let (prev, fixes) = a.window_back(now);
                todo.push((key.clone(), a.id.clone(), a.free, a.slots, end, prev, fixes));
                a.free = Money::ZERO;
                a.slots = 0;
                a.until = now;
                a.asking = true;
            }
        }
        for (key, id, give, give_slots, end, prev, fixes) in todo {
            // Only what the call sends matters here: no limit is judged when nothing is asked for.
            let limits = Limits {
                rpm: None,
                tpm: None,
                max_concurrent: None,
                credit: None,
                budget: None,
                tokens: 0,
                now: crate::util::unix_now(),
            };
            let reply = self.allot_call(&Ask {
                key: &key,
                id: &id,
                held: true,
                give,
                give_slots,
                want: Money::ZERO,
                want_slots: 0,
                least: Money::ZERO,
                grant: 0,
                want_requests: 0,
                want_tokens: 0,
                least_tokens: 0,
                prev,
                fixes,
                end,
                limits: &limits,
                group_budget: None,
            });
            let mut keys = lock(&self.allots.keys);
            if let Some(a) = keys.get_mut(&key) {
                a.asking = false;
                match reply {
                    Ok(r) if r.code != 8 && !end => {}
                    // Gone (a look for dead leases gave it back): its requests' settlements, still to come,
                    // count their costs (from nothing it holds).
                    Ok(_) if !end => {
                        keys.remove(&key);
                    }
                    Ok(_) => {
                        keys.remove(&key);
                        drop(keys);
                        // Its requests still to settle (if any: at shutdown) are left to their records.
                        lock(&self.allots.drawn).retain(|_, d| d.allot != id);
                    }
                    Err(e) => {
                        a.live = false;
                        log::warn!("store: an allotment of key {key:?} is left to its lease ({e})");
                    }
                }
            }
        }
    }

    /// One `allot.lua` call, in the request path's pipeline (a replica waited for with `replica_wait =
    /// "all"`).
    fn allot_call(&self, ask: &Ask) -> Result<Reply, StoreError> {
        let k = self.account_keys(ask.key);
        let limits = ask.limits;
        let (budget, letter) = match ask.group_budget {
            Some(b) => (units(b.amount), b.period.letter().to_string()),
            None => (String::new(), String::new()),
        };
        let field = |p| period_field(p, limits.now);
        let flag = |b: bool| if b { "1" } else { "" }.to_string();
        let opt = |v: Option<u64>| v.map_or_else(String::new, |n| n.to_string());
        let (prev, taken, unused) = match ask.prev {
            Some((g, t, u)) => (g.to_string(), t.to_string(), u.to_string()),
            None => (String::new(), "0".into(), "0".into()),
        };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.scripts.allot.get_hash())
            .arg(7)
            .arg(&[
                k.acct,
                k.res,
                k.lease,
                k.per,
                self.k("terms"),
                k.win,
                k.winv,
            ])
            .arg(&[
                ask.id.to_string(),
                self.settings.lease.as_millis().to_string(),
                ask.key.to_string(),
                budget,
                letter,
                limits.now.to_string(),
                field(Period::Daily),
                field(Period::Weekly),
                field(Period::Monthly),
                flag(limits.credit.is_some() || limits.budget.is_some()),
                limits
                    .max_concurrent
                    .map_or_else(String::new, |n| n.to_string()),
                flag(ask.held),
                units(ask.give),
                ask.give_slots.to_string(),
                units(ask.want),
                ask.want_slots.to_string(),
                units(ask.least),
                flag(ask.end),
                opt(limits.rpm),
                opt(limits.tpm),
                ask.grant.to_string(),
                ask.want_requests.to_string(),
                ask.want_tokens.to_string(),
                ask.least_tokens.to_string(),
                prev,
                taken,
                unused,
                self.settings.allot.as_millis().to_string(),
            ]);
        for (member, tokens) in &ask.fixes {
            cmd.arg(member).arg(tokens);
        }
        let reply = self
            .send(vec![(cmd, Carried::new(Vec::new(), &self.pending))])
            .pop()
            .unwrap_or_else(|| {
                Err(StoreError {
                    unavailable: false,
                    message: "no answer".into(),
                })
            })?;
        let a = ScriptReply::read(reply, 13, "allotment")?;
        Ok(Reply {
            code: a.int(0)?,
            money: a.money(1)?,
            slots: a.count(2)?,
            spent: a.money(3)?,
            credit: a.credit(4)?,
            budget: a.budget(5, 6)?,
            period_spent: a.money(7)?,
            requests: a.count(8)?,
            tokens: a.count(9)?,
            rpm_used: a.count(10)?,
            reset: a.ms(11)?,
            tpm_used: a.count(12)?,
        })
    }
}
