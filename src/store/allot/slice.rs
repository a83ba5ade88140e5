//! One key's allotment on this instance: what is left of its slice to draw from, what the rate window owes
//! back when the slice ends, and the numbers a drawn request reports (`mod.rs` says what allotments are).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::budget::Budget;
use crate::money::Money;
use crate::standing::{Standing, Verdict};
use crate::store::accounts::AdmitReply;

/// Admissions within `BUSY_WITHIN` that make a key busy enough for an allotment.
const BUSY: u32 = 8;
pub(super) const BUSY_WITHIN: Duration = Duration::from_millis(100);

/// One key's allotment on this instance.
pub(super) struct Allot {
    /// The entry's id in the key's `res` hash ("" before the first).
    pub(super) id: String,
    /// The store holds the entry under `id`.
    pub(super) live: bool,
    /// A call for this key is under way: nobody else asks meanwhile.
    pub(super) asking: bool,
    /// What the slice was taken for: requests held to the key's balance or not (`Limits::credit` or
    /// `budget` set, what admission's flag says: a cached answer's or a token count's admission holds no
    /// money), with an rpm limit or not, with a tpm limit or not. Only requests of that kind draw from it.
    pub(super) kind: SliceKind,
    /// Money counts (the key has a credit or a budget in the store): `free` is what is not drawn yet.
    pub(super) money: bool,
    pub(super) free: Money,
    /// Slots count (the key has a concurrency limit): `slots` are those not drawn yet.
    pub(super) conc: bool,
    pub(super) slots: u64,
    /// The rate window's requests and tokens of the current slice not drawn yet (counted with an rpm,
    /// and with a tpm limit).
    pub(super) requests: u64,
    pub(super) tokens: u64,
    /// The current slice's number (its window entries are `<id>:<number>:<i>`), how many requests it took
    /// in the window and how many were drawn.
    pub(super) grant: u64,
    pub(super) grant_taken: u64,
    pub(super) grant_drawn: u64,
    /// The slices of the last minute whose first window entry carries their tokens.
    pub(super) grants: VecDeque<Grant>,
    /// The window as the last call left it, without the current slice (for the `x-ratelimit-*` headers).
    pub(super) rpm_base: u64,
    pub(super) tpm_base: u64,
    pub(super) reset: Duration,
    /// Drawn from until then.
    pub(super) until: Instant,
    /// Requests drawn since the slice was taken.
    pub(super) draws: u64,
    /// The last call left nothing to draw from: until `until`, every admission asks the store.
    pub(super) dry: bool,
    /// Drawn requests still running, and those ended whose settlement has not reached the store yet.
    pub(super) running: u64,
    pub(super) unsettled: u64,
    /// Admissions counted for `BUSY`.
    pub(super) burst: u32,
    pub(super) burst_at: Instant,
    /// What the store said at the last call.
    pub(super) spent: Money,
    pub(super) period_spent: Money,
    pub(super) credit: Option<Money>,
    pub(super) budget: Option<Budget>,
}

impl Allot {
    pub(super) fn new(now: Instant) -> Allot {
        Allot {
            id: String::new(),
            live: false,
            asking: false,
            kind: SliceKind::default(),
            money: false,
            free: Money::ZERO,
            conc: false,
            slots: 0,
            requests: 0,
            tokens: 0,
            grant: 0,
            grant_taken: 0,
            grant_drawn: 0,
            grants: VecDeque::new(),
            rpm_base: 0,
            tpm_base: 0,
            reset: Duration::ZERO,
            until: now,
            draws: 0,
            dry: false,
            running: 0,
            unsettled: 0,
            burst: 0,
            burst_at: now,
            spent: Money::ZERO,
            period_spent: Money::ZERO,
            credit: None,
            budget: None,
        }
    }

