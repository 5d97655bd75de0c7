//go:build wasip1

// Package abi is the canonical-ABI glue between Go and the
// toolgate:guard@0.3.0 contract: the allocator the host lowers arguments
// with, lifting of arguments, lowering of results, and the host imports
// (host, state and http).
//
// The allocator never touches the Go heap. A Go garbage collection that
// starts inside cabi_realloc would call a WASI import (the clock), and a
// component may not call imports while the host is lowering arguments into
// it: the call traps ("cannot leave component instance"). So cabi_realloc is
// a bump allocator over chunks taken from the runtime's page allocator (the
// memory the Go heap itself grows from, never scanned or collected), and
// the arena is reset once each export has copied its arguments into Go
// values. cabi_realloc_adapter serves the WASI adapter's two long-lived
// pages from a static buffer, because the adapter asks for them during
// runtime start-up, before the Go heap exists.
package abi

import "unsafe"

// trap executes `unreachable`.
func trap()

// --- allocation -------------------------------------------------------------

const pageSize = 64 << 10

type chunk struct{ base, end uintptr }

var (
	chunks  [48]chunk
	nchunks int
	cur     int     // the chunk being filled
	next    uintptr // its first free byte
)

//go:linkname sysAllocOS runtime.sysAllocOS
func sysAllocOS(n uintptr, name string) unsafe.Pointer

//go:linkname acquirem runtime.acquirem
func acquirem() unsafe.Pointer

//go:linkname releasem runtime.releasem
func releasem(mp unsafe.Pointer)

//go:linkname memmove runtime.memmove
func memmove(to, from unsafe.Pointer, n uintptr)

// cabiRealloc is the allocator the host lowers arguments (and import
// results) with. It is nosplit, as is everything it calls up to the
// runtime's page allocator, so it cannot grow the stack or be preempted.
//
//go:wasmexport cabi_realloc
//go:nosplit
func cabiRealloc(old, oldSize, align, newSize uint32) uint32 {
	if old != 0 && newSize <= oldSize {
		return old
	}
	p := alloc(uintptr(newSize), uintptr(align))
	if old != 0 && oldSize != 0 {
		memmove(ptr(uint32(p)), ptr(old), uintptr(oldSize))
	}
	return uint32(p)
}

//go:nosplit
func alloc(size, align uintptr) uintptr {
	if align == 0 || align&(align-1) != 0 {
		trap()
	}
	for cur < nchunks {
		p := (next + align - 1) &^ (align - 1)
		if p+size <= chunks[cur].end {
			next = p + size
			return p
		}
		cur++
		if cur < nchunks {
			next = chunks[cur].base
		}
	}
	return grow(size, align)
}

// grow adds a chunk big enough for size bytes at align (at least a page,
// and at least as big as the last chunk, so a long run of big calls needs
// few chunks) and allocates from it.
//
//go:nosplit
func grow(size, align uintptr) uintptr {
	if nchunks == len(chunks) {
		trap()
	}
	n := size + align
	if nchunks > 0 {
		if last := chunks[nchunks-1].end - chunks[nchunks-1].base; last > n {
			n = last
		}
	}
	n = (n + pageSize - 1) &^ (pageSize - 1)
	// Hold the M so a stack check in the runtime allocator cannot turn into
	// a preemption (and a goroutine switch) while the host is lowering.
	mp := acquirem()
	base := uintptr(sysAllocOS(n, "toolgate cabi_realloc"))
	releasem(mp)
	if base == 0 {
		trap()
	}
	chunks[nchunks] = chunk{base, base + n}
	cur = nchunks
	nchunks++
	p := (base + align - 1) &^ (align - 1)
	next = p + size
	return p
}

// ResetArena makes the whole arena free again. Exports call it once their
// arguments are copied into Go values.
func ResetArena() {
	cur = 0
	if nchunks > 0 {
		next = chunks[0].base
	}
}

// adapterMem holds the WASI adapter's allocations: its stack and its state,
// one page each, made once, while the Go runtime starts.
var (
	adapterMem  [2*pageSize + 64]byte
	adapterNext uintptr
)

