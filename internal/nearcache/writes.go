package nearcache

import "github.com/maypok86/otter/v2"

// A sidecar's own writes keep its copy current: each write of a document
// it holds a copy of is granted, by the write script itself, a read lease
// on the entry the write leaves, and returns that entry with the write's
// sequence number. When several local writes of one document overlap (a
// hot document under concurrent requests), they form a write group: from
// the first BeginWrite to the last EndWrite, no copy is served or
// installed, and at the group's end the entry of its latest write — the
// highest seq, hence the last to run in Redis, and leased by it — is
// installed, provided that
//
//   - every write of the group ended with a known place in the document's
//     order: a write whose outcome is unknown (Failed) may have run after
//     all the others;
//   - no write without an entry came after it (a write not granted the
//     lease, or that found no entry to update, leaves a value this holder
//     does not know);
//   - nothing revoked the key (or a key sharing its stripe) since the group
//     began: another sidecar's write waits for this holder's revocation
//     before it goes in, so without one the entry is still the latest.
//
// Otherwise no copy is installed and the group's grants go back
// (WriteOutcome.Release). The grants of the group's earlier writes need no
// release: the holder's lease field in Redis names only its last grant,
// which is the installed entry's.

// writeGroup is a key's overlapping local writes.
type writeGroup struct {
	n        int    // writes in progress
	revoked  uint64 // the stripe's revocations when the group began
	held     bool   // a write of the group dropped a copy: the document is read here
	failed   bool   // a write's outcome is unknown
	best     *Entry // the entry of the write with the highest seq so far
	bestSeq  int64
	blindSeq int64    // the highest seq of a write that left no entry
	gens     []uint64 // the leases the group's writes may have been granted
}

// WriteEnd is how one local write ended.
type WriteEnd struct {
	Entry  *Entry // the entry it left, under the lease it was granted; nil: none
	Seq    int64  // its sequence number, when it was buffered (> 0)
	Failed bool   // its outcome is unknown, or it failed
	Gen    uint64 // the generation of the lease it asked for (0: none)
}

// WriteOutcome is what EndWrite did. Only the end of a group's last write
// (Last) installs or releases anything.
type WriteOutcome struct {
	Last bool
	// Installed is the entry installed as the key's copy, if any.
	Installed *Entry
	// Refused says that a write of the group was granted a lease but its
	// entry was not installed.
	Refused bool
	// Release lists the generations of the leases the group's writes may
	// hold that no copy uses: the holder gives them back.
	Release []uint64
	// Held says that a write of the group dropped a copy: the document is
	// read here, and a holder that installed nothing may lease it again.
	Held bool
}

// BeginWrite drops the key's copy before a local write of it and refuses
// installs of values read around it until its EndWrite. It reports whether
// the document is read here — the write dropped a copy, or an overlapping
// local write of the key did — so that the write asks for a lease on the
// entry it leaves; and it returns the copy this write dropped, if any (nil
// when an overlapping write dropped it, or there was none), of which the
// value the write leaves may be computed (buffer.WriteOptions.Copy).
func (c *Cache) BeginWrite(key string) (held bool, dropped *Entry) {
	st := c.stripe(key)
	st.writers.Add(1)
	st.epoch.Add(1)
	st.mu.Lock()
	g := st.groups[key]
	if g == nil {
		if st.groups == nil {
			st.groups = map[string]*writeGroup{}
		}
		g = &writeGroup{revoked: st.revoked.Load()}
		st.groups[key] = g
	}
	g.n++
	st.mu.Unlock()
	// The drop comes after the group is counted: an EndWrite that ends
	// the key's previous group under the key's lock either ran before
	// (and this drops what it installed) or sees this write and installs
	// nothing.
	e, ok := c.c.Invalidate(key)
	st.mu.Lock()
	g.held = g.held || (ok && !e.hot)
	held = g.held
	st.mu.Unlock()
	if ok && !e.hot {
		dropped = e
	}
	return held, dropped
}

// EndWrite ends a local write that BeginWrite began. When it is the last
// of its group, it installs the group's latest entry if the rules above
// allow it.
func (c *Cache) EndWrite(key string, w WriteEnd) WriteOutcome {
	st := c.stripe(key)
	var out WriteOutcome
	c.c.Compute(key, func(old *Entry, found bool) (*Entry, otter.ComputeOp) {
		// Under the key's lock: a Revoke that moved the stripe's count after
		// the check below drops the entry after this function returns, and
		// a BeginWrite counted after it drops it too.
		st.mu.Lock()
		defer st.mu.Unlock()
		g := st.groups[key]
		g.add(w)
		if g.n--; g.n > 0 {
			return old, otter.CancelOp
		}
		delete(st.groups, key)
		out = WriteOutcome{Last: true, Held: g.held}
		if g.best != nil && !g.failed && g.bestSeq > g.blindSeq && st.revoked.Load() == g.revoked {
			out.Installed = g.best
			return g.best, otter.WriteOp
		}
		out.Refused, out.Release = g.best != nil, g.gens
		return old, otter.CancelOp
	})
	st.epoch.Add(1)
	st.writers.Add(-1)
	if out.Installed != nil {
		c.queued(key, out.Installed)
	}
	return out
}

// add records one write's end in its group.
func (g *writeGroup) add(w WriteEnd) {
	if w.Gen > 0 && (w.Entry != nil || w.Failed) {
		g.gens = append(g.gens, w.Gen)
	}
	switch {
	case w.Failed || w.Seq <= 0:
		g.failed = true
	case w.Entry == nil:
		g.blindSeq = max(g.blindSeq, w.Seq)
	case w.Seq > g.bestSeq:
		g.best, g.bestSeq = w.Entry, w.Seq
	}
}
