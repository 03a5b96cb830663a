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
	field := func(name string) {
		if b[len(b)-1] != '{' {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), name...), `":`...)
	}
	var err error
	if c.Queue != "" {
		field("queue")
		b = jsonenc.String(b, c.Queue)
	}
	if len(c.Statements) > 0 {
		field("statements")
		if b, err = jsonenc.Array(b, len(c.Statements), func(b []byte, i int) ([]byte, error) {
			st := c.Statements[i]
			b = jsonenc.String(append(b, `{"sql":`...), st.SQL)
			if len(st.Args) > 0 {
				var err error
				if b, err = jsonenc.Array(append(b, `,"args":`...), len(st.Args), func(b []byte, j int) ([]byte, error) {
					return jsonenc.Value(b, st.Args[j])
				}); err != nil {
					return nil, err
				}
			}
			return append(b, '}'), nil
		}); err != nil {
			return nil, err
		}
	}
	if len(c.Cache) > 0 {
		field("cache")
		if b, err = jsonenc.Array(b, len(c.Cache), func(b []byte, i int) ([]byte, error) {
			ch := c.Cache[i]
			b = jsonenc.String(append(b, `{"key":`...), ch.Key)
			var err error
			if ch.Patch != nil {
				if b, err = jsonenc.Value(append(b, `,"patch":`...), ch.Patch); err != nil {
					return nil, err
				}
			}
			if ch.Set != nil {
				if b, err = jsonenc.Value(append(b, `,"set":`...), ch.Set); err != nil {
					return nil, err
				}
			}
			if ch.Delete {
				b = append(b, `,"delete":true`...)
			}
			return append(b, '}'), nil
		}); err != nil {
			return nil, err
		}
	}
	if len(c.Affects) > 0 {
		field("affects")
		b, _ = jsonenc.Array(b, len(c.Affects), func(b []byte, i int) ([]byte, error) {
			return jsonenc.String(b, c.Affects[i]), nil
		})
	}
	return append(b, '}'), nil
}

// encodeCommit is c's body.
func encodeCommit(c Commit) (json.RawMessage, error) {
	b, err := appendCommit(make([]byte, 0, commitSize(c)), c)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the request: %w", err)
	}
	return b, nil
}

// commitSize guesses the bytes of c's body, so that appending it rarely
// grows the buffer: its strings, and a few bytes for every argument and
// value encoded.
func commitSize(c Commit) int {
	n := 64 + len(c.Queue)
	for _, st := range c.Statements {
		n += 16 + len(st.SQL) + 24*len(st.Args)
	}
	for _, ch := range c.Cache {
		n += 96 + len(ch.Key)
		switch v := ch.Set.(type) {
		case json.RawMessage:
			n += len(v)
		case []byte:
			n += len(v)
		}
	}
	for _, k := range c.Affects {
		n += 4 + len(k)
	}
	return n
}
