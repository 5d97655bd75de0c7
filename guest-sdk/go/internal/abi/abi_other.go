//go:build !wasip1

// Package abi is the canonical-ABI glue between Go and the
// toolgate:guard@0.1.0 contract. Off wasip1 (unit tests of a guard on the
// build machine) only the host functions exist: Log writes to stderr and
// Config returns "{}".
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

// Config returns the empty configuration.
func Config() string { return "{}" }
