// Package kept holds copies of values that do not change for a while —
// the entries of immutable mappings — each until a given time, within a
// byte budget (otter's weight-bounded cache, its admission policy
// deciding what stays). The sidecar keeps the entries its reads outside a
// session find (internal/session), and the Go client the ones the sidecar
// says it keeps (pkg/client.WithImmutableCache).
//
// Values are copied in and out: a caller may change the bytes it put or
// was given (an embedded application, say) without changing the copy.
package kept

import (
	"bytes"
	"time"

	"github.com/maypok86/otter/v2"
)

// Copies are kept values; a nil *Copies keeps nothing.
type Copies struct {
	c *otter.Cache[string, entry]
}

type entry struct {
	val   []byte
	until time.Time
}

// New returns copies within maxBytes (each counted with its key and 96
// bytes of overhead); nil when maxBytes is 0 or less.
func New(maxBytes int64) *Copies {
	if maxBytes <= 0 {
		return nil
	}
	return &Copies{c: otter.Must(&otter.Options[string, entry]{
		MaximumWeight: uint64(maxBytes),
		Weigher: func(k string, e entry) uint32 {
			return uint32(min(96+len(k)+len(e.val), 1<<31))
		},
	})}
}

// Get returns a copy of key's value, while it is kept.
func (c *Copies) Get(key string) ([]byte, bool) {
	e, ok := c.entry(key)
	if !ok {
		return nil, false
	}
	return bytes.Clone(e.val), true
}

// Until returns when key's kept value stops being served, if it is kept.
func (c *Copies) Until(key string) (time.Time, bool) {
	e, ok := c.entry(key)
	return e.until, ok
}

// Put keeps a copy of val until until. A nil val is not kept.
func (c *Copies) Put(key string, val []byte, until time.Time) {
	if c == nil || val == nil {
		return
	}
	c.c.Set(key, entry{val: bytes.Clone(val), until: until})
}

func (c *Copies) entry(key string) (entry, bool) {
	if c == nil {
		return entry{}, false
	}
	e, ok := c.c.GetIfPresent(key)
	if !ok {
		return entry{}, false
	}
	if !time.Now().Before(e.until) {
		c.c.Invalidate(key)
		return entry{}, false
	}
	return e, true
}
