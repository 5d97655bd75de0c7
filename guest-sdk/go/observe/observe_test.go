package observe

import (
	"encoding/json"
	"reflect"
	"testing"
)

func reset() { handlers = [hookCount]func(Event){} }

func TestRegisteredHandlersAreTheSubscriptionsAndEachGetsItsEvent(t *testing.T) {
	reset()
	if s := Subscriptions(); len(s) != 0 {
		t.Fatalf("no handler: %v", s)
	}
	var got []string
	OnLLMEnd(func(e LLMEndEvent) { got = append(got, "llm_end:"+string(e.Usage)) })
	OnAgentStart(func(e AgentStartEvent) { got = append(got, "agent_start:"+e.Query) })
	if s := Subscriptions(); !reflect.DeepEqual(s, []Hook{AgentStart, LLMEnd}) {
		t.Fatalf("subscriptions %v", s)
	}
	Call(LLMEndEvent{Usage: json.RawMessage(`{"total_tokens":7}`)})
	Call(AgentStartEvent{Query: "q"})
	Call(NodeStartEvent{NodeName: "react"}) // not subscribed: nothing
	Call(nil)
	if want := []string{`llm_end:{"total_tokens":7}`, "agent_start:q"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	OnLLMEnd(nil)
	if s := Subscriptions(); !reflect.DeepEqual(s, []Hook{AgentStart}) {
		t.Fatalf("after OnLLMEnd(nil): %v", s)
	}
}

func TestHandleTakesSeveralHooksAndTheEventSaysWhich(t *testing.T) {
	reset()
	var got []string
	Handle(func(e Event) { got = append(got, e.Hook().String()) }, Hooks()...)
	if len(Subscriptions()) != 13 {
		t.Fatalf("every hook: %v", Subscriptions())
	}
	events := []Event{
		AgentStartEvent{}, AgentEndEvent{}, NodeStartEvent{}, NodeEndEvent{}, NodeErrorEvent{},
		LLMStartEvent{}, LLMPreCallEvent{}, LLMEndEvent{}, TokenCompositionEvent{},
		UserCorrectionEvent{}, ProcedureSelectionEvent{}, ReactLoopEndEvent{}, FabricationDetectedEvent{},
	}
	for _, e := range events {
		Call(e)
	}
	want := []string{
		"on_agent_start", "on_agent_end", "on_node_start", "on_node_end", "on_node_error",
		"on_llm_start", "on_llm_pre_call", "on_llm_end", "on_token_composition",
		"on_user_correction", "on_procedure_selection", "on_react_loop_end", "on_fabrication_detected",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
	if Hook(13).String() != "hook?" {
		t.Fatal("an unknown hook has no name")
	}
}

func TestAnEventEncodesWithSymfonicsFieldNames(t *testing.T) {
	out, err := json.Marshal(AgentEndEvent{RunID: "r", DurationMs: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"run_id":"r","final_response":null,"duration_ms":1.5,"node_count":null}`; string(out) != want {
		t.Fatalf("%s, want %s", out, want)
	}
}
