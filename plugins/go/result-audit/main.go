// result-audit (result): writes one info line per tool result to the host's
// log: "tool=<name> call=<id> error=<bool> bytes=<n>", where n is the length
// in bytes of the result's JSON text.
package main

import (
	"fmt"

	"toolgate.dev/guest"
	"toolgate.dev/guest/result"
)

// line is the log line for one result.
func line(e guest.ToolResultCallbackEvent) string {
	return fmt.Sprintf("tool=%s call=%s error=%t bytes=%d", e.ToolName, e.CallID, e.IsError, len(e.Result))
}

func init() {
	result.Handle(func(e guest.ToolResultCallbackEvent) { guest.Log(guest.LevelInfo, line(e)) })
}

func main() {}
