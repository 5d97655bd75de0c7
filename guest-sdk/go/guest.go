// Package guest writes toolgate guards in Go.
//
// A guard is a package main that registers a handler for each seam it
// implements, from an init function, by importing that seam's package:
//
//	import (
//		"toolgate.dev/guest"
//		"toolgate.dev/guest/steering"
//	)
//
//	func init() {
//		steering.Handle(func(e guest.BeforeToolCallEvent) guest.Verdict {
//			return guest.Proceed()
//		})
//	}
//
//	func main() {}
//
// Importing a seam package is what makes the component export that seam
// (toolgate:guard/steering@0.3.0 and so on); the host consults a guard only at
// the seams its component exports. The seam packages are steering, rewrite,
// routing, result and response; package observe is the lifecycle events
// (symfonic's fire-and-forget hooks, on_agent_start ... on_fabrication_detected).
//
// This package holds what every seam shares: the event and verdict types, the
// verdict helpers, and what the host lends a guard ([Log], [Config],
// [ConfigAs]). Package state keeps what a guard remembers between calls;
// package config checks the guard's configuration at load.
//
// The events carry symfonic's class names, one per seam:
// [ToolRoutingDecisionEvent] (routing), [ToolCallDispatchEvent] (rewrite),
// [BeforeToolCallEvent] (steering), [ToolResultCallbackEvent] (result) and
// [ResponseRenderEvent] (response).
// RoutingEvent, DispatchEvent and ToolResultEvent are deprecated aliases.
//
// Events carry JSON values (args, state, tool results) as [json.RawMessage].
// [StringMember] and [SetStringMember] (and the events' StringArg) read and
// replace one member without decoding the rest: cheap even on a 1 MiB
// argument. [Object] and [RewriteTo] go through encoding/json. Every hook call runs on a
// fresh instance, so nothing a guard keeps in a variable survives to the next
// call.
package guest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"toolgate.dev/guest/internal/abi"
)

// ToolInfo is one tool the model may be offered this turn.
type ToolInfo struct {
	// Name is the LangChain tool name.
	Name string
	// Description is the tool's description as the model sees it ("" when
	// unknown).
	Description string
}

// ToolRoutingDecisionEvent is the routing seam's event (symfonic's
// on_tool_routing_decision hook and ToolRoutingDecisionEvent class): which
// tools are visible this turn. WIT record: routing-event.
type ToolRoutingDecisionEvent struct {
	RunID string
	// Mode is "observe" or "enforce".
	Mode string
	// IntentLabel is the intent the framework's router assigned.
	IntentLabel string
	// TotalTools is how many tools the full manifest holds.
	TotalTools uint32
	// NarrowedToolNames are the names visible so far (after earlier guards).
	NarrowedToolNames []string
	// SavedTokensEstimate is the framework's estimate of prompt tokens saved.
	SavedTokensEstimate uint32
	// Tools are the visible tools with their descriptions.
	Tools []ToolInfo
	// Query is the user's query, nil when the caller does not know it.
	Query *string
	// State is the caller's state, a JSON object.
	State json.RawMessage
}

// ToolCallDispatchEvent is the rewrite seam's event (symfonic's
// on_tool_call_dispatch hook and ToolCallDispatchEvent class): a call about
// to be dispatched, which a rewrite guard may replace. WIT record:
// dispatch-event.
type ToolCallDispatchEvent struct {
	RunID string
	// IterationIndex is the 0-indexed React loop iteration.
	IterationIndex uint32
	// NodeName is the node that emitted the call.
	NodeName string
	// CallID is the tool_call id; a rewrite cannot change it.
	CallID string
	// ToolName is the tool the call names (after earlier rewrites).
	ToolName string
	// Args are the call's arguments, a JSON object.
	Args json.RawMessage
	// AvailableTools are the only names a rewrite may target.
	AvailableTools []string
	// State is the caller's state, a JSON object.
	State json.RawMessage
}

