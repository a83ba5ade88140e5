//! The requests drawn from this instance's allotments, from their admission to their settlement: what
//! each holds of its slice, what its end gives back, its settlement queued (told the allotment), and the
//! marker its record leaves when it ships before that settlement is known applied (see `mod.rs`).

use std::time::Instant;

use super::super::settle::Pending;
use super::super::Store;
use super::slice::Allot;
use crate::money::Money;
use crate::util::lock;

/// A request admitted from an allotment.
pub(super) struct Drawn {
    key: String,
    pub(super) allot: String,
    /// The worst case drawn from the slice's money (zero when money did not count).
    cost: Money,
    slot: bool,
    /// The slice it was drawn from, and its token estimate counted there (0 without a tpm limit).
    grant: u64,
    tokens: u64,
    /// When it was admitted (Unix seconds): the budget periods its cost counts in.
    at: u64,
    /// Its record was shipped while its settlement was not known to be applied: its marker stays until it is
    /// (then this instance has it removed).
    shipped: bool,
}

impl Store {
    /// What is followed of a request just drawn from `a`.
    pub(super) fn drawn_of(
        &self,
        key: &str,
        a: &Allot,
        cost: Money,
        est: u64,
        slot: bool,
        at: u64,
    ) -> Drawn {
        Drawn {
            key: key.to_string(),
            allot: a.id.clone(),
            cost: if a.money { cost } else { Money::ZERO },
            slot,
            grant: a.grant,
            tokens: if a.kind.tpm { est } else { 0 },
            at,
            shipped: false,
        }
    }

    pub(super) fn note_drawn(&self, id: &str, drawn: Drawn) {
        lock(&self.allots.drawn).insert(id.to_string(), drawn);
    }

    /// The end of a request drawn from an allotment: what its worst case did not spend (`actual`; None: it
    /// ended without a record, nothing spent) goes back to the slice, and its slot; with a record, it is
    /// settled (queued for the settler: its cost counts in the store, out of the allotment's entry).
    pub fn end_drawn(&self, id: &str, actual: Option<(Money, u64)>) {
        let mut drawn = lock(&self.allots.drawn);
        let Some(d) = drawn.get(id) else {
            return;
        };
        let (key, allot, cost, slot) = (d.key.clone(), d.allot.clone(), d.cost, d.slot);
        let (grant, est, at) = (d.grant, d.tokens, d.at);
        // Without a record (released): nothing more to follow. With one, followed until it is settled (its
        // record, shipped meanwhile, is told its allotment).
        if actual.is_none() {
            drawn.remove(id);
        }
        drop(drawn);
        // Counted before the settlement is queued: its answer may come at once.
        self.drawn_ended(&key, &allot, (cost, slot, grant, est), actual);
        if let Some((spent, tokens)) = actual {
            self.queue_settlement(Pending {
                key,
                id: id.to_string(),
                cost: spent,
                tokens,
                admitted_at: at,
                since: Instant::now(),
                allot,
            });
        }
    }

    /// What a drawn request's end gives back to its slice (see `end_drawn`): its worst case, slot, slice and
    /// token estimate as drawn, and what it spent and used.
    fn drawn_ended(
        &self,
        key: &str,
        allot: &str,
        (cost, slot, grant, est): (Money, bool, u64, u64),
        actual: Option<(Money, u64)>,
    ) {
        let mut keys = lock(&self.allots.keys);
        let Some(a) = keys.get_mut(key).filter(|a| a.id == allot) else {
            return;
        };
        a.running = a.running.saturating_sub(1);
        if actual.is_some() {
            a.unsettled += 1;
        }
        // Its tokens in the window become the real ones (none without a record), sent with the next call.
        if est > 0 {
            let real = actual.map_or(0, |(_, t)| super::super::args::script_tokens(t));
            if let Some(g) = a.grants.iter_mut().find(|g| g.k == grant) {
                g.tokens = g.tokens.saturating_sub(est).saturating_add(real);
                g.dirty |= !g.current;
            }
        }
        if a.live {
            if cost > Money::ZERO {
                let spent = actual.map_or(Money::ZERO, |(m, _)| m).max(Money::ZERO);
                a.free = (a.free + cost - spent).max(Money::ZERO);
            }
            if slot {
                a.slots += 1;
            }
        }
    }

    /// The allotment request `id` was drawn from, while it is not settled.
    pub(in crate::store) fn allotment_of(&self, id: &str) -> Option<String> {
        lock(&self.allots.drawn).get(id).map(|d| d.allot.clone())
    }

    /// Settlements of drawn requests reached the store: they are settled, and their allotments may end. A
    /// record shipped meanwhile kept its marker (a settlement sent again had to find it): it may go now.
    pub(in crate::store) fn drawn_settled<'a>(&self, settled: impl Iterator<Item = &'a Pending>) {
        let mut done: Vec<(&str, &str)> = Vec::new();
        let mut forget = Vec::new();
        {
            let mut drawn = lock(&self.allots.drawn);
            for p in settled {
                if let Some(d) = drawn.remove(&p.id) {
                    done.push((&p.key, &p.allot));
                    if d.shipped {
                        forget.push((p.key.clone(), p.id.clone()));
                    }
                }
            }
        }
        if done.is_empty() {
            return;
        }
        {
            let mut keys = lock(&self.allots.keys);
            for (key, allot) in done {
                if let Some(a) = keys.get_mut(key).filter(|a| a.id == allot) {
                    a.unsettled = a.unsettled.saturating_sub(1);
                }
            }
        }
        self.forget_later(forget.into_iter());
    }

    /// The records of drawn requests `ids` are shipped, naming their allotments (the store answered the
    /// batch), so their markers stayed: those still to be known settled keep them until they are
    /// (`drawn_settled`); those settled meanwhile may lose them now. A batch whose answer was lost says
    /// nothing here: those markers stay (a settlement sent again never counts twice for it).
    pub(in crate::store) fn records_shipped<'a>(
        &self,
        ids: impl Iterator<Item = (&'a str, &'a str)>,
    ) {
        let mut forget = Vec::new();
        {
            let mut drawn = lock(&self.allots.drawn);
            for (key, id) in ids {
                match drawn.get_mut(id) {
                    Some(d) => d.shipped = true,
                    None => forget.push((key.to_string(), id.to_string())),
                }
            }
        }
        self.forget_later(forget.into_iter());
    }
}
