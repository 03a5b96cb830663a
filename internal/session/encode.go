package session

import (
	"strconv"

	"github.com/writeback/writeback/internal/jsonenc"
)

// encodeObject is json.Marshal(o), byte for byte, written without
// reflection: every commit encodes its session object, mostly statement
// texts and arguments that are already compact JSON, which json.Marshal
// walks by reflection and compacts again. Strings that need escaping and
// arguments that are not compact go through encoding/json (so an invalid
// argument is refused as json.Marshal refuses it).
func encodeObject(o Object) ([]byte, error) {
	b := make([]byte, 0, 64+objectSize(o))
	b = append(b, `{"id":`...)
	b = jsonenc.String(b, o.ID)
	b = append(b, `,"queue":`...)
	b = jsonenc.String(b, o.Queue)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, o.At, 10)
	if len(o.Statements) > 0 {
		b = append(b, `,"statements":[`...)
		for i, st := range o.Statements {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"sql":`...)
			b = jsonenc.String(b, st.SQL)
			if len(st.Args) > 0 {
				b = append(b, `,"args":[`...)
				for j, a := range st.Args {
					if j > 0 {
						b = append(b, ',')
					}
					var err error
					if b, err = jsonenc.Raw(b, a); err != nil {
						return nil, err
					}
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(o.Affects) > 0 {
		b = append(b, `,"affects":[`...)
		for i, k := range o.Affects {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(b, k)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// objectSize is about the bytes o's texts take.
func objectSize(o Object) int {
	n := len(o.ID) + len(o.Queue)
	for _, st := range o.Statements {
		n += 16 + len(st.SQL)
		for _, a := range st.Args {
			n += 1 + len(a)
		}
	}
	for _, k := range o.Affects {
		n += 3 + len(k)
	}
	return n
}