// BeforeToolCallEvent is the steering seam's event (symfonic's
// on_before_tool_call hook and BeforeToolCallEvent class): a call about to
// run. WIT record: before-tool-call-event.
type BeforeToolCallEvent struct {
	RunID string
	// ToolName is the (post-rewrite) tool about to run.
	ToolName string
	// CallID is the tool_call id this decision applies to.
	CallID string
	// Args are the (post-rewrite) arguments, a JSON object.
	Args json.RawMessage
	// State is the caller's state, a JSON object.
	State json.RawMessage
}

// ToolResultCallbackEvent is the result seam's event (symfonic's
// on_tool_result hook and ToolResultCallbackEvent class): what a tool
// returned. WIT record: tool-result-event.
type ToolResultCallbackEvent struct {
	RunID    string
	ToolName string
	// Result is the ToolMessage content as JSON (null on cancellation).
	Result json.RawMessage
	CallID string
	// Deferred is true when a resume cycle will supply the result later.
	Deferred bool
	// IsError is true when the ToolMessage carried status="error".
	IsError bool
	// State is the caller's state, a JSON object.
	State json.RawMessage
}

// ResponseRenderEvent is the response seam's event (symfonic's
// on_response_render hook and ResponseRenderEvent class): the run's final
// answer, about to be returned. WIT record: response-event.
type ResponseRenderEvent struct {
	RunID string
	// IterationIndex is the 0-indexed React loop iteration that produced
	// the final answer; -1 when the engine, not the React loop, emitted
	// the event.
	IterationIndex int32
	// Model is the model that produced the final answer.
	Model string
	// NodeName is the node that produced the final answer.
	NodeName string
	// OriginalContent is the final answer before any handler rewrote it.
	OriginalContent string
	// Content is the answer as it stands: the previous guard's (or
	// handler's) output.
	Content string
	// State is the caller's state, a JSON object.
	State json.RawMessage
}

// Answer is a response handler's answer: the final answer to give instead
// of the event's Content (return nil to keep it).
func Answer(s string) *string { return &s }

// RoutingEvent is the former name of [ToolRoutingDecisionEvent].
//
// Deprecated: use ToolRoutingDecisionEvent, symfonic's name.
type RoutingEvent = ToolRoutingDecisionEvent

// DispatchEvent is the former name of [ToolCallDispatchEvent].
//
// Deprecated: use ToolCallDispatchEvent, symfonic's name.
type DispatchEvent = ToolCallDispatchEvent

// ToolResultEvent is the former name of [ToolResultCallbackEvent].
//
// Deprecated: use ToolResultCallbackEvent, symfonic's name.
type ToolResultEvent = ToolResultCallbackEvent

// StringArg returns args[name] when the call's args are a JSON object whose
// name member is a string.
func (e BeforeToolCallEvent) StringArg(name string) (string, bool) {
	return StringMember(e.Args, name)
}

// StringArg returns args[name] when the call's args are a JSON object whose
// name member is a string.
func (e ToolCallDispatchEvent) StringArg(name string) (string, bool) {
	return StringMember(e.Args, name)
}

// Available reports whether a rewrite may target tool.
func (e ToolCallDispatchEvent) Available(tool string) bool {
	for _, t := range e.AvailableTools {
		if t == tool {
			return true
		}
	}
	return false
}

// Object decodes a JSON object (args, state, configuration). Numbers decode as
// json.Number, so integers survive a round trip through a rewrite exactly.
func Object(raw json.RawMessage) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

// Decode reads a JSON value (an event's usage, messages, findings, ...) into
// a T: a struct (json tags name the members; members it has no field for
// are ignored), a map, a slice, or any. Numbers in untyped values (any,
// map[string]any) decode as json.Number, so big integers keep every digit.
// It goes through encoding/json: reading one member is cheaper with
// [Member], [StringMember] or [IntMember].
func Decode[T any](raw json.RawMessage) (T, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return v, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, errors.New("more than one JSON value")
	}
	return v, nil
}

// Verdict is what a steering guard decides for one call. The zero value
// proceeds.
type Verdict struct {
	// Skip is true when the tool must not run; Content is then what the
	// model sees instead. A skip with empty Content is malformed: the host
	// drops it and proceeds.
	Skip    bool
	Content string
	// IsError is nil for the host's default (true: steer), or explicit.
	IsError *bool
}

// Proceed runs the tool normally; later guards are still consulted.
func Proceed() Verdict { return Verdict{} }

