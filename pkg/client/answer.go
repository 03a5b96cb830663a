package client

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/writeback/writeback/internal/jsonscan"
)

// decodeAnswer decodes data, an answer's body, into out as json.Unmarshal
// does. A multi-read's answer in the shape the sidecar writes it — no
// whitespace, its fields in their order — is read without encoding/json's
// reflection (most of a session read's decoding time), its values slices
// of data; anything else goes to json.Unmarshal.
func decodeAnswer(data []byte, out any) error {
	if res, ok := out.(*CacheManyResult); ok {
		var fast CacheManyResult
		if cacheManyAnswer(data, &fast) {
			*res = fast
			return nil
		}
	}
	return json.Unmarshal(data, out)
}

// cacheManyAnswer reads {"session":…,"values":[…],"peeked":[…],"keep":{…}}
// (session, peeked and keep omitted when empty; a newline after it) into
// res; false: not that shape.
func cacheManyAnswer(data []byte, res *CacheManyResult) bool {
	b := bytes.TrimSuffix(data, []byte("\n"))
	i := 0
	lit := func(s string) bool {
		if bytes.HasPrefix(b[i:], []byte(s)) {
			i += len(s)
			return true
		}
		return false
	}
	// str reads a string without escapes.
	str := func() (string, bool) {
		end, escaped, ok := jsonscan.StringEnd(b, i)
		if !ok || escaped || !utf8.Valid(b[i+1:end-1]) { // encoding/json replaces invalid UTF-8
			return "", false
		}
		s := string(b[i+1 : end-1])
		i = end
		return s, true
	}
	// values reads an array of values as they are written.
	values := func() ([]json.RawMessage, bool) {
		out := []json.RawMessage{}
		if lit("]") {
			return out, true
		}
		for {
			end, ok := jsonscan.ValueEnd(b, i)
			if !ok {
				return nil, false
			}
			out = append(out, b[i:end:end])
			i = end
			if lit("]") {
				return out, true
			}
			if !lit(",") {
				return nil, false
			}
		}
	}
	if !lit("{") {
		return false
	}
	var ok bool
	if lit(`"session":`) {
		if res.Session, ok = str(); !ok || !lit(",") {
			return false
		}
	}
	if !lit(`"values":[`) {
		return false
	}
	if res.Values, ok = values(); !ok {
		return false
	}
	if lit(`,"peeked":[`) {
		if res.Peeked, ok = values(); !ok {
			return false
		}
	}
	if lit(`,"keep":{`) {
		res.Keep = map[string]int64{}
		for !lit("}") {
			if len(res.Keep) > 0 && !lit(",") {
				return false
			}
			k, ok := str()
			if !ok || !lit(":") {
				return false
			}
			n := jsonscan.NumberLen(b[i:])
			ms, err := strconv.ParseInt(string(b[i:i+n]), 10, 64)
			if n == 0 || err != nil {
				return false
			}
			res.Keep[k] = ms
			i += n
		}
	}
	return lit("}") && i == len(b)
}
