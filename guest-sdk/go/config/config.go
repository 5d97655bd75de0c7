// Package config checks a guard's configuration once, when its plugin
// loads (the contract's optional config export, toolgate:guard@0.3.0).
//
// Importing this package makes the guard's component export
// toolgate:guard/config@0.3.0 (validate-config); a guard that does not
// import it exports no check, and the host loads it whatever its config. The
// host calls the check with the manifest's config table as JSON (`{}` when
// none is set): an error refuses the plugin with the error's text as the
// message (on reload, the last good version keeps serving).
//
//	type settings struct {
//		Limit *int64 `json:"limit"`
//	}
//
//	func init() {
//		config.Validate(func(s settings) error {
//			if s.Limit != nil && *s.Limit < 1 {
//				return errors.New("config: limit must be 1 or more")
//			}
//			return nil
//		})
//	}
//
// A hook reads the same typed settings with [guest.ConfigAs] and
// [guest.Config].
package config

import (
	"encoding/json"

	"toolgate.dev/guest"
)

// Handler checks a plugin's configuration (a JSON object): nil accepts it,
// an error refuses the plugin with the error's text. A panic is a fault: the
// plugin is refused too.
type Handler func(raw json.RawMessage) error

var handler Handler

// Handle registers the guard's configuration check. Call it from an init
// function.
func Handle(h Handler) { handler = h }

// Validate registers a check of the configuration read into a T with
// [guest.ConfigAs] (a key T has no field for, or a value of the wrong type,
// refuses the plugin with encoding/json's message), then given to check (nil:
// reading it is the whole check).
func Validate[T any](check func(T) error) {
	Handle(func(raw json.RawMessage) error {
		settings, err := guest.ConfigAs[T](raw)
		if err != nil || check == nil {
			return err
		}
		return check(settings)
	})
}

// Call runs the registered check as the host would (nil when none is
// registered). Guards' unit tests use it.
func Call(raw json.RawMessage) error {
	if handler == nil {
		return nil
	}
	return handler(raw)
}
