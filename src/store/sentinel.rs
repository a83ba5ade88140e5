//! Following a primary that Redis Sentinels watch (`[store] sentinels` and `master_name`): which server is
//! the primary now, asked of the sentinels through the `redis` crate's own Sentinel client; asked again when a
//! call to the primary fails or finds it a replica, and once a second besides, so a failover (or a switch an
//! operator made) is followed by itself, with no restart.
//!
//! The crate's synchronous Sentinel client sets no timeout on the connections it opens (to each sentinel,
//! and to the primary it checks with `ROLE`), so a host that is gone would hold its caller for as long as the
//! kernel tries to connect (about two minutes). So every lookup runs on threads of its own, one per sentinel
//! (a *lane*, with that sentinel's connection cache), and a caller waits for the first sentinel that names a
//! primary, for at most the store's `timeout_ms`; and a lane asks the crate only once its sentinel answered
//! `SENTINEL GET-MASTER-ADDR-BY-NAME` and the server it names accepted a connection, each within that
//! deadline, so a dead host (a sentinel's, or the old primary's before the sentinels mark it down) holds no
//! lane. A lane whose lookup overran anyway is left out of later lookups until it ends: one stuck sentinel
//! never hides the others, and no more than one thread per sentinel is ever held.
//!
//! The addresses the sentinels name are registered with `addresses` before anything can show them, so
//! clients never see where the primary is.
//!
//! What `check --connect` asks of the sentinels is in `sentinel/survey.rs`.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use super::SetupError;
use crate::config::store::{host_port, StoreSettings};
use crate::util::lock;
pub(crate) use survey::survey;

mod survey;

/// How often the sentinels are asked again while the primary answers.
const CONFIRM_EVERY: Duration = Duration::from_secs(1);

/// After a lookup that found no primary, the next one starts no sooner than this.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// The primary in use.
#[derive(Clone)]
pub(super) struct Primary {
    /// `host:port`.
    pub address: String,
    pub client: redis::Client,
    /// Bumped with every primary taken up: pooled connections of an older one are not reused.
    pub generation: u64,
}

/// One sentinel, and the lookup running on it.
struct Lane {
    address: String,
    info: ConnectionInfo,
    /// Its connection cache, taken by the lookup running on the lane.
    sentinel: Option<Sentinel>,
    busy: bool,
}

struct State {
    lanes: Vec<Lane>,
    primary: Option<Primary>,
    /// The last primary taken up (kept when it is forgotten), for the log.
    last_address: Option<String>,
    generation: u64,
    /// The newest lookup started; the newest whose answer was taken.
    started: u64,
    taken: u64,
    /// Lanes of the newest lookup still to answer.
    pending: usize,
    last_start: Option<Instant>,
    /// When a sentinel last named the primary in use.
    confirmed: Option<Instant>,
    last_error: Option<String>,
}

/// The sentinels of one primary, and what they last said.
pub(super) struct Follower {
    master_name: String,
    /// How tollgate connects to the servers the sentinels name (database, user, password).
    node: SentinelNodeConnectionInfo,
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

/// TCP settings for the connections the crate opens: no Nagle delay, and (Linux) a send that is not
/// acknowledged within a few deadlines fails instead of waiting for the kernel's retries.
fn tcp(timeout: Duration) -> redis::io::tcp::TcpSettings {
    let t = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let t = t.set_user_timeout((timeout * 4).max(Duration::from_secs(2)));
    #[cfg(not(any(target_os = "android", target_os = "fuchsia", target_os = "linux")))]
    let _ = timeout;
    t
}

/// The data nodes' database, user and password.
pub(super) fn node_settings(settings: &StoreSettings) -> RedisConnectionInfo {
    let mut redis = RedisConnectionInfo::default()
        .set_db(settings.db)
        .set_skip_set_lib_name();
    if let Some(user) = &settings.username {
        redis = redis.set_username(user);
    }
    if let Some(pw) = &settings.password {
        redis = redis.set_password(pw);
    }
    redis
}

/// How to reach each sentinel: (address, connection info with the sentinels' password).
fn sentinel_infos(settings: &StoreSettings) -> Result<Vec<(String, ConnectionInfo)>, SetupError> {
    let Some(s) = &settings.sentinel else {
        return Ok(Vec::new());
    };
    let mut redis = RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some(pw) = &s.password {
        redis = redis.set_password(pw);
    }
    s.addresses
        .iter()
        .map(|(h, p)| {
            let info = ConnectionAddr::Tcp(h.clone(), *p)
                .into_connection_info()
                .map_err(|error| SetupError::Address {
                    setting: "store.sentinels",
                    error,
                })?
                .set_redis_settings(redis.clone())
                .set_tcp_settings(tcp(settings.timeout));
            Ok((host_port(h, *p), info))
        })
        .collect()
}

/// `host:port` of a client's server.
fn address_of(client: &redis::Client) -> String {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(h, p) => host_port(h, *p),
        other => other.to_string(),
    }
}