//go:wasmexport cabi_realloc_adapter
//go:nosplit
func cabiReallocAdapter(old, oldSize, align, newSize uint32) uint32 {
	if old != 0 || align == 0 || align&(align-1) != 0 {
		trap()
	}
	base := uintptr(unsafe.Pointer(&adapterMem))
	if adapterNext == 0 {
		adapterNext = base
	}
	p := (adapterNext + uintptr(align) - 1) &^ (uintptr(align) - 1)
	if p+uintptr(newSize) > base+uintptr(len(adapterMem)) {
		trap()
	}
	adapterNext = p + uintptr(newSize)
	return uint32(p)
}

// --- lifting ------------------------------------------------------------------

// ptr turns a linear-memory address into a pointer.
//
//go:nosplit
func ptr(addr uint32) unsafe.Pointer { return unsafe.Add(nil, uintptr(addr)) }

// Bytes copies len bytes at addr into a new Go slice.
func Bytes(addr, n uint32) []byte {
	if n == 0 {
		return []byte{}
	}
	out := make([]byte, n)
	copy(out, unsafe.Slice((*byte)(ptr(addr)), n))
	return out
}

// String copies the string at (addr, n) into a Go string.
func String(addr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(ptr(addr)), n))
}

// Load32 reads the little-endian u32 at addr.
func Load32(addr uint32) uint32 { return *(*uint32)(ptr(addr)) }

// Load8 reads the byte at addr.
func Load8(addr uint32) uint8 { return *(*uint8)(ptr(addr)) }

// Load64 reads the little-endian u64 at addr.
func Load64(addr uint32) uint64 { return *(*uint64)(ptr(addr)) }

// Strings lifts a list<string> at (addr, n): n (ptr, len) pairs.
func Strings(addr, n uint32) []string {
	out := make([]string, n)
	for i := uint32(0); i < n; i++ {
		out[i] = String(Load32(addr+8*i), Load32(addr+8*i+4))
	}
	return out
}

// --- lowering -----------------------------------------------------------------

// kept holds what the last result points into until the next call, so the
// collector cannot free it before the host has copied it out.
var kept []any

// BeginCall forgets the previous call's results.
func BeginCall() {
	clear(kept)
	kept = kept[:0]
}

// Str returns the address and length of s, keeping s alive until the next
// call.
func Str(s string) (uint32, uint32) {
	if len(s) == 0 {
		return 0, 0
	}
	kept = append(kept, s)
	return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s)))), uint32(len(s))
}

// StrList lowers a list<string>, keeping it alive until the next call.
func StrList(list []string) (uint32, uint32) {
	if len(list) == 0 {
		return 0, 0
	}
	words := make([]uint32, 2*len(list))
	for i, s := range list {
		words[2*i], words[2*i+1] = Str(s)
	}
	kept = append(kept, words)
	return uint32(uintptr(unsafe.Pointer(&words[0]))), uint32(len(list))
}

// Addr is the linear-memory address of a return area.
func Addr[T any](p *T) uint32 { return uint32(uintptr(unsafe.Pointer(p))) }

// --- host imports -------------------------------------------------------------

//go:wasmimport toolgate:guard/host@0.3.0 log
func hostLog(level uint32, msg unsafe.Pointer, n uint32)

//go:wasmimport toolgate:guard/host@0.3.0 config
func hostConfig(ret unsafe.Pointer)

