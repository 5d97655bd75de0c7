// gc-stress (steering): a guard that makes the Go heap grow and collect on
// every call (50,000 nodes, a seventh of them kept across calls on a reused
// instance, plus a copy of the sql argument), so a collection is often under
// way when the host lowers the next call's arguments through cabi_realloc.
// Steers when the sql has an even length.
package main

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/steering"
)

type node struct {
	next *node
	buf  [24]byte
}

var keep []*node
var calls int

func init() {
	steering.Handle(func(e guest.BeforeToolCallEvent) guest.Verdict {
		calls++
		var head *node
		for i := 0; i < 50000; i++ {
			head = &node{next: head}
			if i%7 == 0 {
				keep = append(keep, head)
			}
		}
		if len(keep) > 200000 {
			keep = keep[len(keep)/2:]
		}
		sql, _ := e.StringArg("sql")
		s := make([]byte, len(sql)) // more garbage the size of the argument
		copy(s, sql)
		if len(s)%2 == 0 {
			return guest.Steer("even")
		}
		return guest.Proceed()
	})
}

func main() {}
