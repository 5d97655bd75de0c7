// Package observe is the lifecycle events (symfonic's thirteen
// fire-and-forget hooks: on_agent_start ... on_fabrication_detected): a
// guard observes what a run does and keeps what it needs in package state,
// where its decisions at the other seams read it. Importing it makes the
// guard's component export toolgate:guard/observe@0.3.0.
//
// Register a handler per hook from an init function; the hooks that have
// one are the guard's subscriptions, which the host reads once, at load,
// and calls the guard for no other:
//
//	func init() {
//		observe.OnLLMEnd(func(e observe.LLMEndEvent) {
//			if n, ok := guest.IntMember(e.Usage, "total_tokens"); ok {
//				state.Add(state.Run, "tokens", n)
//			}
//		})
//	}
//
// Each event is a struct named after its symfonic class, with every field
// of it; the JSON fields (symfonic's dict, list and Any) are
// json.RawMessage, read with guest.Member, guest.IntMember or guest.Decode.
// The json tags are symfonic's field names, so an event encodes as symfonic
// would send it. A handler returns nothing; a panic is a fault, which the
// host logs, counts and skips (the run is never held by it).
package observe

import "encoding/json"

// Hook is one lifecycle hook a guard may observe.
type Hook uint8

// The hooks, in the contract's order (the bits of its event-kinds flags).
const (
	// AgentStart is on_agent_start: agent execution begins.
	AgentStart Hook = iota
	// AgentEnd is on_agent_end: agent execution completed.
	AgentEnd
	// NodeStart is on_node_start: a graph node is about to run.
	NodeStart
	// NodeEnd is on_node_end: a graph node completed.
	NodeEnd
	// NodeError is on_node_error: a graph node raised.
	NodeError
	// LLMStart is on_llm_start: the LLM is invoked (the engine-view prompt).
	LLMStart
	// LLMPreCall is on_llm_pre_call: right before the provider call (the
	// wire-accurate payload).
	LLMPreCall
	// LLMEnd is on_llm_end: the LLM returned.
	LLMEnd
	// TokenComposition is on_token_composition: input tokens by prompt
	// section.
	TokenComposition
	// UserCorrection is on_user_correction: the user corrected a previous
	// answer.
	UserCorrection
	// ProcedureSelection is on_procedure_selection: the force-resolver
	// picked a procedural skill.
	ProcedureSelection
	// ReactLoopEnd is on_react_loop_end: the React loop ended with an empty
	// final response.
	ReactLoopEnd
	// FabricationDetected is on_fabrication_detected: the fabrication check
	// found suspect content.
	FabricationDetected
	hookCount
)

var hookNames = [hookCount]string{
	"on_agent_start", "on_agent_end", "on_node_start", "on_node_end",
	"on_node_error", "on_llm_start", "on_llm_pre_call", "on_llm_end",
	"on_token_composition", "on_user_correction", "on_procedure_selection",
	"on_react_loop_end", "on_fabrication_detected",
}

// String is the hook's symfonic name ("on_llm_end", ...).
func (h Hook) String() string {
	if h < hookCount {
		return hookNames[h]
	}
	return "hook?"
}

// Hooks is every hook, in the contract's order.
func Hooks() []Hook {
	all := make([]Hook, hookCount)
	for i := range all {
		all[i] = Hook(i)
	}
	return all
}

// Event is one lifecycle event: one of the thirteen *Event types of this
// package.
type Event interface {
	// Hook is the hook that fired.
	Hook() Hook
}

// AgentStartEvent is on_agent_start's event (symfonic's AgentStartEvent).
type AgentStartEvent struct {
	// Query is the user's query.
	Query string `json:"query"`
	// RunID is the agent run.
	RunID string `json:"run_id"`
}

// AgentEndEvent is on_agent_end's event (symfonic's AgentEndEvent).
type AgentEndEvent struct {
	// RunID is the agent run.
	RunID string `json:"run_id"`
	// FinalResponse is the answer; nil when streaming.
	FinalResponse *string `json:"final_response"`
	// DurationMs is how long the run took, milliseconds.
	DurationMs float64 `json:"duration_ms"`
	// NodeCount is how many nodes ran; nil when streaming.
	NodeCount *uint32 `json:"node_count"`
}

