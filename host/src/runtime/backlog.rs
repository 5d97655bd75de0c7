//! Work run after the answer (shadow guards, docs/design.md "Shadow
//! guards"), bounded: at most `cap` runs in flight host-wide, no account
//! more than a quarter of them, and a run that finds no room is dropped
//! and counted, never queued — so a process under load cannot pile it up.
//!
//! Each of a run's guard calls takes only what no share reserves ([`Spare`]):
//! a pool slot outside every share (counted with the prepared instances,
//! `crate::runtime::prepared`) and memory outside every share's reservation
//! in the host's memory budget — never an instance, memory or place an
//! enforced call of any account could use. A call that finds none is not
//! waited for: its run is dropped and counted too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::runtime::prepared::{PreparedSlots, Slot};

/// Room for runs after the answer.
#[derive(Debug)]
pub struct Backlog {
    cap: usize,
    taken: Mutex<Taken>,
    dropped: AtomicU64,
    /// Memory no share reserves, MiB (`u64::MAX` until a registry says).
    spare_mib: AtomicU64,
    /// Of it, what shadow calls hold now, MiB.
    held_mib: AtomicU64,
}

#[derive(Debug, Default)]
struct Taken {
    all: usize,
    by_account: HashMap<Arc<str>, usize>,
}

/// One run's place; given back when dropped.
#[derive(Debug)]
pub struct Place {
    backlog: Arc<Backlog>,
    account: Arc<str>,
}

/// What one shadow guard call holds of the spare room: a pool slot no
/// share reserves and its memory; given back when dropped.
#[derive(Debug)]
pub struct Spare {
    _slot: Slot,
    backlog: Arc<Backlog>,
    mib: u64,
}

impl Backlog {
    /// Room for `cap` runs (at least 1), an account's at most a quarter
    /// of them (at least 1).
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Backlog {
            cap: cap.max(1),
            taken: Mutex::default(),
            dropped: AtomicU64::new(0),
            spare_mib: AtomicU64::new(u64::MAX),
            held_mib: AtomicU64::new(0),
        })
    }

    /// Sets the memory no share reserves, MiB (a registry, at every load:
    /// its memory budget less what its shares reserve).
    pub(crate) fn set_spare_mib(&self, mib: u64) {
        self.spare_mib.store(mib, Ordering::Relaxed);
    }

    /// Room for one shadow guard call of `memory_bytes`: a pool slot of
    /// `slots` no share reserves, and that much of the spare memory. `None`
    /// — the call's run is dropped and counted — when either is taken; never
    /// waited for.
    pub(crate) fn spare(
        self: &Arc<Self>,
        slots: &Arc<PreparedSlots>,
        memory_bytes: usize,
    ) -> Option<Spare> {
        let mib = (memory_bytes as u64).div_ceil(1 << 20).max(1);
        let room = self.spare_mib.load(Ordering::Relaxed);
        let spare = slots.spare_slot().and_then(|slot| {
            self.held_mib
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                    n.checked_add(mib).filter(|&t| t <= room)
                })
                .ok()
                .map(|_| Spare {
                    _slot: slot,
                    backlog: Arc::clone(self),
                    mib,
                })
        });
        if spare.is_none() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        spare
    }

    /// The most runs one account may have in flight.
    pub fn account_cap(&self) -> usize {
        (self.cap / 4).max(1)
    }

    /// A place for a run of `account` (`""`: calls without a tenant), or
    /// `None` — the run is dropped and counted — when the backlog or the
    /// account's part of it is full.
    pub fn take(self: &Arc<Self>, account: &str) -> Option<Place> {
        let taken = self.taken.lock().ok().and_then(|mut t| {
            let mine = t.by_account.get(account).copied().unwrap_or(0);
            if t.all >= self.cap || mine >= self.account_cap() {
                return None;
            }
            t.all += 1;
            let key: Arc<str> = account.into();
            *t.by_account.entry(Arc::clone(&key)).or_default() += 1;
            Some(key)
        });
        match taken {
            Some(account) => Some(Place {
                backlog: Arc::clone(self),
                account,
            }),
            None => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Runs dropped for want of room since the host started: never
    /// started, or stopped at a call that found no spare room.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Runs in flight now.
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.taken.lock().map_or(0, |t| t.all)
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        self.backlog.held_mib.fetch_sub(self.mib, Ordering::AcqRel);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Ok(mut t) = self.backlog.taken.lock() {
            t.all = t.all.saturating_sub(1);
            if let Some(n) = t.by_account.get_mut(&self.account) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    t.by_account.remove(&self.account);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cap and an account's quarter hold; a place given back is room
    /// again; every refusal is counted.
    #[test]
    fn room_is_bounded_per_host_and_per_account() {
        let backlog = Backlog::new(8);
        let a: Vec<_> = (0..3).filter_map(|_| backlog.take("a")).collect();
        assert_eq!(a.len(), 2, "a quarter of 8");
        assert_eq!(backlog.dropped(), 1);
        let others: Vec<_> = ["b", "b", "c", "c", "", "", "d", "d"]
            .iter()
            .filter_map(|t| backlog.take(t))
            .collect();
        assert_eq!(others.len(), 6, "the host's 8 in all");
        assert_eq!((backlog.in_flight(), backlog.dropped()), (8, 3));
        drop(a);
        assert_eq!(backlog.in_flight(), 6);
        assert!(backlog.take("a").is_some());
    }

    /// A shadow call takes a slot no share reserves and spare memory, or
    /// nothing (counted as a dropped run); both come back when it ends.
    #[test]
    fn shadow_calls_take_only_the_spare_slots_and_memory() {
        let backlog = Backlog::new(8);
        let slots = PreparedSlots::new(3);
        backlog.set_spare_mib(100);
        let a = backlog.spare(&slots, 60 << 20).expect("room");
        assert!(backlog.spare(&slots, 41 << 20).is_none(), "past the memory");
        assert_eq!(slots.live(), 1, "the refusal holds no slot");
        let b = backlog.spare(&slots, 40 << 20).expect("the rest of it");
        backlog.set_spare_mib(u64::MAX);
        let c = backlog.spare(&slots, 1).expect("the third slot");
        assert!(backlog.spare(&slots, 1).is_none(), "past the slots");
        assert_eq!(backlog.dropped(), 2);
        drop((a, b, c));
        assert_eq!(slots.live(), 0);
        backlog.set_spare_mib(100);
        assert!(backlog.spare(&slots, 100 << 20).is_some(), "all given back");
    }
}
