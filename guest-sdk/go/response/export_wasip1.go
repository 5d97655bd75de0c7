//go:build wasip1

package response

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/internal/abi"
)

// answerRet is the canonical-ABI layout of option<string>: tag at 0; the
// string (ptr, len) at 4 and 8.
type answerRet struct {
	tag              uint8
	_                [3]byte
	textPtr, textLen uint32
}

var ret answerRet

//go:wasmexport toolgate:guard/response@0.3.0#render
func render(runID, runIDLen, iteration, model, modelLen, node, nodeLen, original, originalLen, content, contentLen, state, stateLen uint32) uint32 {
	abi.BeginCall()
	e := guest.ResponseRenderEvent{
		RunID:           abi.String(runID, runIDLen),
		IterationIndex:  int32(iteration),
		Model:           abi.String(model, modelLen),
		NodeName:        abi.String(node, nodeLen),
		OriginalContent: abi.String(original, originalLen),
		Content:         abi.String(content, contentLen),
		State:           abi.Bytes(state, stateLen),
	}
	abi.ResetArena()
	answer := Call(e)
	ret = answerRet{}
	if answer != nil {
		ret.tag = 1
		ret.textPtr, ret.textLen = abi.Str(*answer)
	}
	return abi.Addr(&ret)
}
