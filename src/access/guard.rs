//! Slowing down admin-token guessing, per client address.
//!
//! Each address (an IPv6 one by its /64: one host is given a whole /64 to pick from) has a count of wrong
//! admin tokens within the last minute. From the fifth, the address is
//! held off: for 1 s, then 2, 4, … up to 60 s as failures go on, every admin request from it gets 429 with
//! `retry-after` without its token being compared. A correct token resets the address. Other addresses are
//! never affected, the table is bounded (the oldest entries go first), and the command line (`tollgate keys
//! …`) needs no token at all. The price: an attacker who shares the operator's address (behind the same
//! reverse proxy, say) can hold the operator's console off for up to a minute at a time; a long random token
//! (`openssl rand -hex 24`) makes guessing hopeless anyway.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const FREE_FAILURES: u32 = 4;
const WINDOW: Duration = Duration::from_secs(60);
const MAX_HOLD: Duration = Duration::from_secs(60);
const MAX_ADDRESSES: usize = 4096;

#[derive(Clone, Copy)]
struct Entry {
    failures: u32,
    first: Instant,
    held_until: Option<Instant>,
}

#[derive(Default)]
pub(crate) struct Guard {
    addresses: Mutex<HashMap<IpAddr, Entry>>,
}

impl Guard {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Entry>> {
        crate::util::lock(&self.addresses)
    }

    /// How long `addr` is still held off (None: its token may be checked).
    pub(crate) fn held(&self, addr: IpAddr, now: Instant) -> Option<Duration> {
        let addr = crate::peer::counted(addr);
        let until = self.lock().get(&addr)?.held_until?;
        (now < until).then(|| until - now)
    }

    /// A wrong token from `addr`.
    pub(crate) fn failed(&self, addr: IpAddr, now: Instant) {
        let addr = crate::peer::counted(addr);
        let mut map = self.lock();
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&addr) {
            map.retain(|_, e| {
                now.duration_since(e.first) < WINDOW || e.held_until.is_some_and(|u| u > now)
            });
            if map.len() >= MAX_ADDRESSES {
                if let Some(oldest) = map.iter().min_by_key(|(_, e)| e.first).map(|(a, _)| *a) {
                    map.remove(&oldest);
                }
            }
        }
        let e = map.entry(addr).or_insert(Entry {
            failures: 0,
            first: now,
            held_until: None,
        });
        if now.duration_since(e.first) >= WINDOW && e.held_until.is_none_or(|u| u <= now) {
            *e = Entry {
                failures: 0,
                first: now,
                held_until: None,
            };
        }
        e.failures += 1;
        if e.failures > FREE_FAILURES {
            let hold =
                Duration::from_secs(1u64 << (e.failures - FREE_FAILURES - 1).min(6)).min(MAX_HOLD);
            e.held_until = Some(now + hold);
        }
    }

    /// A correct token from `addr`: it starts afresh.
    pub(crate) fn succeeded(&self, addr: IpAddr) {
        self.lock().remove(&crate::peer::counted(addr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guessing_is_held_off_per_address_and_a_success_resets() {
        let g = Guard::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t = Instant::now();
        for _ in 0..4 {
            g.failed(a, t);
            assert_eq!(g.held(a, t), None, "four free failures");
        }
        g.failed(a, t);
        assert_eq!(g.held(a, t), Some(Duration::from_secs(1)));
        assert_eq!(g.held(b, t), None, "other addresses are not affected");
        g.failed(a, t);
        assert_eq!(g.held(a, t), Some(Duration::from_secs(2)));
        for _ in 0..20 {
            g.failed(a, t);
        }
        assert_eq!(g.held(a, t), Some(MAX_HOLD), "capped");
        assert_eq!(g.held(a, t + MAX_HOLD), None);
        g.succeeded(a);
        g.failed(a, t);
        assert_eq!(g.held(a, t), None);
    }

    #[test]
    fn the_table_is_bounded() {
        let g = Guard::default();
        let t = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 100) {
            g.failed(IpAddr::from(i.to_be_bytes()), t);
        }
        assert!(g.lock().len() <= MAX_ADDRESSES);
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64() {
        let g = Guard::default();
        let t = Instant::now();
        for i in 1..=5u16 {
            let a = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, i));
            g.failed(a, t);
        }
        let other_in_64: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(g.held(other_in_64, t), Some(Duration::from_secs(1)));
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(g.held(other_64, t), None);
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        g.failed(mapped, t);
        assert_eq!(
            g.lock()
                .get(&"10.0.0.1".parse::<IpAddr>().unwrap())
                .map(|e| e.failures),
            Some(1)
        );
    }
}
