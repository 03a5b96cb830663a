package session

import (
	"encoding/json"
	"time"

	"github.com/writeback/writeback/internal/kept"
	"github.com/writeback/writeback/mappings"
)

// fixedCopies keeps in this process the entries of immutable mappings
// (mappings.Immutable) that reads outside a session found, each until its
// mapping's TTL from when it was read, within a byte budget. No session
// changes such an entry (plan refuses commits that name one), so a copy is
// the latest committed value for as long as it is kept: a read outside a
// session (peek) is served from it with no round trip, as the KOSAR near
// cache serves a key under a read lease no write can revoke. A nil
// *fixedCopies keeps nothing.
type fixedCopies struct {
	c *kept.Copies
}

// newFixedCopies returns copies within maxBytes; nil when maxBytes is 0.
func newFixedCopies(maxBytes int64) *fixedCopies {
	c := kept.New(maxBytes)
	if c == nil {
		return nil
	}
	return &fixedCopies{c: c}
}

// get returns the copy of r's entry, if r's mapping is immutable and one
// is kept and still served: bytes of the caller's own, as a read from Redis
// returns (an embedded application may change what it is given).
func (f *fixedCopies) get(r ref) (json.RawMessage, bool) {
	if f == nil || !r.fixed {
		return nil, false
	}
	return f.c.Get(r.key)
}

// put keeps a copy of val, r's entry as read at read, if r's mapping is
// immutable, until the mapping's TTL from then. An absent entry (nil) is
// not kept: a row may appear.
func (f *fixedCopies) put(r ref, val json.RawMessage, read time.Time) {
	if f == nil || !r.fixed {
		return
	}
	f.c.Put(r.key, val, read.Add(mappings.TTL(r.mapping)))
}

// KeptUntil reports whether this process keeps a copy of key's entry (an
// immutable mapping's, read outside a session), and until when it serves
// it: a client that read the entry here may keep its own copy as long
// (the multi-read's "keep").
func (s *Service) KeptUntil(key string) (time.Time, bool) {
	if s.fixed == nil {
		return time.Time{}, false
	}
	return s.fixed.c.Until(key)
}
