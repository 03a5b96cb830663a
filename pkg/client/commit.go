package client

import (
	"encoding/json"
	"fmt"

	"github.com/writeback/writeback/internal/jsonenc"
)

// appendCommit appends c as json.Marshal encodes it, the bytes exactly
// (the sidecar reads that shape with its own parser), but without its
// reflection over every statement and argument: jsonenc writes the
// strings, numbers and raw values a commit is made of, and hands the rest
// to encoding/json.
func appendCommit(b []byte, c Commit) ([]byte, error) {
	b = append(b, '{')
	sep := func(name string) {
		if b[len(b)-1] != '{' {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
	}
	var err error
	if c.Queue != "" {
		sep("queue")
		b = jsonenc.String(b, c.Queue)
	}
	if len(c.Statements) > 0 {
		sep("statements")
		b = append(b, '[')
		for i, st := range c.Statements {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(append(b, `{"sql":`...), st.SQL)
			if len(st.Args) > 0 {
				b = append(b, `,"args":[`...)
				for j, a := range st.Args {
					if j > 0 {
						b = append(b, ',')
					}
					if b, err = jsonenc.Value(b, a); err != nil {
						return nil, err
					}
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(c.Cache) > 0 {
		sep("cache")
		b = append(b, '[')
		for i, ch := range c.Cache {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(append(b, `{"key":`...), ch.Key)
			for _, f := range []struct {
				name string
				v    any
			}{{"patch", ch.Patch}, {"set", ch.Set}} {
				if f.v != nil {
					if b, err = jsonenc.Value(append(append(append(b, `,"`...), f.name...), `":`...), f.v); err != nil {
						return nil, err
					}
				}
			}
			if ch.Delete {
				b = append(b, `,"delete":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(c.Affects) > 0 {
		sep("affects")
		b = append(b, '[')
		for i, k := range c.Affects {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(b, k)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// encodeCommit is c's body.
func encodeCommit(c Commit) (json.RawMessage, error) {
	b, err := appendCommit(make([]byte, 0, 256), c)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the request: %w", err)
	}
	return b, nil
}
