//! State a guard keeps between calls, in a scope the host chooses.
//!
//! Every hook call runs on a fresh instance, so a guard that must remember
//! — count calls, notice a loop, enforce a rate — keeps what it needs here.
//! A guard names only the [`Scope`] and a key in it; the host puts the
//! call's tenant and the plugin's name in front (and, for [`Scope::Run`],
//! the event's `run_id`), so no key can reach another tenant's, plugin's
//! or run's state.
//!
//! ```rust,ignore
//! use toolgate_guest::state::{self, Scope};
//!
//! // At most 2 send_email per run:
//! let sent = state::add(Scope::Run, "send_email", 1);
//! if sent > 2 {
//!     state::add(Scope::Run, "send_email", -1); // a refused call is not counted
//!     return Verdict::cancel("Tool call limit exceeded. Do not call 'send_email' again.");
//! }
//! ```
//!
//! Within one call a guard reads its own writes. [`set`] and [`delete`]
//! become visible to other calls when this call returns; a call that faults
//! leaves none of them. [`add`] is applied at once and atomically, so
//! concurrent calls count exactly; a call that faults gives back what it
//! added. Going over a budget (operations per call, keys or bytes per
//! scope), the store being unreachable, or `add` on a value that is not an
//! integer traps the call: the host treats it like any fault.
//!
//! Off WebAssembly (a guard's native unit tests), the same functions work
//! on an in-memory map of this thread's; [`reset`] empties it.

/// Whose state an operation reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// This run's (tenant, plugin, the event's `run_id`): dropped once the
    /// run has been idle for the plugin's `state_run_ttl_s`.
    Run,
    /// The tenant's (tenant, plugin): shared by all its runs, and by every
    /// replica sharing one store.
    Tenant,
}

/// The value at `key`, or `None` when absent or expired.
pub fn get(scope: Scope, key: &str) -> Option<String> {
    imp::get(scope, key)
}

/// Sets `key` to `value` for as long as its scope lives.
pub fn set(scope: Scope, key: &str, value: &str) {
    imp::set(scope, key, value, None)
}

/// Sets `key` to `value` for `ttl_ms` milliseconds (0: gone at once;
/// longer than the plugin's `state_max_ttl_s`: cut to it).
pub fn set_with_ttl(scope: Scope, key: &str, value: &str, ttl_ms: u64) {
    imp::set(scope, key, value, Some(ttl_ms))
}

/// Removes `key`.
pub fn delete(scope: Scope, key: &str) {
    imp::delete(scope, key)
}

/// Adds `delta` to the integer at `key` (absent: 0), at once and
/// atomically; returns the new value.
pub fn add(scope: Scope, key: &str, delta: i64) -> i64 {
    imp::add(scope, key, delta, None)
}

/// Like [`add`]; a key this call creates expires after `ttl_ms` (an
/// existing key keeps its expiry): a counter over a fixed window.
pub fn add_with_ttl(scope: Scope, key: &str, delta: i64, ttl_ms: u64) -> i64 {
    imp::add(scope, key, delta, Some(ttl_ms))
}

/// Empties the native test map (off WebAssembly only; on WebAssembly it
/// does nothing: state belongs to the host).
pub fn reset() {
    imp::reset()
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::Scope;
    use crate::bindings::base::toolgate::guard::state as wit;

    fn scope(s: Scope) -> wit::Scope {
        match s {
            Scope::Run => wit::Scope::Run,
            Scope::Tenant => wit::Scope::Tenant,
        }
    }

    pub fn get(s: Scope, key: &str) -> Option<String> {
        wit::get(scope(s), key)
    }

    pub fn set(s: Scope, key: &str, value: &str, ttl_ms: Option<u64>) {
        wit::set(scope(s), key, value, ttl_ms)
    }

    pub fn delete(s: Scope, key: &str) {
        wit::delete(scope(s), key)
    }

    pub fn add(s: Scope, key: &str, delta: i64, ttl_ms: Option<u64>) -> i64 {
        wit::add(scope(s), key, delta, ttl_ms)
    }

    pub fn reset() {}
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use super::Scope;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    thread_local! {
        static MAP: RefCell<BTreeMap<(Scope, String), String>> = const { RefCell::new(BTreeMap::new()) };
    }

    pub fn get(s: Scope, key: &str) -> Option<String> {
        MAP.with(|m| m.borrow().get(&(s, key.to_string())).cloned())
    }

    pub fn set(s: Scope, key: &str, value: &str, ttl_ms: Option<u64>) {
        MAP.with(|m| {
            let mut m = m.borrow_mut();
            if ttl_ms == Some(0) {
                m.remove(&(s, key.to_string()));
            } else {
                m.insert((s, key.to_string()), value.to_string());
            }
        })
    }

    pub fn delete(s: Scope, key: &str) {
        MAP.with(|m| m.borrow_mut().remove(&(s, key.to_string())));
    }

    pub fn add(s: Scope, key: &str, delta: i64, _ttl_ms: Option<u64>) -> i64 {
        MAP.with(|m| {
            let mut m = m.borrow_mut();
            let slot = m.entry((s, key.to_string())).or_insert_with(|| "0".into());
            let current: i64 = slot
                .parse()
                .unwrap_or_else(|_| panic!("state add on {key:?}: not a decimal integer"));
            let sum = current
                .checked_add(delta)
                .unwrap_or_else(|| panic!("state add on {key:?}: outside i64"));
            *slot = sum.to_string();
            sum
        })
    }

    pub fn reset() {
        MAP.with(|m| m.borrow_mut().clear())
    }
}
