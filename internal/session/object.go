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
	end, escaped, ok := jsonscan.StringEnd(p.s, p.i)
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
	end, ok := jsonscan.ValueEnd(p.s, p.i)
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
