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
//! is reloaded. A registry splits both evenly between its directories (the
//! global one and each tenant's, [`PreparedShare`]): one tenant's plugins
//! never take the prepared instances everyone else's would have.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::Instance;

use crate::runtime::sandbox::Sandbox;

/// How many instances a plugin keeps made ahead of need (`prepared` in a
/// manifest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Depth {
    /// Decided at load: `AUTO_DEPTH` when one instantiation of the plugin
    /// (the best of `AUTO_SAMPLES` after the load probe) takes at least
    /// `AUTO_THRESHOLD`, else none.
    #[default]
    Auto,
    /// Exactly this many (at most `MAX_DEPTH`); 0: none.
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

/// The engine-wide count of pool slots prepared instances (and shadow
/// guard calls) may hold: the slots no share reserves (the registry sets
/// it at every load).
#[derive(Debug)]
pub struct PreparedSlots {
    room: AtomicU32,
    /// The directories the room and the memory are split between.
    parts: AtomicU32,
    live: AtomicU32,
    bytes: AtomicU64,
    made: AtomicU64,
}

impl PreparedSlots {
    /// Room for `room` prepared instances.
    pub(crate) fn new(room: u32) -> Arc<PreparedSlots> {
        Arc::new(PreparedSlots {
            room: AtomicU32::new(room),
            parts: AtomicU32::new(1),
            live: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
            made: AtomicU64::new(0),
        })
    }

    /// Sets the room, split between `parts` directories (each
    /// [`PreparedShare`] may hold its part of it and of
    /// [`MAX_PREPARED_BYTES`]); returns whether the instances prepared now
    /// are to be discarded: more than the room allows, or split otherwise.
    pub(crate) fn set_room(&self, room: u32, parts: u32) -> bool {
        self.room.store(room, Ordering::Relaxed);
        let was = self.parts.swap(parts.max(1), Ordering::Relaxed);
        self.live.load(Ordering::Relaxed) > room || was != parts.max(1)
    }

    /// What one directory may hold: instances, bytes.
    fn part(&self) -> (u32, u64) {
        let parts = self.parts.load(Ordering::Relaxed).max(1);
        (
            (self.room.load(Ordering::Relaxed) / parts).max(1),
            MAX_PREPARED_BYTES / u64::from(parts),
        )
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

    /// A slot for one shadow guard call (`crate::runtime::backlog`): counted
    /// with the prepared instances against the same room, so neither can
    /// take a slot a share reserves. `None` when the room is taken.
    pub(crate) fn spare_slot(self: &Arc<Self>) -> Option<Slot> {
        self.reserve(None)
    }

    fn reserve(self: &Arc<Self>, share: Option<&Arc<PreparedShare>>) -> Option<Slot> {
        let room = self.room.load(Ordering::Relaxed);
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < room).then_some(n + 1)
            })
            .ok()?;
        let mut slot = Slot {
            slots: Arc::clone(self),
            share: None,
            bytes: 0,
        };
        if let Some(share) = share {
            let (most, _) = self.part();
            // On failure `slot` drops and gives the engine's count back.
            share
                .live
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                    (n < most).then_some(n + 1)
                })
                .ok()?;
            slot.share = Some(Arc::clone(share));
        }
        Some(slot)
    }
}

/// The prepared instances of one plugin directory (the global one or a
/// tenant's), counted together against its part of the engine's room and
/// of [`MAX_PREPARED_BYTES`] (see [`PreparedSlots::set_room`]).
#[derive(Debug, Default)]
pub struct PreparedShare {
    live: AtomicU32,
    bytes: AtomicU64,
}

#[cfg(test)]
impl PreparedShare {
    /// Prepared instances its plugins hold now.
    fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed)
    }
}

/// Adds `bytes` to `total` unless that passes `most`.
fn add_within(total: &AtomicU64, bytes: u64, most: u64) -> bool {
    total
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
            n.checked_add(bytes).filter(|&t| t <= most)
        })
        .is_ok()
}

/// One prepared instance's claim on a pool slot and on the memory its
/// start-up committed, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<PreparedSlots>,
    /// The directory's share it counts against too, once counted.
    share: Option<Arc<PreparedShare>>,
    bytes: u64,
}

impl Slot {
    /// Claims `bytes` of the prepared instances' memory; false (nothing
    /// claimed) when that would pass [`MAX_PREPARED_BYTES`] or its
    /// directory's part of it.
    pub(crate) fn hold(&mut self, bytes: u64) -> bool {
        if !add_within(&self.slots.bytes, bytes, MAX_PREPARED_BYTES) {
            return false;
        }
        if let Some(share) = &self.share
            && !add_within(&share.bytes, bytes, self.slots.part().1)
        {
            self.slots.bytes.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        self.bytes = bytes;
        self.slots.made.fetch_add(1, Ordering::Relaxed);
        true
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.slots.live.fetch_sub(1, Ordering::AcqRel);
        if let Some(share) = &self.share {
            share.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
            share.live.fetch_sub(1, Ordering::AcqRel);
        }
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
    /// Its directory's share, when a registry loaded it.
    share: Option<Arc<PreparedShare>>,
    ready: Mutex<Vec<Ready>>,
    refilling: AtomicBool,
    calls: AtomicU64,
}

impl Prepared {
    /// Up to `depth` instances, in `slots` (and in `share`, if given).
    pub(crate) fn new(
        depth: usize,
        slots: Arc<PreparedSlots>,
        share: Option<Arc<PreparedShare>>,
    ) -> Prepared {
        Prepared {
            depth,
            slots,
            share,
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
            .then(|| self.slots.reserve(self.share.as_ref()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_holds_its_part_of_the_room_and_of_the_memory() {
        let slots = PreparedSlots::new(8);
        assert!(slots.set_room(8, 2), "split otherwise: discard");
        assert!(!slots.set_room(8, 2), "unchanged");
        let (a, b) = (
            Arc::new(PreparedShare::default()),
            Arc::new(PreparedShare::default()),
        );
        let mut held: Vec<Slot> = (0..4)
            .map(|_| slots.reserve(Some(&a)).expect("within a's part"))
            .collect();
        assert!(slots.reserve(Some(&a)).is_none(), "past a's part");
        assert_eq!((a.live(), slots.live()), (4, 4), "the refusal took nothing");
        let mut theirs = slots.reserve(Some(&b)).expect("b's part is untouched");
        assert!(held[0].hold(MAX_PREPARED_BYTES / 2));
        assert!(!held[1].hold(1), "a's part of the memory is full");
        assert!(theirs.hold(MAX_PREPARED_BYTES / 2), "b's is not");
        held.clear();
        assert_eq!((a.live(), b.live(), slots.live()), (0, 1, 1));
        drop(theirs);
        assert_eq!(slots.live(), 0);
        assert_eq!(slots.bytes.load(Ordering::Relaxed), 0);
        assert_eq!(b.bytes.load(Ordering::Relaxed), 0);
    }
}
