package session

import (
	"bytes"
	"encoding/json"
	"errors"
)

// DecodeCommit decodes the body of POST /v1/sessions/{id}/commit strictly:
// one JSON object with no field CommitRequest does not have. The shape
// json.Marshal writes for the Go client's Commit — no spaces, the fields
// in their order, each omitted when empty — is read by the session's own
// parser (objParser), which slices the statement texts and arguments out
// of the body instead of walking them through encoding/json's reflection
// (most of a commit's decoding time); anything else goes to encoding/json,
// so the result, and whether there is an error, are always its. The raw
// values of the result may be slices of body: leave body as it is while
// the request is in use.
func DecodeCommit(body []byte) (CommitRequest, error) {
	var req CommitRequest
	if fastCommitBytes(body, &req) {
		return req, nil
	}
	req = CommitRequest{}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return CommitRequest{}, err
	}
	if dec.More() {
		return CommitRequest{}, ErrTrailing
	}
	return req, nil
}

// ErrTrailing is DecodeCommit's error for a body that holds more than its
// object.
var ErrTrailing = errors.New("the commit body holds more than one JSON value")

// fastCommitBytes is fastCommit on body, whose raw values (arguments,
// patches, values set) req then holds as slices of body, not copies.
func fastCommitBytes(body []byte, req *CommitRequest) bool {
	return parseCommit(objParser{s: string(body), b: body}, req)
}

// fastCommit is DecodeCommit's own parser; false: not the shape it reads
// (req is then partly set).
func fastCommit(s string, req *CommitRequest) bool {
	return parseCommit(objParser{s: s}, req)
}

// parseCommit is fastCommit with p.
func parseCommit(p objParser, req *CommitRequest) bool {
	s := p.s
	if !p.lit("{") {
		return false
	}
	first := true
	field := func(name string) bool {
		if first {
			if p.lit(`"` + name + `":`) {
				first = false
				return true
			}
			return false
		}
		return p.lit(`,"` + name + `":`)
	}
	if field("queue") && !p.str(&req.Queue) {
		return false
	}
	if field("statements") && !(p.lit("[") && p.statements(&req.Statements)) {
		return false
	}
	if field("cache") && !(p.lit("[") && p.list(func() bool {
		var c CacheChange
		if !p.lit(`{"key":`) || !p.str(&c.Key) {
			return false
		}
		for _, f := range []struct {
			name string
			v    *json.RawMessage
		}{{"patch", &c.Patch}, {"set", &c.Set}} {
			if p.lit(`,"` + f.name + `":`) {
				v, ok := p.raw()
				if !ok {
					return false
				}
				*f.v = v
			}
		}
		if p.lit(`,"delete":true`) {
			c.Delete = true
		}
		req.Cache = append(req.Cache, c)
		return p.lit("}")
	})) {
		return false
	}
	if field("affects") && !(p.lit("[") && p.list(func() bool {
		req.Affects = append(req.Affects, "")
		return p.str(&req.Affects[len(req.Affects)-1])
	})) {
		return false
	}
	return p.lit("}") && p.i == len(s)
}
