// sql-guard (steering): refuses a run_query call whose sql has no WHERE
// (case-insensitive) and tells the model to add one (is_error = true, so it
// retries); every other call proceeds.
//
// The seed's SqlGuard, line for line (guest.UpperContains(s, x) is
// strings.Contains(strings.ToUpper(s), x), without the copy): like the Python handler (a KeyError)
// and the Rust example (a panic), a run_query call without a string sql
// argument is an error in the guard; the host logs the fault and the call
// proceeds.
package main

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/steering"
)

func check(e guest.BeforeToolCallEvent) guest.Verdict {
	if e.ToolName == "run_query" {
		sql, ok := e.StringArg("sql")
		if !ok {
			panic("run_query called without a string `sql` argument")
		}
		if !guest.UpperContains(sql, "WHERE") {
			return guest.Steer("Add a WHERE clause before running this query.")
		}
	}
	return guest.Proceed()
}

func init() { steering.Handle(check) }

func main() {}
