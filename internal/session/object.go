package session

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/jsonscan"
	"github.com/writeback/writeback/internal/store"
)

// decodeObject decodes a session object as Queues.Head reads it from
// Redis. An applier decodes every session it applies, and the objects are
// mostly statement texts and their arguments, which encoding/json's
// reflection walks byte by byte and copies; decodeObject reads the exact
// shape json.Marshal(Object) writes — no spaces, the fields in their
// order, omitted when empty — slicing the texts and arguments out of text
// and unquoting only those with escapes. Anything else (an object written
// by another version, a field it does not know) goes to encoding/json, so
// the result is always json.Unmarshal's.
func decodeObject(text string, o *Object) error {
	var fast Object
	if fastObject(text, &fast) {
		*o = fast
		return nil
	}
	return json.Unmarshal([]byte(text), o)
}

// fastObject is decodeObject's own parser; false: not the shape it reads
// (o is then partly set).
func fastObject(s string, o *Object) bool {
	p := objParser{s: s, b: []byte(s)}
	if !p.lit(`{"id":`) || !p.str(&o.ID) || !p.lit(`,"queue":`) || !p.str(&o.Queue) || !p.lit(`,"at":`) || !p.int(&o.At) {
		return false
	}
	if p.lit(`,"statements":[`) && !p.statements(&o.Statements) {
		return false
	}
	if p.lit(`,"affects":[`) && !p.list(func() bool {
		var k string
		o.Affects = append(o.Affects, k)
		return p.str(&o.Affects[len(o.Affects)-1])
	}) {
		return false
	}
	return p.lit(`}`) && p.i == len(s)
}

// objParser reads a JSON text from position i.
type objParser struct {
	s string
	i int
	// b, when set, holds s's bytes: the raw values read are slices of
	// it, not copies each.
	b []byte
	// args backs the statements' arguments, so that a statement's do not
	// cost an allocation each as its slice grows.
	args []json.RawMessage
}

// lit consumes lit if the text continues with it.
func (p *objParser) lit(lit string) bool {
	if strings.HasPrefix(p.s[p.i:], lit) {
		p.i += len(lit)
		return true
	}
	return false
}

// str reads a JSON string into v.
func (p *objParser) str(v *string) bool {
	end, escaped, ok := stringEnd(p.s, p.i)
	if !ok {
		return false
	}
	raw := p.s[p.i+1 : end-1]
	if escaped || !utf8.ValidString(raw) {
		raw = unquote(raw)
	}
	*v = raw
	p.i = end
	return true
}

// int reads a JSON integer into v.
func (p *objParser) int(v *int64) bool {
	j := p.i
	if j < len(p.s) && p.s[j] == '-' {
		j++
	}
	digits := j
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	if j-digits > 1 && p.s[digits] == '0' {
		return false // a leading zero is not JSON
	}
	n, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
	if err != nil {
		return false
	}
	*v, p.i = n, j
	return true
}

// statements reads the statements of an array whose '[' was read, each
// {"sql":…} with its "args" when it has any, as json.Marshal writes a
// store.Statement with no empty args, through its ']'.
func (p *objParser) statements(out *[]store.Statement) bool {
	return p.list(func() bool {
		var st store.Statement
		if !p.lit(`{"sql":`) || !p.str(&st.SQL) {
			return false
		}
		if p.lit(`,"args":[`) {
			from := len(p.args)
			if !p.list(func() bool {
				v, ok := p.raw()
				p.args = append(p.args, v)
				return ok
			}) {
				return false
			}
			st.Args = p.args[from:len(p.args):len(p.args)]
		}
		*out = append(*out, st)
		return p.lit(`}`)
	})
}

// list reads the items of an array whose '[' was read, each with item,
// through its ']'.
func (p *objParser) list(item func() bool) bool {
	for {
		if !item() {
			return false
		}
		if p.lit("]") {
			return true
		}
		if !p.lit(",") {
			return false
		}
	}
}

// value reads one JSON value, as it is written.
func (p *objParser) value() (string, bool) {
	end, ok := valueEnd(p.s, p.i, 0)
	if !ok {
		return "", false
	}
	v := p.s[p.i:end]
	p.i = end
	return v, true
}

// raw reads one JSON value, as it is written, as a slice of b when set.
func (p *objParser) raw() (json.RawMessage, bool) {
	from := p.i
	v, ok := p.value()
	if p.b != nil {
		return p.b[from:p.i:p.i], ok
	}
	return json.RawMessage(v), ok
}