// NodeStartEvent is on_node_start's event (symfonic's NodeStartEvent).
type NodeStartEvent struct {
	// NodeName is the node.
	NodeName string `json:"node_name"`
	// RunID is the agent run.
	RunID string `json:"run_id"`
}

// NodeEndEvent is on_node_end's event (symfonic's NodeEndEvent).
type NodeEndEvent struct {
	// NodeName is the node.
	NodeName string `json:"node_name"`
	// RunID is the agent run.
	RunID string `json:"run_id"`
	// DurationMs is how long it ran, milliseconds.
	DurationMs float64 `json:"duration_ms"`
}

// NodeErrorEvent is on_node_error's event (symfonic's NodeErrorEvent).
type NodeErrorEvent struct {
	// NodeName is the node.
	NodeName string `json:"node_name"`
	// RunID is the agent run.
	RunID string `json:"run_id"`
	// Error is the exception's message.
	Error string `json:"error"`
	// ErrorType is the exception's class name.
	ErrorType string `json:"error_type"`
}

// LLMStartEvent is on_llm_start's event (symfonic's LLMStartEvent): the
// engine-view prompt.
type LLMStartEvent struct {
	// Model is the model invoked.
	Model string `json:"model"`
	// Messages is the conversation as the react node received it (a JSON
	// list).
	Messages json.RawMessage `json:"messages"`
	// RunID is the agent run.
	RunID string `json:"run_id"`
	// SystemPrompt is the system prompt.
	SystemPrompt string `json:"system_prompt"`
	// NodeName is the calling node.
	NodeName string `json:"node_name"`
	// TurnIndex is the turn.
	TurnIndex uint32 `json:"turn_index"`
}

// LLMPreCallEvent is on_llm_pre_call's event (symfonic's LLMPreCallEvent):
// the wire-accurate payload.
type LLMPreCallEvent struct {
	// Model is the model invoked.
	Model string `json:"model"`
	// Messages are the post-consolidation messages (a JSON list).
	Messages json.RawMessage `json:"messages"`
	// Tools are the bound tools, {"name", "description", "schema"} records
	// (a JSON list).
	Tools json.RawMessage `json:"tools"`
	// RunID is the agent run.
	RunID string `json:"run_id"`
	// InvocationParams are the provider's invocation kwargs (a JSON object,
	// {} when unknown).
	InvocationParams json.RawMessage `json:"invocation_params"`
	// NodeName is the calling node.
	NodeName string `json:"node_name"`
}

// LLMEndEvent is on_llm_end's event (symfonic's LLMEndEvent): the LLM
// returned.
type LLMEndEvent struct {
	// Model is the model invoked.
	Model string `json:"model"`
	// Output is what it returned.
	Output string `json:"output"`
	// Usage is the provider's usage dict (token counts; a JSON object):
	// guest.IntMember(e.Usage, "total_tokens").
	Usage json.RawMessage `json:"usage"`
	// RunID is the agent run.
	RunID string `json:"run_id"`
	// NodeName is the calling node ("react", ...).
	NodeName string `json:"node_name"`
	// PricingUnknown is true when the model had no entry in the pricing
	// registry.
	PricingUnknown bool `json:"pricing_unknown"`
	// DurationMs is the call's latency, milliseconds.
	DurationMs float64 `json:"duration_ms"`
	// StartedAtUTC is when it started, ISO-8601 UTC.
	StartedAtUTC string `json:"started_at_utc"`
	// IterationIndex is the React loop iteration.
	IterationIndex uint32 `json:"iteration_index"`
	// TurnIndex is the turn.
	TurnIndex uint32 `json:"turn_index"`
}

// TokenCompositionEvent is on_token_composition's event (symfonic's
// TokenCompositionEvent): input tokens by prompt section.
type TokenCompositionEvent struct {
	// SystemPromptTokens are the system prompt's tokens.
	SystemPromptTokens uint64 `json:"system_prompt_tokens"`
	// ToolDefinitionsTokens are the tool definitions' tokens.
	ToolDefinitionsTokens uint64 `json:"tool_definitions_tokens"`
	// ConversationHistoryTokens are the conversation history's tokens.
	ConversationHistoryTokens uint64 `json:"conversation_history_tokens"`
	// MemoryContextTokens are the memory context's tokens.
	MemoryContextTokens uint64 `json:"memory_context_tokens"`
	// RunID is the agent run.
	RunID string `json:"run_id"`
}

