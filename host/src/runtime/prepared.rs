//! Prepared instances: instances of a plugin made ahead of need, off the
//! request path, each used for exactly one call and then dropped.
//!
//! A call normally pays for instantiating its guard (the pool slot, the
//! memory image, the component's start functions). A plugin with a
//! `prepared` depth above 0 keeps up to that many instances instantiated
//! and waiting; a call takes one (or, when none is ready, instantiates as
//! before). Isolation is unchanged: no instance ever serves two calls, and
//! one is never reused after a fault.
//!
//! Instances are made only while the plugin is **idle**: a background task
//! waits [`IDLE`] and makes one only if no call of the plugin started
//! meanwhile. Under sustained load every call instantiates its own, as
//! without prepared instances, and no work is added; what a caller saves
//! at light load is the instantiation (see BENCHMARKS.md).
//!
//! How many a plugin keeps is its [`Depth`]: by default [`Depth::Auto`],
//! decided at load by what an instantiation of the plugin costs. Measured
//! (BENCHMARKS.md): a Rust guard instantiates in ~10 µs and a caller at
//! light load gains nothing from a prepared instance; a Go guard (its
//! runtime's start-up, ~0.3 ms) or a componentize-py guard (~40 core
//! modules, ~0.8 ms) gains that much on every call at light load.
//!
//! What this holds: each waiting instance holds one pool slot and the
//! memory its start-up committed (a Rust guard: its initial linear memory,
//! ~1 MiB; an interpreted guest: tens of MiB). Only slots no share reserves
//! are used ([`PreparedSlots`]), so a prepared instance never stops a
//! call that is within its share; and all prepared instances together hold
//! at most [`MAX_PREPARED_BYTES`] of linear memory — an instance whose
//! start-up took more is dropped, and its plugin prepares no more until it
//! is reloaded.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::Instance;

use crate::sandbox::Sandbox;

/// How many instances a plugin keeps made ahead of need (`prepared` in a
/// manifest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Depth {
    /// Decided at load: [`AUTO_DEPTH`] when one instantiation of the plugin
    /// (the best of [`AUTO_SAMPLES`] after the load probe) takes at least
    /// [`AUTO_THRESHOLD`], else none.
    #[default]
    Auto,
    /// Exactly this many (at most [`MAX_DEPTH`]); 0: none.
    Fixed(u32),
}

impl std::fmt::Display for Depth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Depth::Auto => f.write_str("auto"),
            Depth::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// The most instances a plugin may keep prepared.
pub const MAX_DEPTH: u32 = 8;

/// The depth [`Depth::Auto`] picks for a plugin that is costly to
/// instantiate: one call at light load, and the next arriving meanwhile.
pub const AUTO_DEPTH: u32 = 2;

/// The instantiation time from which [`Depth::Auto`] prepares instances:
/// about ten times a Rust guard's, a third of a Go guard's.
pub const AUTO_THRESHOLD: Duration = Duration::from_micros(100);

/// Instantiations timed at load for [`Depth::Auto`] (the best counts: the
/// others met a busy machine).
pub const AUTO_SAMPLES: usize = 3;

/// The most linear memory all prepared instances may hold together.
pub const MAX_PREPARED_BYTES: u64 = 512 << 20;

/// How long a plugin has had no call starting before an instance is made
/// for it ahead of need.
pub const IDLE: Duration = Duration::from_millis(1);

/// The engine-wide count of pool slots prepared instances may hold: the
/// slots no share reserves (the registry sets it at every load).
#[derive(Debug)]
pub struct PreparedSlots {
    room: AtomicU32,
    live: AtomicU32,
    bytes: AtomicU64,
    made: AtomicU64,
}

impl PreparedSlots {
    /// Room for `room` prepared instances.
    pub(crate) fn new(room: u32) -> Arc<PreparedSlots> {
        Arc::new(PreparedSlots {
            room: AtomicU32::new(room),
            live: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
            made: AtomicU64::new(0),
        })
    }

    /// Sets the room; returns whether more instances are prepared now
    /// than it allows (the caller then discards them).
    pub(crate) fn set_room(&self, room: u32) -> bool {
        self.room.store(room, Ordering::Relaxed);
        self.live.load(Ordering::Relaxed) > room
    }

    /// Prepared instances alive now (waiting, or serving their one call).
    pub fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed)
    }

    /// Prepared instances made since the engine started.
    pub fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// The most there may be.
    pub fn room(&self) -> u32 {
        self.room.load(Ordering::Relaxed)
    }

    fn reserve(self: &Arc<Self>) -> Option<Slot> {
        let room = self.room.load(Ordering::Relaxed);
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < room).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot {
                slots: Arc::clone(self),
                bytes: 0,
            })
    }
}

/// One prepared instance's claim on a pool slot and on the memory its
/// start-up committed, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<PreparedSlots>,
    bytes: u64,
}

impl Slot {
    /// Claims `bytes` of the prepared instances' memory; false (nothing
    /// claimed) when that would pass [`MAX_PREPARED_BYTES`].
    pub(crate) fn hold(&mut self, bytes: u64) -> bool {
        let ok = self
            .slots
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                n.checked_add(bytes).filter(|&t| t <= MAX_PREPARED_BYTES)
            })
            .is_ok();
        if ok {
            self.bytes = bytes;
            self.slots.made.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.slots.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An instance made ahead of need, with its store. Dropping it drops the
/// store first, then gives its slot back.
pub(crate) struct Ready {
    pub(crate) store: Store<Sandbox>,
    pub(crate) instance: Instance,
    pub(crate) slot: Slot,
}

/// One plugin's prepared instances (shared by every copy of the plugin).
pub(crate) struct Prepared {
    depth: usize,
    slots: Arc<PreparedSlots>,
    ready: Mutex<Vec<Ready>>,
    refilling: AtomicBool,
    calls: AtomicU64,
}

impl Prepared {
    /// Up to `depth` instances, in `slots`.
    pub(crate) fn new(depth: usize, slots: Arc<PreparedSlots>) -> Prepared {
        Prepared {
            depth,
            slots,
            ready: Mutex::new(Vec::with_capacity(depth)),
            refilling: AtomicBool::new(false),
            calls: AtomicU64::new(0),
        }
    }

    /// A prepared instance, if one is waiting; counts the call.
    pub(crate) fn take(&self) -> Option<Ready> {
        if self.depth == 0 {
            return None;
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.lock().pop()
    }

    /// Instances kept waiting at most.
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    /// Calls that asked for an instance so far.
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Whether another instance should be made now: fewer than `depth`
    /// wait, and no refill is running (this call then is the refill, and
    /// must call [`Prepared::refilled`] when done).
    pub(crate) fn start_refill(&self) -> bool {
        self.depth > 0
            && self.lock().len() < self.depth
            && !self.refilling.swap(true, Ordering::AcqRel)
    }

    /// A pool slot for one more instance, if fewer than `depth` wait and
    /// the engine has room.
    pub(crate) fn slot(&self) -> Option<Slot> {
        (self.lock().len() < self.depth)
            .then(|| self.slots.reserve())
            .flatten()
    }

    /// Adds a made instance.
    pub(crate) fn put(&self, ready: Ready) {
        self.lock().push(ready);
    }

    /// The refill is over.
    pub(crate) fn refilled(&self) {
        self.refilling.store(false, Ordering::Release);
    }

    /// Drops every waiting instance.
    pub(crate) fn discard(&self) {
        let dropped = std::mem::take(&mut *self.lock());
        drop(dropped);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Ready>> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
