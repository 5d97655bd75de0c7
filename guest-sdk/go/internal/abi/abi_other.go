//go:build !wasip1

// Package abi is the canonical-ABI glue between Go and the
// toolgate:guard@0.3.0 contract. Off wasip1 (unit tests of a guard on the
// build machine) only the host functions exist: Log writes to stderr,
// Config returns OffWasmConfig ("{}" unless a test sets it) and the state
// functions work on an in-memory map of the process's.
package abi

import (
	"fmt"
	"os"
	"strconv"
	"sync"
)

var levels = [...]string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR"}

// Log writes the line to stderr.
func Log(level uint32, msg string) {
	name := "LEVEL?"
	if int(level) < len(levels) {
		name = levels[level]
	}
	fmt.Fprintf(os.Stderr, "%s %s\n", name, msg)
}

// OffWasmConfig is what Config returns off wasip1.
var OffWasmConfig = "{}"

// Config returns OffWasmConfig.
func Config() string { return OffWasmConfig }

// stateKey is one key of the in-memory state: its scope and its name.
type stateKey struct {
	scope uint32
	key   string
}

var (
	stateMu  sync.Mutex
	stateMap = map[stateKey]string{}
)

// StateGet reads the in-memory state.
func StateGet(scope uint32, key string) (string, bool) {
	stateMu.Lock()
	defer stateMu.Unlock()
	v, ok := stateMap[stateKey{scope, key}]
	return v, ok
}

// StateSet writes the in-memory state; a ttl of 0 removes the key, any
// other ttl is ignored (nothing expires off wasm).
func StateSet(scope uint32, key, value string, hasTTL bool, ttlMs uint64) {
	stateMu.Lock()
	defer stateMu.Unlock()
	if hasTTL && ttlMs == 0 {
		delete(stateMap, stateKey{scope, key})
		return
	}
	stateMap[stateKey{scope, key}] = value
}

// StateDelete removes a key of the in-memory state.
func StateDelete(scope uint32, key string) {
	stateMu.Lock()
	defer stateMu.Unlock()
	delete(stateMap, stateKey{scope, key})
}

// StateAdd adds delta to the decimal integer at key (absent: 0) and returns
// the sum; it panics, as the host traps, when the value is not a decimal
// integer or the sum is outside int64. The ttl is ignored.
func StateAdd(scope uint32, key string, delta int64, hasTTL bool, ttlMs uint64) int64 {
	stateMu.Lock()
	defer stateMu.Unlock()
	k := stateKey{scope, key}
	var current int64
	if v, ok := stateMap[k]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("state add on %q: not a decimal integer", key))
		}
		current = n
	}
	sum := current + delta
	if (delta > 0 && sum < current) || (delta < 0 && sum > current) {
		panic(fmt.Sprintf("state add on %q: outside int64", key))
	}
	stateMap[k] = strconv.FormatInt(sum, 10)
	return sum
}

// StateReset empties the in-memory state.
func StateReset() {
	stateMu.Lock()
	defer stateMu.Unlock()
	clear(stateMap)
}