impl Follower {
    pub(super) fn new(settings: &StoreSettings) -> Result<Arc<Follower>, SetupError> {
        let Some(s) = &settings.sentinel else {
            return Err(SetupError::NoSentinels);
        };
        let lanes = sentinel_infos(settings)?
            .into_iter()
            .map(|(address, info)| Lane {
                address,
                info,
                sentinel: None,
                busy: false,
            })
            .collect();
        Ok(Arc::new(Follower {
            master_name: s.master_name.clone(),
            node: SentinelNodeConnectionInfo::default()
                .set_redis_connection_info(node_settings(settings))
                .set_tcp_settings(tcp(settings.timeout)),
            timeout: settings.timeout,
            state: Mutex::new(State {
                lanes,
                primary: None,
                last_address: None,
                generation: 0,
                started: 0,
                taken: 0,
                pending: 0,
                last_start: None,
                confirmed: None,
                last_error: None,
            }),
            changed: Condvar::new(),
        }))
    }

    pub(super) fn master_name(&self) -> &str {
        &self.master_name
    }

    /// The sentinels' addresses.
    pub(super) fn sentinels(&self) -> Vec<String> {
        lock(&self.state)
            .lanes
            .iter()
            .map(|l| l.address.clone())
            .collect()
    }

    /// The primary's address as last named (None: none known now).
    pub(super) fn address(&self) -> Option<String> {
        lock(&self.state)
            .primary
            .as_ref()
            .map(|p| p.address.clone())
    }

