// Package state keeps what a guard remembers between calls, in a scope the
// host chooses (the contract's state interface, toolgate:guard@0.3.0).
//
// Every hook call runs on a fresh instance, so a guard that must remember —
// count calls, notice a loop, enforce a rate — keeps what it needs here. A
// guard names only the [Scope] and a key in it; the host puts the call's
// tenant and the plugin's name in front (and, for [Run], the event's run id),
// so no key can reach another tenant's, plugin's or run's state.
//
//	// At most 2 send_email per run:
//	if state.Add(state.Run, "send_email", 1) > 2 {
//		state.Add(state.Run, "send_email", -1) // a refused call is not counted
//		return guest.Cancel("Tool call limit exceeded. Do not call 'send_email' again.")
//	}
//
// Within one call a guard reads its own writes. [Set] and [Delete] become
// visible to other calls when this call returns; a call that faults leaves
// none of them. [Add] is applied at once and atomically, so concurrent calls
// count exactly; a call that faults gives back what it added. Going over a
// budget (operations per call, keys or bytes per scope), the store being
// unreachable, or Add on a value that is not a decimal integer traps the
// call: the host treats it like any fault (the guard's on_error applies).
//
// Importing this package is what makes the component import the state
// interface; a guard that does not keeps no state.
//
// Off wasip1 (a guard's native unit tests) the same functions work on an
// in-memory map of the process's, shared by every goroutine: a set is seen
// at once, nothing expires (a ttl of 0 still removes the key) and Add on a
// value that is not an integer panics. [Reset] empties it.
package state

import (
	"math"
	"time"

	"toolgate.dev/guest/internal/abi"
)

// Scope is whose state an operation reads or writes.
type Scope uint32

const (
	// Run is this run's state, owned by (tenant, plugin, the event's run
	// id); dropped once the run has been idle for the plugin's
	// state_run_ttl_s.
	Run Scope = iota
	// Tenant is the tenant's state, owned by (tenant, plugin): shared by all
	// its runs, and by every replica sharing one store. The guard builds its
	// own keys in it (say, from a conversation id in the hook's state).
	Tenant
)

// String returns "run" or "tenant", the contract's names.
func (s Scope) String() string {
	switch s {
	case Run:
		return "run"
	case Tenant:
		return "tenant"
	}
	return "scope(?)"
}

// MaxTTL is the longest ttl: the host cuts it to the plugin's
// state_max_ttl_s.
const MaxTTL = time.Duration(math.MaxInt64)

// Get returns the value at key, and false when it is absent or expired.
func Get(scope Scope, key string) (string, bool) {
	return abi.StateGet(uint32(scope), key)
}

// Set sets key to value for as long as its scope lives.
func Set(scope Scope, key, value string) {
	abi.StateSet(uint32(scope), key, value, false, 0)
}

// SetTTL sets key to value for ttl, rounded up to a whole millisecond (0 or
// less: gone at once, like [Delete]; longer than the plugin's
// state_max_ttl_s: cut to it).
func SetTTL(scope Scope, key, value string, ttl time.Duration) {
	abi.StateSet(uint32(scope), key, value, true, millis(ttl))
}

// Delete removes key.
func Delete(scope Scope, key string) {
	abi.StateDelete(uint32(scope), key)
}

// Add adds delta to the decimal integer at key (absent: 0), at once and
// atomically, and returns the new value.
func Add(scope Scope, key string, delta int64) int64 {
	return abi.StateAdd(uint32(scope), key, delta, false, 0)
}

// AddTTL is [Add]; a key this call creates expires after ttl (an existing
// key keeps its expiry): a counter over a fixed window. Pass [MaxTTL] for as
// long as the plugin allows.
func AddTTL(scope Scope, key string, delta int64, ttl time.Duration) int64 {
	return abi.StateAdd(uint32(scope), key, delta, true, millis(ttl))
}

// Reset empties the in-memory state of native tests. On wasip1 it does
// nothing: state belongs to the host.
func Reset() { abi.StateReset() }

// millis is ttl in whole milliseconds, rounded up; 0 for none left.
func millis(ttl time.Duration) uint64 {
	if ttl <= 0 {
		return 0
	}
	ms := uint64(ttl / time.Millisecond)
	if ttl%time.Millisecond != 0 {
		ms++
	}
	return ms
}
