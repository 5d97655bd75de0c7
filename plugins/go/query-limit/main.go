// query-limit (rewrite): a run_query call whose sql has no LIMIT
// (case-insensitive) is rewritten to the same tool with " LIMIT 100"
// appended (after dropping trailing whitespace and ';'), every other
// argument kept; other calls, and calls without a string sql, pass through.
//
// Its config sets another cap, and is checked when the plugin loads (a key
// other than limit, or a limit that is not a whole number of at least 1,
// refuses the plugin):
//
//	[plugin.config]
//	limit = 100 # rows appended as " LIMIT <limit>" (default 100)
package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode"

	"toolgate.dev/guest"
	"toolgate.dev/guest/config"
	"toolgate.dev/guest/rewrite"
)

// defaultLimit is the row cap appended to unbounded queries when the config
// sets none.
const defaultLimit = 100

// settings is the manifest's config.
type settings struct {
	// Limit is the row cap (nil: defaultLimit).
	Limit *int64 `json:"limit"`
}

// validate is the check of the config at load.
func validate(s settings) error {
	if s.Limit != nil && *s.Limit < 1 {
		return errors.New("config: limit must be 1 or more")
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

func bound(e guest.ToolCallDispatchEvent) *guest.Rewrite {
	if e.ToolName != "run_query" {
		return nil
	}
	limit := int64(defaultLimit)
	if s := load(guest.Config()); s.Limit != nil {
		limit = *s.Limit
	}
	return boundTo(limit, e)
}

// boundTo is bound with the row cap limit.
func boundTo(limit int64, e guest.ToolCallDispatchEvent) *guest.Rewrite {
	sql, ok := e.StringArg("sql")
	if !ok || e.ToolName != "run_query" || guest.UpperContains(sql, "LIMIT") {
		return nil
	}
	bounded := strings.TrimRightFunc(sql, func(r rune) bool {
		return unicode.IsSpace(r) || r == ';'
	}) + " LIMIT " + strconv.FormatInt(limit, 10)
	// Only sql changes: every other argument keeps its exact bytes.
	args, ok := guest.SetStringMember(e.Args, "sql", bounded)
	if !ok {
		return nil
	}
	return &guest.Rewrite{ToolName: e.ToolName, Args: args}
}

func init() {
	config.Validate(validate)
	rewrite.Handle(bound)
}

func main() {}