    /// The primary, asking the sentinels when none is known; waits at most the store's deadline. While it
    /// waits, a sentinel that answered (without a primary: the old one is down, the new one not named yet)
    /// is asked again every `RETRY_AFTER`, one question per sentinel at a time.
    pub(super) fn primary(self: &Arc<Self>) -> Result<Primary, NoPrimary> {
        let deadline = Instant::now() + self.timeout;
        let mut st = lock(&self.state);
        let mut mine: Option<u64> = None;
        loop {
            if let Some(p) = &st.primary {
                return Ok(p.clone());
            }
            let now = Instant::now();
            // Every sentinel this caller asked answered, and none named a primary.
            let answered = mine.is_some_and(|id| st.started == id && st.pending == 0);
            if answered || now >= deadline {
                return Err(self.no_primary(&st));
            }
            let recent = st
                .last_start
                .is_some_and(|t| now.duration_since(t) < RETRY_AFTER);
            let free = st.lanes.iter().any(|l| !l.busy);
            if !recent && (free || st.pending == 0) {
                mine = Some(self.start(&mut st));
            } else if mine.is_none() {
                if st.pending == 0 {
                    // A lookup just ended without a primary.
                    return Err(self.no_primary(&st));
                }
                mine = Some(st.started);
            }
            let wait = deadline.saturating_duration_since(now).min(RETRY_AFTER);
            st = self
                .changed
                .wait_timeout(st, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    fn no_primary(&self, st: &State) -> NoPrimary {
        NoPrimary {
            master_name: self.master_name.clone(),
            last_error: st.last_error.clone(),
        }
    }

    /// The primary in use failed (it does not answer, or it is a replica now): the next call asks the
    /// sentinels again (and takes a new generation of connections, even to the same server).
    pub(super) fn forget(&self) {
        lock(&self.state).primary = None;
    }

    /// Asks the sentinels again in the background when the primary was last confirmed a second ago or more
    /// (the store thread calls this at each look).
    pub(super) fn refresh(self: &Arc<Self>) {
        let mut st = lock(&self.state);
        let now = Instant::now();
        let due = st
            .confirmed
            .is_none_or(|t| now.duration_since(t) >= CONFIRM_EVERY);
        let idle = st.pending == 0
            || st
                .last_start
                .is_none_or(|t| now.duration_since(t) >= self.timeout);
        if st.primary.is_some() && due && idle {
            self.start(&mut st);
        }
    }

    /// Starts a lookup on every free lane; returns its number.
    fn start(self: &Arc<Self>, st: &mut State) -> u64 {
        st.started += 1;
        st.last_start = Some(Instant::now());
        st.pending = 0;
        let id = st.started;
        for i in 0..st.lanes.len() {
            let lane = &mut st.lanes[i];
            if lane.busy {
                continue;
            }
            let sentinel = match lane.sentinel.take() {
                Some(s) => s,
                None => match Sentinel::build(vec![lane.info.clone()]) {
                    Ok(s) => s,
                    Err(e) => {
                        st.last_error = Some(format!("sentinel {}: {e}", lane.address));
                        continue;
                    }
                },
            };
            lane.busy = true;
            let (me, info) = (self.clone(), lane.info.clone());
            let spawned = crate::logging::thread(
                std::thread::Builder::new().name("store-sentinel".into()),
                move || me.ask(i, id, &info, sentinel),
            );
            match spawned {
                Ok(_) => st.pending += 1,
                Err(e) => {
                    st.lanes[i].busy = false;
                    st.last_error = Some(format!("cannot start a thread: {e}"));
                }
            }
        }
        if st.pending == 0 && st.lanes.iter().all(|l| l.busy) {
            st.last_error = Some(format!(
                "no sentinel answered an earlier question within {} ms",
                self.timeout.as_millis()
            ));
        }
        id
    }

    /// One lane's lookup (on its own thread): the primary its sentinel names, checked with `ROLE`. The
    /// crate's client is asked only once the sentinel and the server it names were both reached within the
    /// deadline (`guard`), so a host that is gone holds no lane.
    fn ask(&self, lane: usize, id: u64, info: &ConnectionInfo, mut sentinel: Sentinel) {
        let found = self.guard(info).and_then(|()| {
            sentinel
                .master_for(&self.master_name, Some(&self.node))
                .map_err(Unasked::Sentinel)
        });
        let mut st = lock(&self.state);
        let address = st.lanes[lane].address.clone();
        st.lanes[lane].busy = false;
        if id == st.started {
            st.pending = st.pending.saturating_sub(1);
        }
        match found {
            Ok(client) => {
                st.lanes[lane].sentinel = Some(sentinel);
                if id > st.taken {
                    st.taken = id;
                    self.take(&mut st, client);
                }
            }
            Err(e) => {
                // A fresh connection next time.
                drop(sentinel);
                st.lanes[lane].sentinel = None;
                st.last_error = Some(crate::secrets::scrubbed(&format!(
                    "sentinel {address}: {e}"
                )));
            }
        }
        drop(st);
        self.changed.notify_all();
    }

    /// Before the crate's client (which sets no timeouts) is asked: the sentinel answers within the deadline
    /// and names a primary whose port accepts a connection within it.
    fn guard(&self, info: &ConnectionInfo) -> Result<(), Unasked> {
        let mut con = plain(info, self.timeout)?;
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master_name)
            .query(&mut con)?;
        let (host, port) = named.ok_or_else(|| Unasked::NoPrimary(self.master_name.clone()))?;
        let address = host_port(&host, port);
        crate::addresses::register(&address);
        let unreached = |error| Unasked::Unreached {
            address: address.clone(),
            error,
        };
        let addrs = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
            .map_err(|e| unreached(Some(e)))?;
        let mut last = None;
        for a in addrs {
            match std::net::TcpStream::connect_timeout(&a, self.timeout) {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(unreached(last))
    }

    /// Takes up the primary a sentinel named (a new generation when it is another server, or none was in use).
    fn take(&self, st: &mut State, client: redis::Client) {
        let address = address_of(&client);
        st.confirmed = Some(Instant::now());
        if st.primary.as_ref().is_some_and(|p| p.address == address) {
            return;
        }
        crate::addresses::register(&address);
        match st.last_address.replace(address.clone()) {
            Some(old) if old != address => log::warn!(
                "store: the sentinels name {address} as the primary {:?} now (was {old}); following it",
                self.master_name
            ),
            // The same server again, after a call to it failed.
            Some(_) => {}
            None => log::info!(
                "store: the sentinels name {address} as the primary {:?}",
                self.master_name
            ),
        }
        st.generation += 1;
        st.primary = Some(Primary {
            address,
            client,
            generation: st.generation,
        });
    }
}

/// No primary found within the store's deadline: the sentinels named none that answers.
#[derive(Debug, Clone)]
pub(crate) struct NoPrimary {
    pub master_name: String,
    /// What the last lookup ran into (None: no sentinel answered).
    pub last_error: Option<String>,
}

impl std::fmt::Display for NoPrimary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the sentinels name no primary {:?} that answers ({})",
            self.master_name,
            self.last_error.as_deref().unwrap_or("no sentinel answers")
        )
    }
}

impl std::error::Error for NoPrimary {}

/// Why a lane's sentinel was not asked for the primary, or named none that answers.
#[derive(Debug)]
enum Unasked {
    /// The sentinel did not answer, or refused (as the crate's client reports it).
    Sentinel(redis::RedisError),
    /// The sentinel knows no primary of that name.
    NoPrimary(String),
    /// The primary it names does not accept a connection (None: its name resolves to no address).
    Unreached {
        address: String,
        error: Option<std::io::Error>,
    },
}

impl From<redis::RedisError> for Unasked {
    fn from(e: redis::RedisError) -> Unasked {
        Unasked::Sentinel(e)
    }
}

impl std::fmt::Display for Unasked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unasked::Sentinel(e) => write!(f, "{e}"),
            Unasked::NoPrimary(name) => write!(f, "it knows no primary {name:?}"),
            Unasked::Unreached {
                address,
                error: Some(e),
            } => write!(f, "the primary it names, {address}: {e}"),
            Unasked::Unreached {
                address,
                error: None,
            } => write!(f, "the primary it names, {address}: no address"),
        }
    }
}

