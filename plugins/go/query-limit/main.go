// query-limit (rewrite): a run_query call whose sql has no LIMIT
// (case-insensitive) is rewritten to the same tool with " LIMIT 100"
// appended (after dropping trailing whitespace and ';'), every other
// argument kept; other calls, and calls without a string sql, pass through.
package main

import (
	"strings"
	"unicode"

	"toolgate.dev/guest"
	"toolgate.dev/guest/rewrite"
)

// limit is the row cap appended to unbounded queries.
const limit = " LIMIT 100"

func bound(e guest.ToolCallDispatchEvent) *guest.Rewrite {
	if e.ToolName != "run_query" {
		return nil
	}
	sql, ok := e.StringArg("sql")
	if !ok || guest.UpperContains(sql, "LIMIT") {
		return nil
	}
	bounded := strings.TrimRightFunc(sql, func(r rune) bool {
		return unicode.IsSpace(r) || r == ';'
	}) + limit
	// Only sql changes: every other argument keeps its exact bytes.
	args, ok := guest.SetStringMember(e.Args, "sql", bounded)
	if !ok {
		return nil
	}
	return &guest.Rewrite{ToolName: e.ToolName, Args: args}
}

func init() { rewrite.Handle(bound) }

func main() {}
