//go:build !wasip1

// Package abi is the canonical-ABI glue between Go and the
// toolgate:guard@0.1.0 contract. Off wasip1 (unit tests of a guard on the
// build machine) only the host functions exist: Log writes to stderr and
// Config returns OffWasmConfig ("{}" unless a test sets it).
package abi

import (
	"fmt"
	"os"
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
