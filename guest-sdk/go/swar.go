package guest

import "unsafe"

// Word-at-a-time byte tests (SWAR): Go compiles byte loops to about 40 wasm
// instructions per byte, so scans over big arguments test 8 bytes at once.

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// word loads the 8 bytes of s at i (i+8 <= len(s)), little-endian.
func word(s string, i int) uint64 {
	return *(*uint64)(unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i))
}

// hasZero is non-zero when some byte of x is zero.
func hasZero(x uint64) uint64 { return (x - ones) & ^x & highs }

// hasByte is non-zero when some byte of x is b.
func hasByte(x uint64, b byte) uint64 { return hasZero(x ^ (ones * uint64(b))) }

// hasLess is non-zero when some byte of x is below n (n <= 128).
func hasLess(x uint64, n byte) uint64 { return (x - ones*uint64(n)) & ^x & highs }
