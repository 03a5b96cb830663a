// Package mappings is the plugin API for derived cache entries: a mapping
// tells the sidecar how to compute the value of a cache key from the store,
// and which queue of sessions that value depends on, so that a miss applies
// the queue's pending sessions before it reads (the paper's Definition 3.3).
//
// A plugin is a Module — an ID and a New func — registered from an init
// func. Built-in plugins live in sub-packages and are compiled in by blank
// imports gathered in mappings/standard, as Caddy's modules are: a plugin
// outside this repository is added the same way, with one more blank
// import in the build. The configuration names a plugin by its ID:
//
//	mappings:
//	  - plugin: sql
//	    store: pg
//	    key: "account:{id}"
//	    …
//
// Lifecycle of each configured mapping, in order: New; its configuration
// (the entry without "plugin") decoded strictly into the value New returned
// — an unknown key is an error; Provision, if implemented; Validate, if
// implemented; use; Cleanup, if implemented, which runs at shutdown and also
// when Provision or Validate failed. See README.md.
package mappings

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// Mapping derives the cache entries of a family of keys from the store.
// Its methods are called concurrently.
type Mapping interface {
	// Match reports whether key is one of this mapping's keys and, if so,
	// its parameters.
	Match(key string) (Params, bool)
	// Queue names the queue ("<family>/<key>", e.g. "bank/3") whose pending
	// sessions the value of the key with these parameters depends on, or ""
	// when it depends on none. Sessions that change the value must commit
	// to this queue; the sidecar refuses others.
	Queue(p Params) string
	// Load computes the value of the key with these parameters from the
	// store as it is now: any JSON value, or nil when there is none (the
	// read answers 404). The sidecar has already applied the pending
	// sessions the value depends on.
	Load(ctx context.Context, p Params) (json.RawMessage, error)
}

// Params are the values a key's placeholders matched, by name.
type Params map[string]string

// TTLer is implemented by mappings whose cache entries live for another
// time than DefaultTTL.
type TTLer interface {
	TTL() time.Duration
}

// Fixed is implemented by mappings that may declare their entries
// immutable: no session changes what they show (reference data: a
// product's name and price list, a warehouse's address). A sidecar keeps
// the entries of such a mapping that reads outside a session find in
// process, for the entries' lifetime, and refuses commits that name them.
type Fixed interface {
	Immutable() bool
}

// Immutable reports whether m declares its entries immutable (Fixed).
func Immutable(m Mapping) bool {
	f, ok := m.(Fixed)
	return ok && f.Immutable()
}

// Stale is implemented by mappings whose reads may lag their queue by a
// bounded time (a report that may be a second old, as TPC-C's Stock-Level
// may): a read of such an entry sees every session of its queue committed
// more than MaxStaleness before the read, not necessarily the later ones.
// Commits need not drop such entries; they expire instead, and a miss
// applies only the queue's sessions older than half the bound before it
// loads, so that it seldom waits for the appliers.
type Stale interface {
	MaxStaleness() time.Duration
}

// Staleness is how far m's reads may lag its queue (Stale); 0: not at
// all, every read sees the latest committed session.
func Staleness(m Mapping) time.Duration {
	if st, ok := m.(Stale); ok && st.MaxStaleness() > 0 {
		return st.MaxStaleness()
	}
	return 0
}

// DefaultTTL is the lifetime of a mapped cache entry when the mapping does
// not say (±10 % jitter is added).
const DefaultTTL = time.Hour

// Provisioner is implemented by mappings that prepare themselves once
// configured: parse patterns, find their store, prepare statements.
type Provisioner interface {
	Provision(ctx Context) error
}

// Validator is implemented by mappings that check their configuration
// after Provision; the error is one sentence naming the field and the fix.
type Validator interface {
	Validate() error
}

// CleanerUpper is implemented by mappings holding resources. Cleanup runs
// at shutdown, and also when Provision or Validate failed.
type CleanerUpper interface {
	Cleanup() error
}

// Store is a database a mapping reads, as the sidecar exposes it.
type Store interface {
	// Dialect is "postgres" or "mysql": the placeholder style ($1 or ?).
	Dialect() string
	// QueryJSON runs a read-only query and returns each row as a JSON
	// object, columns in the query's order: integers, floats and decimals
	// as numbers, booleans as true/false (MySQL: 1/0), json/jsonb as their
	// value, everything else as a string, NULL as null.
	QueryJSON(ctx context.Context, query string, args ...any) ([]json.RawMessage, error)
}

// Context is what Provision gets: the stores and queue families that are
// configured, and a logger.
type Context struct {
	context.Context
	// Stores are the configured SQL stores, by name.
	Stores map[string]Store
	// Queues maps each configured queue family to the name of its store.
	Queues map[string]string
	Logger *slog.Logger
}

// Module is a plugin: ID is the name configurations use ("sql"); New
// returns a new, unconfigured mapping — a pointer to a struct whose
// exported fields, by their yaml tags, are the plugin's configuration.
type Module struct {
	ID  string
	New func() Mapping
}

