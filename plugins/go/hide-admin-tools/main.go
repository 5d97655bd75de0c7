// hide-admin-tools (routing): hides every tool whose name starts with
// "admin_", keeping the remaining names; when there is nothing to hide it
// leaves the palette as it is.
package main

import (
	"strings"

	"toolgate.dev/guest"
	"toolgate.dev/guest/routing"
)

func narrow(e guest.ToolRoutingDecisionEvent) ([]string, bool) {
	kept := []string{}
	for _, name := range e.NarrowedToolNames {
		if !strings.HasPrefix(name, "admin_") {
			kept = append(kept, name)
		}
	}
	return kept, len(kept) != len(e.NarrowedToolNames)
}

func init() { routing.Handle(narrow) }

func main() {}
