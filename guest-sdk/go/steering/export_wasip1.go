//go:build wasip1

package steering

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/internal/abi"
)

// verdictRet is the canonical-ABI layout of `verdict`: tag at 0; skip's
// content (ptr, len) at 4 and 8; its option<bool> is-error at 12 (tag) and 13.
type verdictRet struct {
	tag                    uint8
	_                      [3]byte
	contentPtr, contentLen uint32
	isErrorTag, isError    uint8
	_                      [2]byte
}

var ret verdictRet

//go:wasmexport toolgate:guard/steering@0.3.0#before-tool-call
func beforeToolCall(runID, runIDLen, tool, toolLen, callID, callIDLen, args, argsLen, state, stateLen uint32) uint32 {
	abi.BeginCall()
	e := guest.BeforeToolCallEvent{
		RunID:    abi.String(runID, runIDLen),
		ToolName: abi.String(tool, toolLen),
		CallID:   abi.String(callID, callIDLen),
		Args:     abi.Bytes(args, argsLen),
		State:    abi.Bytes(state, stateLen),
	}
	abi.ResetArena()
	v := Call(e)
	ret = verdictRet{}
	if v.Skip {
		ret.tag = 1
		ret.contentPtr, ret.contentLen = abi.Str(v.Content)
		if v.IsError != nil {
			ret.isErrorTag = 1
			if *v.IsError {
				ret.isError = 1
			}
		}
	}
	return abi.Addr(&ret)
}
