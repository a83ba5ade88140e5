//! Knowing which upstream socket a worker is waiting on, so it can be cut when the client goes away.
//!
//! `ureq` pools connections and does not say which one a request uses. The connector here wraps ureq's own
//! TCP connector and keeps the socket's shutdown handle in the transport; every time the transport sends or
//! waits for input it publishes that handle into the slot the current thread has bound (if any). A watchdog
//! thread that sees the client disconnect shuts the socket down, and the worker's blocked read returns at
//! once. This uses ureq's `unversioned` transport API, so ureq is pinned to one minor version.

use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, NextTimeout, ShutdownHandle, TcpConnector,
    Transport,
};

/// Where a worker's current upstream socket is published.
#[derive(Default)]
pub struct UpstreamSlot {
    handle: Mutex<Option<Weak<dyn ShutdownHandle>>>,
}

impl UpstreamSlot {
    /// Cuts the upstream connection the bound thread is using (if it is still open).
    pub fn shutdown(&self) {
        let handle = match self.handle.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        if let Some(h) = handle.and_then(|w| w.upgrade()) {
            h.shutdown();
        }
    }

    fn publish(&self, h: &Weak<dyn ShutdownHandle>) {
        if let Ok(mut g) = self.handle.lock() {
            let same = g.as_ref().is_some_and(|old| Weak::ptr_eq(old, h));
            if !same {
                *g = Some(h.clone());
            }
        }
    }
}

thread_local! {
    static BOUND: RefCell<Option<Arc<UpstreamSlot>>> = const { RefCell::new(None) };
}

/// Binds (or, with `None`, unbinds) the slot upstream sockets used on this thread are published to.
pub fn bind(slot: Option<Arc<UpstreamSlot>>) {
    BOUND.with(|b| *b.borrow_mut() = slot);
}

fn publish(h: &Option<Weak<dyn ShutdownHandle>>) {
    if let Some(h) = h {
        BOUND.with(|b| {
            if let Some(slot) = b.borrow().as_ref() {
                slot.publish(h);
            }
        });
    }
}

/// ureq's TCP connector, keeping each socket's shutdown handle.
#[derive(Debug, Default)]
pub struct TapConnector;

type Register = dyn Fn(Weak<dyn ShutdownHandle>) -> Result<(), ureq::Error> + Send + Sync;

impl<In: Transport> Connector<In> for TapConnector {
    type Out = Either<In, Tapped>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if chained.is_some() {
            // A proxy connection made earlier in the chain: used as it is.
            return Ok(chained.map(Either::A));
        }
        let captured: Arc<Mutex<Option<Weak<dyn ShutdownHandle>>>> = Arc::default();
        let keep = captured.clone();
        let original = details.register_shutdown.clone();
        let register: Arc<Register> = Arc::new(move |w: Weak<dyn ShutdownHandle>| {
            if let Ok(mut g) = keep.lock() {
                *g = Some(w.clone());
            }
            original(w)
        });
        let inner_details = ConnectionDetails {
            uri: details.uri,
            addrs: details.addrs.clone(),
            config: details.config,
            request_level: details.request_level,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: details.current_time.clone(),
            run_connector: details.run_connector.clone(),
            register_shutdown: register,
        };
        let connected: Option<Either<(), _>> =
            TcpConnector::default().connect(&inner_details, None)?;
        let Some(Either::B(tcp)) = connected else {
            return Ok(None);
        };
        let handle = captured.lock().ok().and_then(|mut g| g.take());
        Ok(Some(Either::B(Tapped {
            inner: Box::new(tcp),
            handle,
        })))
    }
}

/// A TCP transport that publishes its shutdown handle to the thread using it.
pub struct Tapped {
    inner: Box<dyn Transport>,
    handle: Option<Weak<dyn ShutdownHandle>>,
}

impl fmt::Debug for Tapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tapped({:?})", self.inner)
    }
}

impl Transport for Tapped {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        publish(&self.handle);
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        publish(&self.handle);
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}
