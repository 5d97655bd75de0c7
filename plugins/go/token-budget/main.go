// token-budget (lifecycle + steering + routing): adds each on_llm_end
// usage's total tokens to the run's state; once a run has used max_tokens,
// every tool call of that run is cancelled with "Token budget of N
// exceeded. Answer with what you have." (is_error false) and routing hides
// every tool. A new run starts from zero (the count is in the run's scope).
// The Rust plugins/rust/token-budget, in Go.
//
// The total of a usage dict is its total_tokens when it is an integer, else
// input_tokens + output_tokens (Anthropic) when either is there, else
// prompt_tokens + completion_tokens (OpenAI); negative counts are 0.
//
//	[plugin.config]
//	max_tokens = 50000   # required, at least 1
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"toolgate.dev/guest"
	"toolgate.dev/guest/config"
	"toolgate.dev/guest/observe"
	"toolgate.dev/guest/routing"
	"toolgate.dev/guest/state"
	"toolgate.dev/guest/steering"
)

// settings is the manifest's config.
type settings struct {
	// MaxTokens is how many tokens a run may use before its tool calls
	// are cancelled.
	MaxTokens *int64 `json:"max_tokens"`
}

// used is the run-scope key of the tokens used so far.
const used = "tokens"

// validate is the check of the config at load.
func validate(s settings) error {
	if s.MaxTokens == nil {
		return errors.New("config: max_tokens is required")
	}
	if *s.MaxTokens < 1 {
		return fmt.Errorf("config: max_tokens must be at least 1, not %d", *s.MaxTokens)
	}
	return nil
}

// count is a usage member as a count: an integer, else 0; never negative.
func count(usage json.RawMessage, name string) int64 {
	n, _ := guest.IntMember(usage, name)
	return max(n, 0)
}

// sum adds two counts, at most math.MaxInt64.
func sum(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// total is the total tokens of a usage dict.
func total(usage json.RawMessage) int64 {
	if t, ok := guest.IntMember(usage, "total_tokens"); ok {
		return max(t, 0)
	}
	_, in := guest.Member(usage, "input_tokens")
	_, out := guest.Member(usage, "output_tokens")
	if in || out {
		return sum(count(usage, "input_tokens"), count(usage, "output_tokens"))
	}
	return sum(count(usage, "prompt_tokens"), count(usage, "completion_tokens"))
}

// load reads the budget from the config (checked at load; ok false when it
// is not good, as it cannot be once loaded).
func load(raw json.RawMessage) (limit int64, ok bool) {
	s, err := guest.ConfigAs[settings](raw)
	if err != nil || validate(s) != nil {
		return 0, false
	}
	return *s.MaxTokens, true
}

// exceeded reports whether this run has used limit tokens.
func exceeded(limit int64) bool {
	v, ok := state.Get(state.Run, used)
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n >= limit
}

func onLLMEnd(e observe.LLMEndEvent) {
	if tokens := total(e.Usage); tokens > 0 {
		state.Add(state.Run, used, tokens)
	}
}

// steer cancels the call once the run has used the budget.
func steer(limit int64, ok bool) guest.Verdict {
	if ok && exceeded(limit) {
		return guest.Cancel(fmt.Sprintf("Token budget of %d exceeded. Answer with what you have.", limit))
	}
	return guest.Proceed()
}

// hide hides every tool once the run has used the budget.
func hide(limit int64, ok bool) ([]string, bool) {
	if ok && exceeded(limit) {
		return []string{}, true
	}
	return nil, false
}

func init() {
	config.Validate(validate)
	observe.OnLLMEnd(onLLMEnd)
	steering.Handle(func(guest.BeforeToolCallEvent) guest.Verdict { return steer(load(guest.Config())) })
	routing.Handle(func(guest.ToolRoutingDecisionEvent) ([]string, bool) { return hide(load(guest.Config())) })
}

func main() {}