// UserCorrectionEvent is on_user_correction's event (symfonic's
// UserCorrectionEvent). It carries no run id: its run scope is the empty
// run.
type UserCorrectionEvent struct {
	// TurnID is the corrected turn.
	TurnID string `json:"turn_id"`
	// OriginalResponse is the answer corrected.
	OriginalResponse string `json:"original_response"`
	// CorrectionText is the user's correction.
	CorrectionText string `json:"correction_text"`
	// ActivationLog is that turn's activation log (a JSON object).
	ActivationLog json.RawMessage `json:"activation_log"`
	// TenantID is symfonic's tenant id.
	TenantID string `json:"tenant_id"`
	// Scope is the TenantScope as JSON (null when none).
	Scope json.RawMessage `json:"scope"`
}

// ProcedureSelectionEvent is on_procedure_selection's event (symfonic's
// ProcedureSelectionEvent). It carries no run id: its run scope is the
// empty run.
type ProcedureSelectionEvent struct {
	// ProcedureID is the winning skill's id (nil: none).
	ProcedureID *string `json:"procedure_id"`
	// ActionTool is the action tool it resolves to (nil: none).
	ActionTool *string `json:"action_tool"`
	// PreTool is the tool tool_choice is forced to.
	PreTool string `json:"pre_tool"`
	// ForceMode is "off", "soft" or "hard".
	ForceMode string `json:"force_mode"`
	// CandidateCount is how many candidates were considered (at least 1).
	CandidateCount uint32 `json:"candidate_count"`
}

// ReactLoopEndEvent is on_react_loop_end's event (symfonic's
// ReactLoopEndEvent): the loop ended with an empty final response.
type ReactLoopEndEvent struct {
	// RunID is the agent run.
	RunID string `json:"run_id"`
	// IterationIndex is the terminating iteration.
	IterationIndex uint32 `json:"iteration_index"`
	// ContentType is the Python type name of the last message's content.
	ContentType string `json:"content_type"`
	// HasToolCalls is true when the last message carried tool calls.
	HasToolCalls bool `json:"has_tool_calls"`
	// ToolCallCount is how many.
	ToolCallCount uint32 `json:"tool_call_count"`
	// TerminationReason is "tool_calls_with_no_text",
	// "no_content_no_tool_calls" or "recursion_exhausted".
	TerminationReason string `json:"termination_reason"`
}

// FabricationDetectedEvent is on_fabrication_detected's event (symfonic's
// FabricationDetectedEvent).
type FabricationDetectedEvent struct {
	// RunID is the agent run.
	RunID string `json:"run_id"`
	// Mode is "off", "observe", "revise" or "refuse".
	Mode string `json:"mode"`
	// ActionTaken is "none", "observed", "revise_forced" or
	// "refuse_replaced".
	ActionTaken string `json:"action_taken"`
	// Findings are the findings (a JSON list of objects).
	Findings json.RawMessage `json:"findings"`
	// RefuseThreshold is the refuse threshold in effect.
	RefuseThreshold float64 `json:"refuse_threshold"`
	// MaxFindingConfidence is the strongest finding's confidence.
	MaxFindingConfidence float64 `json:"max_finding_confidence"`
	// OriginalDraftPreview is the draft's first 240 characters.
	OriginalDraftPreview string `json:"original_draft_preview"`
	// ReplacementPreview is the replacement's first 240 characters (refuse
	// mode; nil otherwise).
	ReplacementPreview *string `json:"replacement_preview"`
	// PreviewTruncated is true when the draft was longer than 240
	// characters.
	PreviewTruncated bool `json:"preview_truncated"`
}

// Hook is AgentStart.
func (AgentStartEvent) Hook() Hook { return AgentStart }

// Hook is AgentEnd.
func (AgentEndEvent) Hook() Hook { return AgentEnd }

// Hook is NodeStart.
func (NodeStartEvent) Hook() Hook { return NodeStart }

// Hook is NodeEnd.
func (NodeEndEvent) Hook() Hook { return NodeEnd }

// Hook is NodeError.
func (NodeErrorEvent) Hook() Hook { return NodeError }

