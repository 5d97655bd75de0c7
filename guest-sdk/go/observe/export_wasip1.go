//go:build wasip1

package observe

import (
	"math"

	"toolgate.dev/guest/internal/abi"
)

//go:wasmexport toolgate:guard/observe@0.3.0#subscriptions
func subscriptions() uint32 {
	abi.BeginCall()
	var kinds uint32
	for _, k := range Subscriptions() {
		kinds |= 1 << k
	}
	return kinds
}

// lifecycle-event flattens to more values than the canonical ABI passes
// directly (17), so the host passes a pointer to the variant in memory: its
// case (u8) at 0, the case's record at 8 (the cases' widest alignment: f64
// and u64). Offsets below are within that record.
const payload = 8

// at reads the record at rec: strings, numbers and options at offsets.
type at uint32

func (r at) str(off uint32) string {
	return abi.String(abi.Load32(uint32(r)+off), abi.Load32(uint32(r)+off+4))
}

func (r at) json(off uint32) []byte {
	return abi.Bytes(abi.Load32(uint32(r)+off), abi.Load32(uint32(r)+off+4))
}

func (r at) u32(off uint32) uint32 { return abi.Load32(uint32(r) + off) }

func (r at) u64(off uint32) uint64 { return abi.Load64(uint32(r) + off) }

func (r at) f64(off uint32) float64 { return math.Float64frombits(r.u64(off)) }

func (r at) flag(off uint32) bool { return abi.Load8(uint32(r)+off) != 0 }

// optStr reads an option<string>: its tag at off, the string at off+4.
func (r at) optStr(off uint32) *string {
	if !r.flag(off) {
		return nil
	}
	s := r.str(off + 4)
	return &s
}

// optU32 reads an option<u32>: its tag at off, the value at off+4.
func (r at) optU32(off uint32) *uint32 {
	if !r.flag(off) {
		return nil
	}
	n := r.u32(off + 4)
	return &n
}

// lift copies the event at p into Go values.
func lift(p uint32) Event {
	r := at(p + payload)
	switch Hook(abi.Load8(p)) {
	case AgentStart:
		return AgentStartEvent{Query: r.str(0), RunID: r.str(8)}
	case AgentEnd:
		return AgentEndEvent{RunID: r.str(0), FinalResponse: r.optStr(8), DurationMs: r.f64(24), NodeCount: r.optU32(32)}
	case NodeStart:
		return NodeStartEvent{NodeName: r.str(0), RunID: r.str(8)}
	case NodeEnd:
		return NodeEndEvent{NodeName: r.str(0), RunID: r.str(8), DurationMs: r.f64(16)}
	case NodeError:
		return NodeErrorEvent{NodeName: r.str(0), RunID: r.str(8), Error: r.str(16), ErrorType: r.str(24)}
	case LLMStart:
		return LLMStartEvent{Model: r.str(0), Messages: r.json(8), RunID: r.str(16), SystemPrompt: r.str(24), NodeName: r.str(32), TurnIndex: r.u32(40)}
	case LLMPreCall:
		return LLMPreCallEvent{Model: r.str(0), Messages: r.json(8), Tools: r.json(16), RunID: r.str(24), InvocationParams: r.json(32), NodeName: r.str(40)}
	case LLMEnd:
		return LLMEndEvent{
			Model: r.str(0), Output: r.str(8), Usage: r.json(16), RunID: r.str(24), NodeName: r.str(32),
			PricingUnknown: r.flag(40), DurationMs: r.f64(48), StartedAtUTC: r.str(56),
			IterationIndex: r.u32(64), TurnIndex: r.u32(68),
		}
	case TokenComposition:
		return TokenCompositionEvent{
			SystemPromptTokens: r.u64(0), ToolDefinitionsTokens: r.u64(8),
			ConversationHistoryTokens: r.u64(16), MemoryContextTokens: r.u64(24), RunID: r.str(32),
		}
	case UserCorrection:
		return UserCorrectionEvent{
			TurnID: r.str(0), OriginalResponse: r.str(8), CorrectionText: r.str(16),
			ActivationLog: r.json(24), TenantID: r.str(32), Scope: r.json(40),
		}
	case ProcedureSelection:
		return ProcedureSelectionEvent{
			ProcedureID: r.optStr(0), ActionTool: r.optStr(12), PreTool: r.str(24),
			ForceMode: r.str(32), CandidateCount: r.u32(40),
		}
	case ReactLoopEnd:
		return ReactLoopEndEvent{
			RunID: r.str(0), IterationIndex: r.u32(8), ContentType: r.str(12),
			HasToolCalls: r.flag(20), ToolCallCount: r.u32(24), TerminationReason: r.str(28),
		}
	case FabricationDetected:
		return FabricationDetectedEvent{
			RunID: r.str(0), Mode: r.str(8), ActionTaken: r.str(16), Findings: r.json(24),
			RefuseThreshold: r.f64(32), MaxFindingConfidence: r.f64(40),
			OriginalDraftPreview: r.str(48), ReplacementPreview: r.optStr(56), PreviewTruncated: r.flag(68),
		}
	}
	return nil
}

//go:wasmexport toolgate:guard/observe@0.3.0#observe
func observe(event uint32) {
	abi.BeginCall()
	e := lift(event)
	abi.ResetArena()
	Call(e)
}
