// tool-call-limit (steering, stateful): LangChain's ToolCallLimitMiddleware
// as a guard. At most run_limit calls per run and thread_limit per
// conversation — of the tool named tool, or of every tool when tool is
// absent. A call over a limit is cancelled (a benign result, is_error =
// false) and not counted.
//
//	[plugin.config]
//	tool = "send_email"      # absent: every tool
//	run_limit = 2            # calls allowed per run
//	thread_limit = 20        # calls allowed per conversation, across runs
//	thread_key = "thread_id" # the key in the hook's state holding the
//	                         # conversation id (default); absent from the
//	                         # state: the thread limit does not apply
//
// Run counts live in the run's scope; conversation counts in the tenant's
// (keyed by the conversation id), for the plugin's state_max_ttl_s. Several
// replicas sharing one store count together. The config is checked at load:
// an unknown key, a value of the wrong type, a negative limit or no limit at
// all refuses the plugin.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"toolgate.dev/guest"
	"toolgate.dev/guest/config"
	"toolgate.dev/guest/state"
	"toolgate.dev/guest/steering"
)

// settings is the manifest's config.
type settings struct {
	Tool        *string `json:"tool"`
	RunLimit    *int64  `json:"run_limit"`
	ThreadLimit *int64  `json:"thread_limit"`
	ThreadKey   *string `json:"thread_key"`
}

// validate is the check of the config at load.
func validate(s settings) error {
	if s.RunLimit == nil && s.ThreadLimit == nil {
		return fmt.Errorf("config: set run_limit, thread_limit or both")
	}
	for _, l := range []struct {
		key   string
		limit *int64
	}{{"run_limit", s.RunLimit}, {"thread_limit", s.ThreadLimit}} {
		if l.limit != nil && *l.limit < 0 {
			return fmt.Errorf("config: %s must be 0 or more", l.key)
		}
	}
	return nil
}

// load reads the config; the host checked it at load, so an error here is
// a fault.
func load(raw json.RawMessage) settings {
	s, err := guest.ConfigAs[settings](raw)
	if err == nil {
		err = validate(s)
	}
	if err != nil {
		panic(err.Error())
	}
	return s
}

// threadID is the conversation id at key in the hook's state: a string as
// it is, any other value but null as its JSON text.
func threadID(st json.RawMessage, key string) (string, bool) {
	raw, ok := guest.Member(st, key)
	if !ok || string(raw) == "null" {
		return "", false
	}
	if id, ok := guest.StringMember(st, key); ok {
		return id, true
	}
	var compact bytes.Buffer
	if json.Compact(&compact, raw) != nil {
		return string(raw), true
	}
	return compact.String(), true
}

// counter is one count this call made.
type counter struct {
	scope state.Scope
	key   string
}

func check(e guest.BeforeToolCallEvent) guest.Verdict {
	return limit(load(guest.Config()), e)
}

// limit decides one call under the settings s.
func limit(s settings, e guest.BeforeToolCallEvent) guest.Verdict {
	if s.Tool != nil && *s.Tool != e.ToolName {
		return guest.Proceed()
	}
	tool := "*"
	if s.Tool != nil {
		tool = *s.Tool
	}
	threadKey := "thread_id"
	if s.ThreadKey != nil {
		threadKey = *s.ThreadKey
	}
	// Count first (atomically), then give back what was over: exactly limit
	// concurrent calls get through.
	var counted []counter
	over := false
	if s.RunLimit != nil {
		key := "calls:" + tool
		over = state.Add(state.Run, key, 1) > *s.RunLimit || over
		counted = append(counted, counter{state.Run, key})
	}
	if thread, ok := threadID(e.State, threadKey); s.ThreadLimit != nil && ok {
		key := "thread:" + thread + ":calls:" + tool
		over = state.AddTTL(state.Tenant, key, 1, state.MaxTTL) > *s.ThreadLimit || over
		counted = append(counted, counter{state.Tenant, key})
	}
	if !over {
		return guest.Proceed()
	}
	for _, c := range counted {
		state.Add(c.scope, c.key, -1)
	}
	if s.Tool != nil {
		return guest.Cancel(fmt.Sprintf("Tool call limit exceeded. Do not call '%s' again.", *s.Tool))
	}
	return guest.Cancel("Tool call limit exceeded. Do not make additional tool calls.")
}

func init() {
	config.Validate(validate)
	steering.Handle(check)
}

func main() {}