/// A connection with read and write deadlines.
fn plain(info: &ConnectionInfo, within: Duration) -> redis::RedisResult<redis::Connection> {
    let con = redis::Client::open(info.clone())?.get_connection_with_timeout(within)?;
    con.set_read_timeout(Some(within))?;
    con.set_write_timeout(Some(within))?;
    Ok(con)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::store::{OnUnavailable, ReplicaWait, SentinelSettings};

    fn settings(sentinels: Vec<(String, u16)>, timeout: Duration) -> StoreSettings {
        StoreSettings {
            url: String::new(),
            host: String::new(),
            port: 0,
            db: 0,
            username: None,
            sentinel: Some(SentinelSettings {
                addresses: sentinels,
                master_name: "m".into(),
                password_env: None,
                password: None,
                missing_password: None,
            }),
            replica_wait: ReplicaWait::Changes,
            password_env: None,
            password: None,
            missing_password: None,
            prefix: "t:".into(),
            on_unavailable: OnUnavailable::Closed,
            timeout,
            usage_stream_max: 1000,
            lease: Duration::from_secs(30),
            allot: Duration::ZERO,
        }
    }

    #[test]
    fn a_sentinel_that_hangs_or_is_gone_holds_no_caller_past_the_deadline() {
        // One sentinel accepts connections and never answers (a hung process); another port refuses.
        let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let hung_port = hung.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for c in hung.incoming() {
                held.push(c);
            }
        });
        let gone_port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let timeout = Duration::from_millis(200);
        let f = Follower::new(&settings(
            vec![
                ("127.0.0.1".into(), hung_port),
                ("127.0.0.1".into(), gone_port),
            ],
            timeout,
        ))
        .unwrap();
        for _ in 0..3 {
            let began = Instant::now();
            let e = f.primary().err().expect("no primary");
            assert!(
                began.elapsed() < timeout * 10,
                "waited {:?}",
                began.elapsed()
            );
            assert!(e.to_string().contains("\"m\""), "{e}");
            std::thread::sleep(RETRY_AFTER);
        }
        assert!(f.address().is_none());
    }
}
