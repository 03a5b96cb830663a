// Package document serves Design 1's documents to both front doors (the
// HTTP API and the Redis-protocol port): the read path (read.go: a cache
// hit, or a miss merged from the store row and the buffered write under an
// I lease), the write path under each collection's policy (write.go: one
// state machine over the buffer's outcomes, fields.go: the Redis hash
// commands' field writes), scans (scan.go) and the one classification of
// its errors that the front doors render (errors.go).
//
// It composes the buffer, the appliers and the stores; it must not speak
// HTTP or RESP, nor touch Redis or a database other than through them.
package document

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/jitter"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
)

// Policy is how a collection's writes reach the store.
type Policy string

const (
	// WriteBack acknowledges once buffered; appliers apply later.
	WriteBack Policy = "write-back"
	// WriteThrough applies to the store before acknowledging and updates
	// the cache entry.
	WriteThrough Policy = "write-through"
	// WriteAround applies to the store before acknowledging and deletes the
	// cache entry.
	WriteAround Policy = "write-around"
)

// Collection is a collection as the service sees it.
type Collection struct {
	Name      string
	Policy    Policy
	TTL       time.Duration // cache entry lifetime (jitter.TTL: ±10 %)
	StoreName string
	Store     store.Store
	Table     *store.Table
	Near      *NearCache // nil: no near cache (StartNear starts it)
	// ScanCache makes a scan that repeats a recent one while no document
	// was inserted or deleted skip the store (scancache.go).
	ScanCache bool

	near *nearColl // the running near cache
}

// ttl is a cache entry's lifetime: TTL ±10 %, so that entries filled
// together do not expire together.
func (c *Collection) ttl() time.Duration { return jitter.TTL(c.TTL) }

// Service reads and writes documents.
type Service struct {
	buf   *buffer.Buffer
	w     writer // the state machine's I/O: buf and the stores
	app   *bgt.Applier
	colls map[string]*Collection
	m     *metrics.Metrics
	near  *nearService // nil until StartNear, and without near caches
	scans *scanCache   // the lists of collections with ScanCache

	// fallback is set while pinned memory is above writeback's limit:
	// write-back collections then write through, so that the buffer
	// drains instead of growing until Redis runs out of memory.
	fallback atomic.Bool
}

// New returns a service over colls.
func New(buf *buffer.Buffer, app *bgt.Applier, colls map[string]*Collection, m *metrics.Metrics) *Service {
	return &Service{buf: buf, w: ioWriter{buf}, app: app, colls: colls, m: m, scans: newScanCache(DefaultScanCacheBytes)}
}

// SetFallback switches write-back collections to write-through (on) or
// back (off).
func (s *Service) SetFallback(on bool) { s.fallback.Store(on) }

// Fallback reports whether write-back collections currently write through.
func (s *Service) Fallback() bool { return s.fallback.Load() }

// fallingBack reports whether a write to c is a write-back write that the
// fallback turns into a write-through one.
func (s *Service) fallingBack(c *Collection) bool {
	return c.Policy == WriteBack && s.fallback.Load()
}

// policy is the policy a write to c follows now.
func (s *Service) policy(c *Collection) Policy {
	if s.fallingBack(c) {
		return WriteThrough
	}
	return c.Policy
}

// Collection returns the named collection.
func (s *Service) Collection(name string) (*Collection, error) {
	c, ok := s.colls[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownCollection, name)
	}
	return c, nil
}

// Collections returns every collection, by name.
func (s *Service) Collections() map[string]*Collection { return s.colls }

// Ref names a document of a collection by its canonical id.
type Ref struct {
	Coll *Collection
	ID   string
}

// Ref resolves a collection name and an id, as every Service method does.
func (s *Service) Ref(coll, id string) (Ref, error) {
	c, err := s.Collection(coll)
	if err != nil {
		return Ref{}, err
	}
	cid, err := c.Table.Schema.CanonicalID(id)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Coll: c, ID: cid}, nil
}
