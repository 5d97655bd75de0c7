//go:build wasip1

package config

import "toolgate.dev/guest/internal/abi"

// resultRet is the canonical-ABI layout of result<_, string>: tag at 0 (1:
// err), the message (ptr, len) at 4 and 8.
type resultRet struct {
	tag            uint8
	_              [3]byte
	msgPtr, msgLen uint32
}

var ret resultRet

//go:wasmexport toolgate:guard/config@0.3.0#validate-config
func validateConfig(cfg, cfgLen uint32) uint32 {
	abi.BeginCall()
	raw := abi.Bytes(cfg, cfgLen)
	abi.ResetArena()
	ret = resultRet{}
	if err := Call(raw); err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "config: refused"
		}
		ret.tag = 1
		ret.msgPtr, ret.msgLen = abi.Str(msg)
	}
	return abi.Addr(&ret)
}
