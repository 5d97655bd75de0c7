//go:build wasip1

package routing

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/internal/abi"
)

// routing-event flattens to 17 values, more than the canonical ABI passes
// directly, so the host passes a pointer to the record in memory:
const (
	offRunID        = 0  // string
	offMode         = 8  // string
	offIntentLabel  = 16 // string
	offTotalTools   = 24 // u32
	offNarrowed     = 28 // list<string>
	offSavedTokens  = 36 // u32
	offTools        = 40 // list<tool-info>: (name, description) = 16 bytes each
	offQuery        = 48 // option<string>: tag at 48, string at 52
	offState        = 60 // string
	toolInfoSize    = 16
	queryPayloadOff = 4
)

// narrowRet is the canonical-ABI layout of option<list<string>>: tag at 0,
// list (ptr, len) at 4 and 8.
type narrowRet struct {
	tag              uint8
	_                [3]byte
	listPtr, listLen uint32
}

var ret narrowRet

func str(rec, off uint32) string {
	return abi.String(abi.Load32(rec+off), abi.Load32(rec+off+4))
}

//go:wasmexport toolgate:guard/routing@0.3.0#narrow
func narrow(rec uint32) uint32 {
	abi.BeginCall()
	e := guest.ToolRoutingDecisionEvent{
		RunID:               str(rec, offRunID),
		Mode:                str(rec, offMode),
		IntentLabel:         str(rec, offIntentLabel),
		TotalTools:          abi.Load32(rec + offTotalTools),
		NarrowedToolNames:   abi.Strings(abi.Load32(rec+offNarrowed), abi.Load32(rec+offNarrowed+4)),
		SavedTokensEstimate: abi.Load32(rec + offSavedTokens),
		State:               abi.Bytes(abi.Load32(rec+offState), abi.Load32(rec+offState+4)),
	}
	tools, n := abi.Load32(rec+offTools), abi.Load32(rec+offTools+4)
	e.Tools = make([]guest.ToolInfo, n)
	for i := uint32(0); i < n; i++ {
		e.Tools[i] = guest.ToolInfo{Name: str(tools+i*toolInfoSize, 0), Description: str(tools+i*toolInfoSize, 8)}
	}
	if abi.Load8(rec+offQuery) != 0 {
		q := str(rec, offQuery+queryPayloadOff)
		e.Query = &q
	}
	abi.ResetArena()
	visible, ok := Call(e)
	ret = narrowRet{}
	if ok {
		ret.tag = 1
		ret.listPtr, ret.listLen = abi.StrList(visible)
	}
	return abi.Addr(&ret)
}
