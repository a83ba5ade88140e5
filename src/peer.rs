//! A client's address as the gateway counts it, where one host must not pass for many: an IPv4 address (an
//! IPv4-mapped IPv6 one included) as it is, an IPv6 one by its /64 (a host is given a whole /64 to pick its
//! addresses from). Used by the HTTP layer's fair share of connection slots and by the admin token's guard;
//! and the address ranges settings name (`exempt_clients`).

use std::net::{IpAddr, Ipv6Addr};

/// The address counted for `addr`.
pub(crate) fn counted(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Why a range did not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRange(pub String);

impl std::fmt::Display for BadRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An address range: `10.0.0.0/8`, `2001:db8::/32`, or one address (`127.0.0.1`, `::1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    base: IpAddr,
    bits: u8,
}

impl Range {
    /// Reads `a.b.c.d[/n]` or `v6[/n]`.
    pub fn parse(text: &str) -> Result<Range, BadRange> {
        let text = text.trim();
        let (addr, bits) = match text.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (text, None),
        };
        let base: IpAddr = addr.parse().map_err(|_| {
            BadRange(format!(
                "`{text}` is not an IP address or a range such as 10.0.0.0/8"
            ))
        })?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b.parse::<u8>().ok().filter(|b| *b <= max).ok_or_else(|| {
                BadRange(format!("`{text}`: the prefix length must be 0 to {max}"))
            })?,
        };
        Ok(Range { base, bits })
    }

    /// Whether `addr` is in the range (an IPv4-mapped IPv6 address as its IPv4 one).
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        match (self.base, addr) {
            (IpAddr::V4(b), IpAddr::V4(a)) => {
                prefix_eq(u32::from(b).into(), u32::from(a).into(), self.bits, 32)
            }
            (IpAddr::V6(b), IpAddr::V6(a)) => {
                prefix_eq(u128::from(b), u128::from(a), self.bits, 128)
            }
            _ => false,
        }
    }
}

/// Whether the first `bits` of two `width`-bit numbers are the same.
fn prefix_eq(a: u128, b: u128, bits: u8, width: u32) -> bool {
    let shift = width - u32::from(bits);
    shift >= 128 || (a >> shift) == (b >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_host_counts_by_its_64_and_mapped_addresses_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2::7".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        assert_eq!(counted(a), counted(b));
        assert_ne!(counted(a), counted("2001:db8:1:3::7".parse().unwrap()));
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(counted(mapped), "10.1.2.3".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn ranges() {
        let r = Range::parse("10.0.0.0/8").unwrap();
        assert!(r.contains("10.200.3.4".parse().unwrap()));
        assert!(r.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!r.contains("11.0.0.1".parse().unwrap()));
        let one = Range::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let v6 = Range::parse("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        assert!(Range::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        for bad in ["10.0.0.0/33", "nope", "::1/129", "10.0.0.1/x"] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
    }
}
