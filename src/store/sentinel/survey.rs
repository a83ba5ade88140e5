//! What `tollgate check --connect` reports of a sentinel set ([`survey`]): the primary each sentinel names,
//! the quorum, and whether each replica answers; every step bounded, on a thread of its own, as the crate's
//! Sentinel client has no timeouts.

use std::time::Duration;

use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{ConnectionAddr, IntoConnectionInfo, Value};

use super::{address_of, node_settings, plain, sentinel_infos, tcp};
use crate::config::store::{host_port, StoreSettings};
use crate::store::SetupError;

/// What `check --connect` reports of a sentinel set.
pub(crate) struct Survey {
    /// Each sentinel: its address, and the primary it names (or why not).
    pub sentinels: Vec<(String, Result<String, String>)>,
    /// `SENTINEL CKQUORUM` of the first sentinel that answers.
    pub quorum: Option<Result<String, String>>,
    /// Each replica the sentinels list: its address, and whether it answers (`PING`, as tollgate connects).
    pub replicas: Vec<(String, Result<(), String>)>,
}

/// Runs `f` on a thread of its own and waits for it at most `within` (the crate's Sentinel client has no
/// timeouts of its own). None: it did not end in time.
fn bounded<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    crate::logging::thread(
        std::thread::Builder::new().name("store-sentinel".into()),
        move || {
            let _ = tx.send(f());
        },
    )
    .ok()?;
    rx.recv_timeout(within).ok()
}

/// Asks every sentinel which primary it names, checks the quorum and whether each replica answers; every
/// step within `within`.
pub(crate) fn survey(settings: &StoreSettings, within: Duration) -> Result<Survey, SetupError> {
    let Some(s) = &settings.sentinel else {
        return Err(SetupError::NoSentinels);
    };
    let node = SentinelNodeConnectionInfo::default()
        .set_redis_connection_info(node_settings(settings))
        .set_tcp_settings(tcp(settings.timeout));
    let infos = sentinel_infos(settings)?;
    let mut sentinels = Vec::new();
    for (address, info) in &infos {
        let (info, node, name) = (info.clone(), node.clone(), s.master_name.clone());
        let named = bounded(within, move || {
            let mut sentinel = Sentinel::build(vec![info])?;
            sentinel
                .master_for(&name, Some(&node))
                .map(|c| address_of(&c))
        });
        sentinels.push((
            address.clone(),
            match named {
                Some(Ok(a)) => {
                    crate::addresses::register(&a);
                    Ok(a)
                }
                Some(Err(e)) => Err(crate::secrets::scrubbed(&e.to_string())),
                None => Err(format!("no answer within {} ms", within.as_millis())),
            },
        ));
    }
    let mut quorum = None;
    let mut listed = Vec::new();
    for (_, info) in &infos {
        let Ok(mut con) = plain(info, within) else {
            continue;
        };
        let ck: redis::RedisResult<String> = redis::cmd("SENTINEL")
            .arg("CKQUORUM")
            .arg(&s.master_name)
            .query(&mut con);
        quorum = Some(ck.map_err(|e| e.to_string()));
        let replicas: redis::RedisResult<Vec<Value>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(&s.master_name)
            .query(&mut con);
        listed = replicas.map(replica_addresses).unwrap_or_default();
        break;
    }
    let replicas = listed
        .into_iter()
        .map(|(host, port)| {
            let address = host_port(&host, port);
            crate::addresses::register(&address);
            let answered = ping(settings, &host, port, within)
                .map_err(|e| crate::secrets::scrubbed(&e.to_string()));
            (address, answered)
        })
        .collect();
    Ok(Survey {
        sentinels,
        quorum,
        replicas,
    })
}

/// Whether a data node answers `PING` with tollgate's credentials.
fn ping(
    settings: &StoreSettings,
    host: &str,
    port: u16,
    within: Duration,
) -> redis::RedisResult<()> {
    let info = ConnectionAddr::Tcp(host.to_string(), port)
        .into_connection_info()?
        .set_redis_settings(node_settings(settings));
    let mut con = plain(&info, within)?;
    redis::cmd("PING").query::<String>(&mut con).map(|_| ())
}

/// (ip, port) of each replica in a `SENTINEL REPLICAS` answer (flat field-value lists, or maps in RESP3).
fn replica_addresses(v: Vec<Value>) -> Vec<(String, u16)> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut out = Vec::new();
    for r in v {
        let pairs: Vec<(String, String)> = match r {
            Value::Array(items) => items
                .chunks(2)
                .filter_map(|kv| Some((text(kv.first()?)?, text(kv.get(1)?)?)))
                .collect(),
            Value::Map(items) => items
                .iter()
                .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
                .collect(),
            _ => continue,
        };
        let get = |k: &str| pairs.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
        if let (Some(ip), Some(port)) = (get("ip"), get("port").and_then(|p| p.parse().ok())) {
            out.push((ip, port));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_read_from_either_reply_shape() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let flat = vec![Value::Array(vec![
            b("name"),
            b("10.0.0.6:6379"),
            b("ip"),
            b("10.0.0.6"),
            b("port"),
            b("6379"),
        ])];
        assert_eq!(
            replica_addresses(flat),
            vec![("10.0.0.6".to_string(), 6379)]
        );
        let map = vec![Value::Map(vec![
            (b("ip"), b("::1")),
            (b("port"), b("7000")),
        ])];
        assert_eq!(replica_addresses(map), vec![("::1".to_string(), 7000)]);
        assert!(replica_addresses(vec![Value::Array(vec![b("ip"), b("h")])]).is_empty());
    }
}