// maxValueDepth bounds the nesting valueEnd follows.
const maxValueDepth = 64

// valueEnd returns the end of the JSON value starting at s[i] (no spaces
// around or inside it, as json.Marshal writes).
func valueEnd(s string, i, depth int) (int, bool) {
	if i >= len(s) || depth > maxValueDepth {
		return 0, false
	}
	switch c := s[i]; {
	case c == '"':
		end, _, ok := stringEnd(s, i)
		return end, ok
	case c == '[' || c == '{':
		closer := byte(']')
		if c == '{' {
			closer = '}'
		}
		i++
		if i < len(s) && s[i] == closer {
			return i + 1, true
		}
		for {
			if c == '{' {
				end, _, ok := stringEnd(s, i)
				if !ok || end >= len(s) || s[end] != ':' {
					return 0, false
				}
				i = end + 1
			}
			end, ok := valueEnd(s, i, depth+1)
			if !ok || end >= len(s) {
				return 0, false
			}
			i = end + 1
			switch s[end] {
			case ',':
			case closer:
				return i, true
			default:
				return 0, false
			}
		}
	case c == 't':
		return literalEnd(s, i, "true")
	case c == 'f':
		return literalEnd(s, i, "false")
	case c == 'n':
		return literalEnd(s, i, "null")
	default:
		j := i
		for j < len(s) && strings.IndexByte("-+.eE0123456789", s[j]) >= 0 {
			j++
		}
		if !jsonscan.IsNumber(s[i:j]) {
			return 0, false
		}
		return j, true
	}
}

func literalEnd(s string, i int, lit string) (int, bool) {
	if strings.HasPrefix(s[i:], lit) {
		return i + len(lit), true
	}
	return 0, false
}

// stringEnd returns the end of the JSON string starting at s[i] (just
// past its closing quote) and whether it holds escapes. It accepts only
// what JSON does: no control characters, and only JSON's escapes.
func stringEnd(s string, i int) (end int, escaped, ok bool) {
	if i >= len(s) || s[i] != '"' {
		return 0, false, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c == '\\':
			escaped = true
			j++
			if j >= len(s) || strings.IndexByte(`"\/bfnrtu`, s[j]) < 0 {
				return 0, false, false
			}
			if s[j] == 'u' {
				if j+4 >= len(s) {
					return 0, false, false
				}
				for _, h := range []byte(s[j+1 : j+5]) {
					if !isHex(h) {
						return 0, false, false
					}
				}
				j += 4
			}
		case c < 0x20:
			return 0, false, false
		}
	}
	return 0, false, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// unquote decodes the inside of a JSON string that stringEnd accepted, as
// encoding/json does: invalid UTF-8 and unpaired surrogates become U+FFFD.
func unquote(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			b.WriteRune(r) // RuneError for what is not UTF-8
			i += size
			continue
		}
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		e := s[i+1]
		i += 2
		switch e {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r := hex4(s[i : i+4])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if strings.HasPrefix(s[i:], `\u`) {
					r2 = hex4(s[i+2 : i+6])
				}
				if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
					b.WriteRune(d)
					i += 6
					continue
				}
				r = unicode.ReplacementChar
			}
			b.WriteRune(r)
		default: // " \\ /
			b.WriteByte(e)
		}
	}
	return b.String()
}

// hex4 is the value of four hex digits (stringEnd checked them).
func hex4(h string) rune {
	var r rune
	for _, c := range []byte(h) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// splitObject reads a JSON object written without spaces (as entries are
// cached) into its fields, in order, each value as it is written; a key
// that appears twice keeps its last value at its first place, as
// encoding/json would read it. ok is false for anything else.
func splitObject(s string) (doc change.Doc, order []string, ok bool) {
	p := objParser{s: s}
	if !p.lit("{") {
		return nil, nil, false
	}
	doc = change.Doc{}
	if p.lit("}") {
		return doc, nil, p.i == len(s)
	}
	for {
		var k string
		if !p.str(&k) || !p.lit(":") {
			return nil, nil, false
		}
		v, ok := p.value()
		if !ok {
			return nil, nil, false
		}
		if _, dup := doc[k]; !dup {
			order = append(order, k)
		}
		doc[k] = json.RawMessage(v)
		if p.lit("}") {
			return doc, order, p.i == len(s)
		}
		if !p.lit(",") {
			return nil, nil, false
		}
	}
}