// Hook is LLMStart.
func (LLMStartEvent) Hook() Hook { return LLMStart }

// Hook is LLMPreCall.
func (LLMPreCallEvent) Hook() Hook { return LLMPreCall }

// Hook is LLMEnd.
func (LLMEndEvent) Hook() Hook { return LLMEnd }

// Hook is TokenComposition.
func (TokenCompositionEvent) Hook() Hook { return TokenComposition }

// Hook is UserCorrection.
func (UserCorrectionEvent) Hook() Hook { return UserCorrection }

// Hook is ProcedureSelection.
func (ProcedureSelectionEvent) Hook() Hook { return ProcedureSelection }

// Hook is ReactLoopEnd.
func (ReactLoopEndEvent) Hook() Hook { return ReactLoopEnd }

// Hook is FabricationDetected.
func (FabricationDetectedEvent) Hook() Hook { return FabricationDetected }

var handlers [hookCount]func(Event)

// on registers h for hook k.
func on[E Event](k Hook, h func(E)) {
	if h == nil {
		handlers[k] = nil
		return
	}
	handlers[k] = func(e Event) { h(e.(E)) }
}

// Handle registers h for each of hooks (observe.Hooks()...: every one), in
// place of any handler registered for them before. Use it for one handler
// of several hooks; a type switch on the event tells them apart.
func Handle(h func(Event), hooks ...Hook) {
	for _, k := range hooks {
		if k < hookCount {
			handlers[k] = h
		}
	}
}

// OnAgentStart registers the on_agent_start handler (nil: none).
func OnAgentStart(h func(AgentStartEvent)) { on(AgentStart, h) }

// OnAgentEnd registers the on_agent_end handler (nil: none).
func OnAgentEnd(h func(AgentEndEvent)) { on(AgentEnd, h) }

// OnNodeStart registers the on_node_start handler (nil: none).
func OnNodeStart(h func(NodeStartEvent)) { on(NodeStart, h) }

// OnNodeEnd registers the on_node_end handler (nil: none).
func OnNodeEnd(h func(NodeEndEvent)) { on(NodeEnd, h) }

// OnNodeError registers the on_node_error handler (nil: none).
func OnNodeError(h func(NodeErrorEvent)) { on(NodeError, h) }

// OnLLMStart registers the on_llm_start handler (nil: none).
func OnLLMStart(h func(LLMStartEvent)) { on(LLMStart, h) }

// OnLLMPreCall registers the on_llm_pre_call handler (nil: none).
func OnLLMPreCall(h func(LLMPreCallEvent)) { on(LLMPreCall, h) }

// OnLLMEnd registers the on_llm_end handler (nil: none).
func OnLLMEnd(h func(LLMEndEvent)) { on(LLMEnd, h) }

// OnTokenComposition registers the on_token_composition handler (nil:
// none).
func OnTokenComposition(h func(TokenCompositionEvent)) { on(TokenComposition, h) }

// OnUserCorrection registers the on_user_correction handler (nil: none).
func OnUserCorrection(h func(UserCorrectionEvent)) { on(UserCorrection, h) }

// OnProcedureSelection registers the on_procedure_selection handler (nil:
// none).
func OnProcedureSelection(h func(ProcedureSelectionEvent)) { on(ProcedureSelection, h) }

// OnReactLoopEnd registers the on_react_loop_end handler (nil: none).
func OnReactLoopEnd(h func(ReactLoopEndEvent)) { on(ReactLoopEnd, h) }

// OnFabricationDetected registers the on_fabrication_detected handler
// (nil: none).
func OnFabricationDetected(h func(FabricationDetectedEvent)) { on(FabricationDetected, h) }

// Subscriptions are the hooks with a handler, in the contract's order: what
// the guard answers the host at load.
func Subscriptions() []Hook {
	var subscribed []Hook
	for k, h := range handlers {
		if h != nil {
			subscribed = append(subscribed, Hook(k))
		}
	}
	return subscribed
}

// Call runs the handler registered for e's hook, as the host would (nothing
// when there is none). Guards' unit tests use it.
func Call(e Event) {
	if e == nil {
		return
	}
	if k := e.Hook(); k < hookCount && handlers[k] != nil {
		handlers[k](e)
	}
}
