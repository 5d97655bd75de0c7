//go:build wasip1

package result

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/internal/abi"
)

//go:wasmexport toolgate:guard/result@0.3.0#on-result
func onResult(runID, runIDLen, tool, toolLen, result, resultLen, callID, callIDLen, deferred, isError, state, stateLen uint32) {
	abi.BeginCall()
	e := guest.ToolResultCallbackEvent{
		RunID:    abi.String(runID, runIDLen),
		ToolName: abi.String(tool, toolLen),
		Result:   abi.Bytes(result, resultLen),
		CallID:   abi.String(callID, callIDLen),
		Deferred: deferred != 0,
		IsError:  isError != 0,
		State:    abi.Bytes(state, stateLen),
	}
	abi.ResetArena()
	Call(e)
}
