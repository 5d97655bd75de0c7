package guest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON scanner for reading and replacing one top-level member of an
// object without decoding the rest. encoding/json costs about 300 wasm
// instructions per byte of a 1 MiB argument (hundreds of millions of fuel);
// this costs a few.

// span is where a member's value sits in an object, and where the object
// closes.
type span struct {
	start, end int  // the value, raw[start:end]
	close      int  // index of the object's closing '}'
	found      bool // a member of that name exists (the last one wins)
	empty      bool // the object has no members
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str moves past the string starting at s.i and tells whether it holds an
// escape.
func (s *scanner) str() (ok, escaped bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false, false
	}
	i := s.i + 1
	for {
		q := bytes.IndexByte(s.b[i:], '"')
		if q < 0 {
			return false, false
		}
		bs := bytes.IndexByte(s.b[i:i+q], '\\')
		if bs < 0 {
			s.i = i + q + 1
			return true, escaped
		}
		escaped = true
		i += bs + 2 // the backslash and the byte it escapes
		if i > len(s.b) {
			return false, false
		}
	}
}

// skip moves past one value.
func (s *scanner) skip() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		ok, _ := s.str()
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if ok, _ := s.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default: // a number, true, false or null
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return s.i > start
	}
}

// member finds the top-level member name of the JSON object raw.
func member(raw []byte, name string) (span, bool) {
	s := scanner{b: raw}
	var sp span
	s.ws()
	if s.i >= len(raw) || raw[s.i] != '{' {
		return sp, false
	}
	s.i++
	s.ws()
	if s.i < len(raw) && raw[s.i] == '}' {
		sp.close, sp.empty = s.i, true
		return sp, trailingSpace(raw, s.i+1)
	}
	for {
		s.ws()
		keyStart := s.i
		ok, escaped := s.str()
		if !ok {
			return sp, false
		}
		var match bool
		if escaped {
			key, ok := unquote(raw[keyStart:s.i])
			match = ok && key == name
		} else {
			match = string(raw[keyStart+1:s.i-1]) == name
		}
		s.ws()
		if s.i >= len(raw) || raw[s.i] != ':' {
			return sp, false
		}
		s.i++
		s.ws()
		start := s.i
		if !s.skip() {
			return sp, false
		}
		if match {
			sp.start, sp.end, sp.found = start, s.i, true
		}
		s.ws()
		if s.i >= len(raw) {
			return sp, false
		}
		switch raw[s.i] {
		case ',':
			s.i++
		case '}':
			sp.close = s.i
			return sp, trailingSpace(raw, s.i+1)
		default:
			return sp, false
		}
	}
}

func trailingSpace(raw []byte, i int) bool {
	s := scanner{b: raw, i: i}
	s.ws()
	return s.i == len(raw)
}

// unquote decodes one JSON string literal (quotes included).
func unquote(q []byte) (string, bool) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return "", false
	}
	body := q[1 : len(q)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), true
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(body) {
			return "", false
		}
		i += 2
		switch body[i-1] {
		case '"', '\\', '/':
			out = append(out, body[i-1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(body, i)
			if !ok {
				return "", false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
					r2, ok = hex4(body, i+2)
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	return string(out), true
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// quote encodes s as a JSON string literal; invalid UTF-8 becomes U+FFFD.
func quote(s string) []byte {
	out := make([]byte, 0, len(s)+2)
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		// Skip 8 plain bytes at a time: no control byte, quote, backslash
		// or non-ASCII byte among them.
		if i+8 <= len(s) {
			w := word(s, i)
			if w&highs|hasLess(w, 0x20)|hasByte(w, '"')|hasByte(w, '\\') == 0 {
				i += 8
				continue
			}
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			out = append(out, s[start:i]...)
			out = append(out, `\ufffd`...)
			i++
			start = i
			continue
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

// StringMember returns obj[name] when obj is a JSON object whose member
// name is a string (the last such member, when the name repeats).
func StringMember(obj json.RawMessage, name string) (string, bool) {
	sp, ok := member(obj, name)
	if !ok || !sp.found || obj[sp.start] != '"' {
		return "", false
	}
	return unquote(obj[sp.start:sp.end])
}

// Member returns the raw JSON value of obj[name] when obj is a JSON object
// with a member of that name (the last one, when the name repeats), every
// byte as it was, without decoding the rest.
func Member(obj json.RawMessage, name string) (json.RawMessage, bool) {
	sp, ok := member(obj, name)
	if !ok || !sp.found {
		return nil, false
	}
	return obj[sp.start:sp.end:sp.end], true
}

// IntMember returns obj[name] when obj is a JSON object whose member name
// is an integer that fits in an int64 (written without a fraction or an
// exponent: 7 and -3, not 7.0 or 1e3), without decoding the rest.
func IntMember(obj json.RawMessage, name string) (int64, bool) {
	raw, ok := Member(obj, name)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// SetStringMember returns a copy of the JSON object obj with member name set
// to the string value: replaced where it is (every other byte kept as it
// was, so numbers and member order survive exactly), or appended. ok is false
// when obj is not a JSON object.
func SetStringMember(obj json.RawMessage, name, value string) (json.RawMessage, bool) {
	sp, ok := member(obj, name)
	if !ok {
		return nil, false
	}
	v := quote(value)
	if sp.found {
		out := make([]byte, 0, len(obj)-(sp.end-sp.start)+len(v))
		out = append(out, obj[:sp.start]...)
		out = append(out, v...)
		return append(out, obj[sp.end:]...), true
	}
	k := quote(name)
	out := make([]byte, 0, len(obj)+len(k)+len(v)+2)
	out = append(out, obj[:sp.close]...)
	if !sp.empty {
		out = append(out, ',')
	}
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, v...)
	return append(out, obj[sp.close:]...), true
}
