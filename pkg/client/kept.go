package client

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/maypok86/otter/v2"
)

// WithImmutableCache keeps, within maxBytes, the entries of immutable
// mappings that multi-reads outside a session's leases (ReadCache's peeks,
// CacheMany without a session) find, for as long as the sidecar says it
// serves its own copy (CacheManyResult.Keep), and serves them from memory
// with no request: the sidecar's near cache, one step closer to the
// application. No session changes such an entry (the sidecar refuses
// commits that name one), so a copy is the latest committed value for as
// long as it is kept. 0, the default, keeps nothing.
func WithImmutableCache(maxBytes int64) Option {
	return func(c *Client) { c.kept = newKeptCopies(maxBytes) }
}

// keptCopies are the entries a Client keeps (WithImmutableCache).
type keptCopies struct {
	c *otter.Cache[string, keptCopy]
}

// keptCopy is a kept entry and when it stops being served.
type keptCopy struct {
	val   json.RawMessage
	until time.Time
}

// newKeptCopies returns copies within maxBytes; nil when maxBytes is 0.
func newKeptCopies(maxBytes int64) *keptCopies {
	if maxBytes <= 0 {
		return nil
	}
	return &keptCopies{c: otter.Must(&otter.Options[string, keptCopy]{
		MaximumWeight: uint64(maxBytes),
		Weigher: func(k string, c keptCopy) uint32 {
			return uint32(min(96+len(k)+len(c.val), 1<<31))
		},
	})}
}

// get returns a copy of key's kept entry while it is served: bytes of the
// caller's own.
func (k *keptCopies) get(key string) (json.RawMessage, bool) {
	if k == nil {
		return nil, false
	}
	c, ok := k.c.GetIfPresent(key)
	if !ok {
		return nil, false
	}
	if !time.Now().Before(c.until) {
		k.c.Invalidate(key)
		return nil, false
	}
	return bytes.Clone(c.val), true
}

// put keeps a copy of val until until.
func (k *keptCopies) put(key string, val json.RawMessage, until time.Time) {
	if k == nil || val == nil {
		return
	}
	k.c.Set(key, keptCopy{val: bytes.Clone(val), until: until})
}

// fromKept serves from the kept copies what it can of r in session (the
// peeks; the keys too when there is no session, as they take no lease),
// into vals and peeked (r's lengths, nil without copies). It returns the
// reads still to send and where their answers go.
func (k *keptCopies) fromKept(session string, r Reads) (rest Reads, vals, peeked []json.RawMessage, keyAt, peekAt []int) {
	rest.ForUpdate = r.ForUpdate
	vals = make([]json.RawMessage, len(r.Keys))
	if len(r.Peek) > 0 {
		peeked = make([]json.RawMessage, len(r.Peek))
	}
	for i, key := range r.Keys {
		if session == "" {
			if v, ok := k.get(key); ok {
				vals[i] = v
				continue
			}
		}
		rest.Keys, keyAt = append(rest.Keys, key), append(keyAt, i)
	}
	for i, key := range r.Peek {
		if v, ok := k.get(key); ok {
			peeked[i] = v
			continue
		}
		rest.Peek, peekAt = append(rest.Peek, key), append(peekAt, i)
	}
	return rest, vals, peeked, keyAt, peekAt
}
