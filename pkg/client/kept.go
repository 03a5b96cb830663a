package client

import (
	"encoding/json"

	"github.com/writeback/writeback/internal/kept"
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
	return func(c *Client) { c.kept = kept.New(maxBytes) }
}

// fromKept serves from k what it can of r in session (the
// peeks; the keys too when there is no session, as they take no lease),
// into vals and peeked (r's lengths, nil without copies). It returns the
// reads still to send and where their answers go.
func fromKept(k *kept.Copies, session string, r Reads) (rest Reads, vals, peeked []json.RawMessage, keyAt, peekAt []int) {
	rest.ForUpdate = r.ForUpdate
	vals = make([]json.RawMessage, len(r.Keys))
	if len(r.Peek) > 0 {
		peeked = make([]json.RawMessage, len(r.Peek))
	}
	for i, key := range r.Keys {
		if session == "" && !r.ForUpdate { // lease=x without a session is the sidecar's 400
			if v, ok := k.Get(key); ok {
				vals[i] = v
				continue
			}
		}
		rest.Keys, keyAt = append(rest.Keys, key), append(keyAt, i)
	}
	for i, key := range r.Peek {
		if v, ok := k.Get(key); ok {
			peeked[i] = v
			continue
		}
		rest.Peek, peekAt = append(rest.Peek, key), append(peekAt, i)
	}
	return rest, vals, peeked, keyAt, peekAt
}
