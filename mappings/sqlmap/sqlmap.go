// Package sqlmap is the built-in "sql" mapping plugin: a key pattern, a
// parameterised SELECT whose parameters are the key's placeholders in
// order, and the queue the value depends on.
//
//	mappings:
//	  - plugin: sql
//	    store: pg
//	    key: "account:{branch}:{id}"
//	    query: "SELECT id, balance FROM account WHERE branch = $1 AND id = $2"
//	    many: false          # one row as an object (none: 404); true: an array of rows
//	    queue: "bank/{branch}"
//	    ttl: 1h
package sqlmap

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/writeback/writeback/internal/sqlcheck"
	"github.com/writeback/writeback/mappings"
)

func init() {
	mappings.Register(mappings.Module{ID: "sql", New: func() mappings.Mapping { return new(Mapping) }})
}

// Mapping is one configured "sql" mapping.
type Mapping struct {
	Store   string        `yaml:"store"` // the store to query
	Key     string        `yaml:"key"`   // the key pattern, e.g. "account:{id}"
	Query   string        `yaml:"query"` // a SELECT; its parameters are the key's placeholders, in order
	Many    bool          `yaml:"many"`  // false: the single row as an object; true: all rows as an array
	QueueOf string        `yaml:"queue"` // optional queue pattern over the key's placeholders, e.g. "bank/{id}"
	Life    time.Duration `yaml:"ttl"`   // lifetime of the cache entries (default 1h)
	// Fixed declares the entries immutable (mappings.Fixed): no session
	// changes the columns the query reads.
	Fixed bool `yaml:"immutable"`
	// Stale lets reads lag the mapping's queue by up to this long
	// (mappings.Stale); 0, the default: never.
	Stale time.Duration `yaml:"staleness"`

	key   *mappings.Pattern
	queue *mappings.Pattern
	store mappings.Store
}

// Provision parses the patterns and finds the store.
func (m *Mapping) Provision(ctx mappings.Context) error {
	if m.Key == "" {
		return fmt.Errorf("key: no key pattern is set; set key like \"account:{id}\"")
	}
	var err error
	if m.key, err = mappings.ParsePattern(m.Key); err != nil {
		return fmt.Errorf("key: %v", err)
	}
	st, ok := ctx.Stores[m.Store]
	if !ok {
		names := make([]string, 0, len(ctx.Stores))
		for n := range ctx.Stores {
			names = append(names, n)
		}
		return fmt.Errorf("store: %q is not a configured SQL store; use one of: %s", m.Store, strings.Join(names, ", "))
	}
	m.store = st
	if m.QueueOf != "" {
		if m.queue, err = mappings.ParsePattern(m.QueueOf); err != nil {
			return fmt.Errorf("queue: %v", err)
		}
		for _, n := range m.queue.Names() {
			if !contains(m.key.Names(), n) {
				return fmt.Errorf("queue: {%s} is not a placeholder of the key %q", n, m.Key)
			}
		}
		family, _, ok := strings.Cut(m.QueueOf, "/")
		if !ok || strings.Contains(family, "{") {
			return fmt.Errorf("queue: %q must start with a configured queue family and a '/', e.g. \"bank/{id}\"", m.QueueOf)
		}
		qs, ok := ctx.Queues[family]
		if !ok {
			return fmt.Errorf("queue: %q is not a configured queue family; add it under queues", family)
		}
		if qs != m.Store {
			return fmt.Errorf("queue: the sessions of %s apply to store %s, but this mapping reads store %s; use the same store", family, qs, m.Store)
		}
	}
	return nil
}

// Validate checks the query against the key.
func (m *Mapping) Validate() error {
	n, err := sqlcheck.Placeholders(sqlcheck.Dialect(m.store.Dialect()), m.Query)
	if err != nil {
		return fmt.Errorf("query: %v", err)
	}
	if want := len(m.key.Names()); n != want {
		return fmt.Errorf("query: it has %d parameters and the key %q has %d placeholders; they bind in order, one each", n, m.Key, want)
	}
	if m.Life < 0 {
		return fmt.Errorf("ttl: %s is negative; use a duration such as 1h", m.Life)
	}
	switch {
	case m.Stale < 0:
		return fmt.Errorf("staleness: %s is negative; use a duration such as 1s, or 0 for reads that never lag", m.Stale)
	case m.Stale > 0 && m.Fixed:
		return fmt.Errorf("staleness: immutable entries never lag; remove staleness or immutable")
	case m.Stale > 0 && m.Stale < 2*time.Millisecond:
		return fmt.Errorf("staleness: %s is below the 2ms a bound needs (half of it is the entries' lifetime, in whole milliseconds); use at least 2ms, or 0", m.Stale)
	}
	return nil
}

// Match matches the key pattern.
func (m *Mapping) Match(key string) (mappings.Params, bool) { return m.key.Match(key) }

// Queue renders the queue pattern ("" without one).
func (m *Mapping) Queue(p mappings.Params) string {
	if m.queue == nil {
		return ""
	}
	q, err := m.queue.Render(p)
	if err != nil {
		return ""
	}
	return q
}

// Load runs the query with the key's placeholders as its parameters.
func (m *Mapping) Load(ctx context.Context, p mappings.Params) (json.RawMessage, error) {
	names := m.key.Names()
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = p[n]
	}
	rows, err := m.store.QueryJSON(ctx, m.Query, args...)
	if err != nil {
		return nil, err
	}
	if m.Many {
		var b strings.Builder
		b.WriteByte('[')
		for i, r := range rows {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(r)
		}
		b.WriteByte(']')
		return json.RawMessage(b.String()), nil
	}
	switch len(rows) {
	case 0:
		return nil, nil
	case 1:
		return rows[0], nil
	}
	return nil, fmt.Errorf("sqlmap: the query of %q returned %d rows; set many: true or make it return one row", m.Key, len(rows))
}

// TTL is the entries' lifetime.
func (m *Mapping) TTL() time.Duration { return m.Life }

// Immutable reports the immutable setting.
func (m *Mapping) Immutable() bool { return m.Fixed }

// MaxStaleness reports the staleness setting.
func (m *Mapping) MaxStaleness() time.Duration { return m.Stale }

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// Interface guards.
var (
	_ mappings.Mapping     = (*Mapping)(nil)
	_ mappings.Provisioner = (*Mapping)(nil)
	_ mappings.Validator   = (*Mapping)(nil)
	_ mappings.TTLer       = (*Mapping)(nil)
	_ mappings.Fixed       = (*Mapping)(nil)
)
