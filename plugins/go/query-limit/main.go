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

func bound(e guest.DispatchEvent) *guest.Rewrite {
	if e.ToolName != "run_query" {
		return nil
	}
	sql, ok := e.StringArg("sql")
	if !ok || strings.Contains(strings.ToUpper(sql), "LIMIT") {
		return nil
	}
	args, err := guest.Object(e.Args)
	if err != nil {
		return nil
	}
	args["sql"] = strings.TrimRightFunc(sql, func(r rune) bool {
		return unicode.IsSpace(r) || r == ';'
	}) + limit
	return guest.RewriteTo(e.ToolName, args)
}

func init() { rewrite.Handle(bound) }

func main() {}