// Log calls the host's log.
func Log(level uint32, msg string) {
	hostLog(level, unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

var configRet [2]uint32

// Config calls the host's config and copies the JSON it returns.
func Config() string {
	hostConfig(unsafe.Pointer(&configRet))
	return String(configRet[0], configRet[1])
}

// --- state imports ------------------------------------------------------------
//
// Each one is imported only when a guard links the state package, so a guard
// that keeps no state imports no state interface. A string the host returns
// is lowered through cabi_realloc into the arena; it is copied into Go memory
// at once and the arena reset (nothing else in it is live during a call).

//go:wasmimport toolgate:guard/state@0.3.0 get
func stateGet(scope uint32, key unsafe.Pointer, keyLen uint32, ret unsafe.Pointer)

//go:wasmimport toolgate:guard/state@0.3.0 set
func stateSet(scope uint32, key unsafe.Pointer, keyLen uint32, value unsafe.Pointer, valueLen uint32, hasTTL uint32, ttlMs uint64)

//go:wasmimport toolgate:guard/state@0.3.0 delete
func stateDelete(scope uint32, key unsafe.Pointer, keyLen uint32)

//go:wasmimport toolgate:guard/state@0.3.0 add
func stateAdd(scope uint32, key unsafe.Pointer, keyLen uint32, delta int64, hasTTL uint32, ttlMs uint64) int64

// optionStringRet is the canonical-ABI layout of option<string>: tag at 0,
// string (ptr, len) at 4 and 8.
type optionStringRet struct {
	tag      uint8
	_        [3]byte
	ptr, len uint32
}

var getRet optionStringRet

// flag is a bool as the canonical ABI passes it.
func flag(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// StateGet calls state.get.
func StateGet(scope uint32, key string) (string, bool) {
	getRet = optionStringRet{}
	stateGet(scope, unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), unsafe.Pointer(&getRet))
	if getRet.tag == 0 {
		return "", false
	}
	v := String(getRet.ptr, getRet.len)
	ResetArena()
	return v, true
}

// StateSet calls state.set; hasTTL false is a ttl of none.
func StateSet(scope uint32, key, value string, hasTTL bool, ttlMs uint64) {
	stateSet(scope, unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)),
		unsafe.Pointer(unsafe.StringData(value)), uint32(len(value)), flag(hasTTL), ttlMs)
}

// StateDelete calls state.delete.
func StateDelete(scope uint32, key string) {
	stateDelete(scope, unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)))
}

// StateAdd calls state.add; hasTTL false is a ttl of none.
func StateAdd(scope uint32, key string, delta int64, hasTTL bool, ttlMs uint64) int64 {
	return stateAdd(scope, unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), delta, flag(hasTTL), ttlMs)
}

// StateReset does nothing on wasm: state belongs to the host.
func StateReset() {}

// --- http import --------------------------------------------------------------
//
// Imported only when a guard links the http package. The response is lowered
// through cabi_realloc into the arena, copied into Go memory at once and the
// arena reset, as for state.get.

//go:wasmimport toolgate:guard/http@0.3.0 send
func httpSend(method unsafe.Pointer, methodLen uint32, url unsafe.Pointer, urlLen uint32,
	headers, headersLen uint32, body unsafe.Pointer, bodyLen uint32, ret unsafe.Pointer)

// responseRet is the canonical-ABI layout of http's response: status (u16)
// at 0, headers (ptr, len) at 4 and 8, body (ptr, len) at 12 and 16.
type responseRet struct {
	status                 uint16
	_                      [2]byte
	headersPtr, headersLen uint32
	bodyPtr, bodyLen       uint32
}

var sendRet responseRet

// HTTPSend calls http.send. Headers come and go as flat name, value pairs:
// a list<tuple<string, string>> is laid out as a list<string> twice as long.
func HTTPSend(method, url string, headers []string, body []byte) (uint16, []string, []byte) {
	hp, _ := StrList(headers)
	sendRet = responseRet{}
	httpSend(unsafe.Pointer(unsafe.StringData(method)), uint32(len(method)),
		unsafe.Pointer(unsafe.StringData(url)), uint32(len(url)),
		hp, uint32(len(headers)/2),
		unsafe.Pointer(unsafe.SliceData(body)), uint32(len(body)), unsafe.Pointer(&sendRet))
	gotHeaders := Strings(sendRet.headersPtr, 2*sendRet.headersLen)
	gotBody := Bytes(sendRet.bodyPtr, sendRet.bodyLen)
	ResetArena()
	return sendRet.status, gotHeaders, gotBody
}
