//! Settlements: the end of a request in the store, not waited for by the request (`accounts.rs` says what
//! one does; `lua/settle_many.lua` does it). A settlement waits in the store's queue ([`Pending`]) for the
//! next admission of its key on this instance, which carries it inside its own script call, or for the
//! settler thread ([`Store::settler`]), which sends every one waiting once the oldest has waited
//! `SETTLE_AFTER`; a call that does not go through puts those it carried back ([`Carried`]). Requests drawn
//! from an allotment (`allot/`) are settled the same way, told their allotment, and their markers removed
//! once this instance knows their settlements applied and their records shipped ([`Store::forget_later`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::args::{script_tokens, units};
use super::{Store, StoreError};
use crate::budget::Period;
use crate::money::Money;
use crate::util::lock;

/// How long a settlement may wait for the next admission of its key before the settler thread sends it.
pub(super) const SETTLE_AFTER: Duration = Duration::from_millis(2);

/// Test hook: with `TOLLGATE_TEST_SETTLE_AFTER_MS=N`, the settler thread waits N ms instead of
/// `SETTLE_AFTER` (a record then ships before its request's settlement, on a strict ledger).
pub(super) const SETTLE_AFTER_ENV: &str = "TOLLGATE_TEST_SETTLE_AFTER_MS";

fn settle_after() -> Duration {
    static AFTER: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *AFTER.get_or_init(|| {
        std::env::var(SETTLE_AFTER_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(SETTLE_AFTER, Duration::from_millis)
    })
}

/// Settlements sent in one script call by the settler thread at most.
const SETTLE_BATCH: usize = 200;

/// How long the markers of drawn requests that may go wait for a settler's call, when no settlement makes
/// one sooner.
const FORGET_AFTER: Duration = Duration::from_millis(50);

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

impl Store {
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
    pub(super) fn take_pending(&self, pick: impl Fn(&Pending) -> bool) -> Carried {
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
                .any(|p| p.since.elapsed() >= settle_after());
        let mut due = if due_now {
            self.take_pending(|_| true).into_items()
        } else {
            Vec::new()
        };
        let mut forgets = if due_now {
            let mut f = lock(&self.forgets);
            *lock(&self.forget_since) = None;
            std::mem::take(&mut *f)
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
            .map(|p| settle_after().saturating_sub(p.since.elapsed()))
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::args::period_field;

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
}
