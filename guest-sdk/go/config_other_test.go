//go:build !wasip1

package guest

import (
	"testing"

	"toolgate.dev/guest/internal/abi"
)

// Nothing is kept between calls to Config: a snapshotted guard must not
// keep the configuration of its warm-up.
func TestConfigAsksTheHostEachTime(t *testing.T) {
	defer func() { abi.OffWasmConfig = "{}" }()
	abi.OffWasmConfig = `{"limit":1}`
	if got := string(Config()); got != `{"limit":1}` {
		t.Fatalf("Config() = %s", got)
	}
	abi.OffWasmConfig = `{"limit":2}`
	if got := string(Config()); got != `{"limit":2}` {
		t.Fatalf("Config() after a change = %s", got)
	}
}