// Steer refuses the call and shows the model content as an error result, so
// it corrects itself and retries (skip with is_error = true).
func Steer(content string) Verdict {
	isError := true
	return Verdict{Skip: true, Content: content, IsError: &isError}
}

// Cancel refuses the call and shows the model content as a benign result it
// moves past (skip with is_error = false).
func Cancel(content string) Verdict {
	isError := false
	return Verdict{Skip: true, Content: content, IsError: &isError}
}

// Rewrite is a replacement for a dispatched call.
type Rewrite struct {
	// ToolName must be one of the event's AvailableTools.
	ToolName string
	// Args must be a JSON object.
	Args json.RawMessage
}

// RewriteTo builds a rewrite to toolName with args encoded as JSON; args
// must encode as an object (a map or a struct). It panics when they do not,
// which the host counts as a fault of this guard.
func RewriteTo(toolName string, args any) *Rewrite {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(args); err != nil {
		panic(fmt.Sprintf("toolgate: encoding rewritten args: %v", err))
	}
	raw := bytes.TrimRight(buf.Bytes(), "\n")
	if len(raw) == 0 || raw[0] != '{' {
		panic("toolgate: rewritten args must encode as a JSON object")
	}
	return &Rewrite{ToolName: toolName, Args: raw}
}

// Level is the severity of a log line.
type Level uint32

// Log levels, as the host's `level` enum.
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Log writes one line to the host's log, tagged with the plugin's name.
// Lines and bytes per call are budgeted by the host; going over the budget
// ends the call as a fault.
func Log(level Level, message string) { abi.Log(uint32(level), message) }

// Logf formats and logs one line.
func Logf(level Level, format string, args ...any) {
	abi.Log(uint32(level), fmt.Sprintf(format, args...))
}

// Config returns the plugin's own configuration (the manifest's `config`
// table) as a JSON object; `{}` when none is set.
//
// Each call asks the host (nothing is kept between calls, so a snapshotted
// guard never keeps the configuration of its warm-up); call it once per hook.
func Config() json.RawMessage {
	return json.RawMessage(abi.Config())
}

// ConfigAs reads a plugin's configuration (raw, as [Config] returns it or the
// config package's check receives it) into a T, typically a struct whose
// fields' json tags name the keys. Strict, as a configuration should be: a
// key T has no field for, a value of the wrong type, or anything after the
// object is an error, whose text starts "config: ". Blank text reads as {}.
// Untyped values (fields of type any) decode numbers as json.Number.
func ConfigAs[T any](raw json.RawMessage) (T, error) {
	var settings T
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&settings); err != nil {
		return settings, fmt.Errorf("config: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return settings, errors.New("config: more than one JSON value")
	}
	return settings, nil
}

// UpperContains reports whether strings.ToUpper(s) contains substr. When s
// is ASCII it compares in place instead of building the upper-cased copy:
// strings.ToUpper builds it a byte at a time, which under wasm costs about
// 160 instructions per byte (160 million fuel for a 1 MiB query).
func UpperContains(s, substr string) bool {
	if len(substr) == 0 {
		return true
	}
	// Bytes whose ASCII upper case is substr[0] are exactly those that match
	// it after setting bit 5 (0x20), give or take a few non-letters that the
	// exact check below rejects.
	first := substr[0]
	folded := first | 0x20
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := word(s, i)
		if w&highs != 0 {
			return strings.Contains(strings.ToUpper(s), substr)
		}
		if hasByte(w|ones*0x20, folded) == 0 {
			continue
		}
		for j := i; j < i+8; j++ {
			if j+len(substr) <= len(s) && upperASCIIPrefix(s[j:], substr) {
				return true
			}
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.Contains(strings.ToUpper(s), substr)
		}
		if i+len(substr) <= len(s) && upperASCIIPrefix(s[i:], substr) {
			return true
		}
	}
	return false
}

// upperASCIIPrefix reports whether the ASCII-upper-cased s starts with
// prefix.
func upperASCIIPrefix(s, prefix string) bool {
	for j := 0; j < len(prefix); j++ {
		c := s[j]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != prefix[j] {
			return false
		}
	}
	return true
}