// Registry holds the known plugins. Default is the one init funcs register
// into; tests build their own with NewRegistry.
type Registry struct {
	mu   sync.RWMutex // guards mods
	mods map[string]Module
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{mods: map[string]Module{}} }

// Default is the registry Register adds to and the sidecar uses.
var Default = NewRegistry()

// Register adds a plugin to Default; call it from an init func. A
// malformed or duplicate module panics, at start rather than at request
// time.
func Register(m Module) { Default.Register(m) }

// Register adds a plugin; a malformed or duplicate module panics.
func (r *Registry) Register(m Module) {
	if m.ID == "" || strings.ContainsAny(m.ID, " \t\n") {
		panic(fmt.Sprintf("mappings: module ID %q is empty or contains spaces", m.ID))
	}
	if m.New == nil {
		panic(fmt.Sprintf("mappings: module %s has no New func", m.ID))
	}
	if v := m.New(); v == nil || reflect.TypeOf(v).Kind() != reflect.Pointer || reflect.TypeOf(v).Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("mappings: module %s: New must return a pointer to a struct, not %T", m.ID, v))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.mods[m.ID]; dup {
		panic(fmt.Sprintf("mappings: module %s registered twice", m.ID))
	}
	r.mods[m.ID] = m
}

// Lookup returns the plugin with the given ID.
func (r *Registry) Lookup(id string) (Module, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.mods[id]
	return m, ok
}

// IDs returns the registered plugins' IDs, sorted.
func (r *Registry) IDs() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.mods))
	for id := range r.mods {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Set is the configured mappings, in configuration order: a key is the
// first mapping's that matches it.
type Set struct {
	list []Mapping
}

// Load builds the configured mappings (entries as the YAML decoded them,
// each with a "plugin" key) through their lifecycle. Errors are sentences
// naming the entry ("mappings[1] (sql): …"); on error, Cleanup has run on
// every mapping built so far.
func (r *Registry) Load(ctx Context, configs []map[string]any) (*Set, error) {
	s := &Set{}
	for i, raw := range configs {
		m, err := r.build(ctx, i, raw)
		if err != nil {
			_ = s.Cleanup()
			return nil, err
		}
		s.list = append(s.list, m)
	}
	return s, nil
}

func (r *Registry) build(ctx Context, i int, raw map[string]any) (Mapping, error) {
	where := fmt.Sprintf("mappings[%d]", i)
	id, _ := raw["plugin"].(string)
	if id == "" {
		return nil, fmt.Errorf("%s.plugin: no plugin is named; use one of: %s", where, strings.Join(r.IDs(), ", "))
	}
	mod, ok := r.Lookup(id)
	if !ok {
		return nil, fmt.Errorf("%s.plugin: %q is not a known mapping plugin; use one of: %s (a plugin from elsewhere must be compiled in with a blank import)", where, id, strings.Join(r.IDs(), ", "))
	}
	where += " (" + id + ")"
	m := mod.New()
	if err := decodeStrict(raw, m); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	fail := func(err error) (Mapping, error) {
		if c, ok := m.(CleanerUpper); ok {
			_ = c.Cleanup()
		}
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	if p, ok := m.(Provisioner); ok {
		if err := p.Provision(ctx); err != nil {
			return fail(err)
		}
	}
	if v, ok := m.(Validator); ok {
		if err := v.Validate(); err != nil {
			return fail(err)
		}
	}
	return m, nil
}

// decodeStrict decodes the entry (without its "plugin" key) into the
// plugin's struct. An unknown key is an error naming the keys it takes.
func decodeStrict(raw map[string]any, into Mapping) error {
	known := yamlKeys(reflect.TypeOf(into).Elem())
	rest := map[string]any{}
	var unknown []string
	for k, v := range raw {
		if k == "plugin" {
			continue
		}
		if !containsString(known, k) {
			unknown = append(unknown, k)
		}
		rest[k] = v
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("%s is not a known key; remove it or fix its spelling (the plugin takes: %s)", unknown[0], strings.Join(append([]string{"plugin"}, known...), ", "))
	}
	b, err := yaml.Marshal(rest)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(into); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return errors.New(strings.Join(te.Errors, "; "))
		}
		return err
	}
	return nil
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	sort.Strings(keys)
	return keys
}

func containsString(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// Match returns the first mapping whose keys include key, and the key's
// parameters.
func (s *Set) Match(key string) (Mapping, Params, bool) {
	if s == nil {
		return nil, nil, false
	}
	for _, m := range s.list {
		if p, ok := m.Match(key); ok {
			return m, p, true
		}
	}
	return nil, nil, false
}

// Len is the number of mappings.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.list)
}

// Cleanup runs every mapping's Cleanup and returns the errors joined.
func (s *Set) Cleanup() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, m := range s.list {
		if c, ok := m.(CleanerUpper); ok {
			errs = append(errs, c.Cleanup())
		}
	}
	return errors.Join(errs...)
}

// TTL is the lifetime of m's cache entries.
func TTL(m Mapping) time.Duration {
	if t, ok := m.(TTLer); ok && t.TTL() > 0 {
		return t.TTL()
	}
	return DefaultTTL
}
