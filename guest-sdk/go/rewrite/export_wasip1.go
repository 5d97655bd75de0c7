//go:build wasip1

package rewrite

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/internal/abi"
)

// rewriteRet is the canonical-ABI layout of option<rewrite>: tag at 0;
// tool-name (ptr, len) at 4 and 8; args (ptr, len) at 12 and 16.
type rewriteRet struct {
	tag              uint8
	_                [3]byte
	toolPtr, toolLen uint32
	argsPtr, argsLen uint32
}

var ret rewriteRet

//go:wasmexport toolgate:guard/rewrite@0.3.0#dispatch
func dispatch(runID, runIDLen, iteration, node, nodeLen, callID, callIDLen, tool, toolLen, args, argsLen, tools, toolsLen, state, stateLen uint32) uint32 {
	abi.BeginCall()
	e := guest.ToolCallDispatchEvent{
		RunID:          abi.String(runID, runIDLen),
		IterationIndex: iteration,
		NodeName:       abi.String(node, nodeLen),
		CallID:         abi.String(callID, callIDLen),
		ToolName:       abi.String(tool, toolLen),
		Args:           abi.Bytes(args, argsLen),
		AvailableTools: abi.Strings(tools, toolsLen),
		State:          abi.Bytes(state, stateLen),
	}
	abi.ResetArena()
	r := Call(e)
	ret = rewriteRet{}
	if r != nil {
		ret.tag = 1
		ret.toolPtr, ret.toolLen = abi.Str(r.ToolName)
		ret.argsPtr, ret.argsLen = abi.Str(string(r.Args))
	}
	return abi.Addr(&ret)
}