    /// Draws one request of worst case `cost` (and `tokens`, estimated) from the slice, if it has room and
    /// is still in force.
    pub(super) fn take(
        &mut self,
        cost: Money,
        tokens: u64,
        slot: bool,
        kind: SliceKind,
        now: Instant,
    ) -> bool {
        if !self.live || self.asking || now >= self.until || kind != self.kind {
            return false;
        }
        if (self.money && self.free < cost) || (slot && (!self.conc || self.slots == 0)) {
            return false;
        }
        if (kind.rpm || kind.tpm) && self.grant_taken == 0 {
            return false;
        }
        if (kind.rpm && self.requests == 0) || (kind.tpm && self.tokens < tokens) {
            return false;
        }
        if kind.rpm {
            self.requests -= 1;
        }
        if kind.tpm {
            self.tokens -= tokens;
            if let Some(g) = self.grants.back_mut().filter(|g| g.k == self.grant) {
                g.tokens += tokens;
            }
        }
        if kind.rpm || kind.tpm {
            self.grant_drawn += 1;
        }
        if self.money {
            self.free = self.free - cost;
        }
        if slot {
            self.slots -= 1;
        }
        self.draws += 1;
        self.running += 1;
        true
    }

    /// Counts an admission asked of the store; whether the key is now busy enough for an allotment.
    pub(super) fn busy(&mut self, now: Instant) -> bool {
        if now.duration_since(self.burst_at) > BUSY_WITHIN {
            self.burst_at = now;
            self.burst = 0;
        }
        self.burst += 1;
        self.burst >= BUSY
    }

    /// What the slice's window part gives back at the next call: the current slice's entries of requests
    /// not drawn (its number, how many it took, how many were not drawn) and what each slice's first entry
    /// stands for now (the current one's, which ends, and those whose requests ended since). The slices
    /// older than the window are forgotten.
    pub(super) fn window_back(&mut self, now: Instant) -> (Option<EndedSlice>, Vec<(String, u64)>) {
        let prev = (self.grant_taken > 0).then(|| {
            (
                self.grant,
                self.grant_taken,
                self.grant_taken.saturating_sub(self.grant_drawn),
            )
        });
        self.grant_taken = 0;
        self.grant_drawn = 0;
        self.requests = 0;
        self.tokens = 0;
        let mut fixes = Vec::new();
        for g in self.grants.iter_mut() {
            if g.current || g.dirty {
                fixes.push((format!("{}:{}:1", self.id, g.k), g.tokens));
            }
            g.current = false;
            g.dirty = false;
        }
        while self
            .grants
            .front()
            .is_some_and(|g| now.duration_since(g.at) > WINDOW_KEPT)
        {
            self.grants.pop_front();
        }
        (prev, fixes)
    }

    /// Whether the window part has something to give back.
    pub(super) fn window_owed(&self) -> bool {
        self.grant_taken > 0 || self.grants.iter().any(|g| g.dirty)
    }

    pub(super) fn admission(&self) -> AdmitReply {
        let drawn_tokens = self
            .grants
            .back()
            .filter(|g| g.current)
            .map_or(0, |g| g.tokens);
        AdmitReply {
            standing: Standing {
                verdict: Verdict::Admitted,
                rpm_used: self.rpm_base + self.grant_drawn,
                rpm_reset: self.reset,
                tpm_used: self.tpm_base + drawn_tokens,
                tpm_reset: self.reset,
                tpm_wait: Duration::ZERO,
                spent: self.spent,
                period_spent: self.period_spent,
            },
            credit: self.credit,
            budget: self.budget,
        }
    }
}

/// What a slice was taken for (`Allot::kind`).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SliceKind {
    pub(super) for_balance: bool,
    pub(super) rpm: bool,
    pub(super) tpm: bool,
}

/// A slice's tokens in the rate window: what its first entry is to stand for (the estimates of its
/// requests drawn, the real tokens of those that ended), sent when the slice ends (`current`) and when it
/// changed since (`dirty`).
pub(super) struct Grant {
    pub(super) k: u64,
    pub(super) tokens: u64,
    pub(super) current: bool,
    pub(super) dirty: bool,
    pub(super) at: Instant,
}

/// A slice whose time ended: its number, the requests it took in the window, those not drawn.
pub(super) type EndedSlice = (u64, u64, u64);

/// How long a slice's tokens are followed: the window's minute and the slice's time.
pub(super) const WINDOW_KEPT: Duration = Duration::from_secs(62);
