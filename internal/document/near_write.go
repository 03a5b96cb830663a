package document

import (
	"context"
	"slices"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/nearcache"
)

// The near cache's write side: a write that found other holders waits
// for them (awaitLeases), and a write of a document this sidecar holds a
// copy of keeps its copy current (nearWrite). See near.go for the protocol.

// awaitLeases waits, after a Leased answer, until a holder of the
// document's leases released (its message) or a short poll interval
// passed, at most until the last lease expires (wait); the caller then
// writes again. attempt is the number of waits so far.
func (s *Service) awaitLeases(ctx context.Context, r Ref, wait time.Duration, attempt int) error {
	poll := min(2*time.Millisecond<<min(attempt, 5), 50*time.Millisecond)
	d := min(wait+time.Millisecond, poll)
	ns := s.near
	if ns == nil {
		return sleepCtx(ctx, d)
	}
	rec := s.buf.LeaseRecord(r.Coll.Name, r.ID)
	w := make(chan struct{})
	ns.mu.Lock()
	ns.waiters[rec] = append(ns.waiters[rec], w)
	ns.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	var err error
	select {
	case <-w:
		return nil
	case <-t.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Not woken: take the channel out, or waiters for a holder that never
	// releases would pile up.
	ns.mu.Lock()
	ws := ns.waiters[rec]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
		if len(ws) == 0 {
			delete(ns.waiters, rec)
		} else {
			ns.waiters[rec] = ws
		}
	}
	ns.mu.Unlock()
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// nearWrite is a local write of a near-cached document in progress
// (beginWrite … end).
type nearWrite struct {
	s    *Service
	c    *Collection
	id   string
	held bool             // a copy was dropped: the document is read here
	copy *nearcache.Entry // the copy this write dropped, if any
	gen  uint64
	sent int64 // before any request of the write was sent
}

// beginWrite drops this sidecar's copy of a document it is about to write
// and refuses new ones until end. If it held a copy, the document is read
// here: the write asks Redis for a lease on the value it leaves (options),
// and end installs that value — a sidecar's own write updates its copy in
// place, with no Redis round trip of its own. It returns nil for a
// collection without a near cache.
func (s *Service) beginWrite(c *Collection, id string) *nearWrite {
	if c.near == nil {
		return nil
	}
	w := &nearWrite{s: s, c: c, id: id}
	w.held, w.copy = c.near.cache.BeginWrite(id)
	if w.held {
		w.gen, w.sent = s.near.gen.Add(1), nearcache.Now()
	}
	return w
}

// options makes the write wait for the document's near-cache lease holders
// (buffer.WriteOptions.Near) and, if a copy was held, asks for a lease on
// the value it leaves (Grant). It marks the document hot only when sent
// again after revoking other sidecars' leases (drive): a document written
// only through this sidecar, or read nowhere else, keeps being leased, and
// its writes wait for no one.
func (w *nearWrite) options(o *buffer.WriteOptions) {
	if w == nil {
		return
	}
	o.Near = true
	if w.held {
		o.Grant, o.LeaseTTL = w.gen, w.c.near.cfg.LeaseTTL
		if w.copy != nil {
			// The entry the write leaves comes back only if it is not
			// this copy with the write's sets.
			o.Copy, o.CopyGen = w.copy.Hash, w.copy.Gen
		}
	}
}

// end ends the write. entry is the value it left, on which it was granted
// the lease (buffer.WriteResult.Entry), or nil; seq is its sequence number
// when it was buffered. The entry becomes this sidecar's copy once the
// document's last overlapping local write ends, if it is the latest of them
// and nothing revoked the document meanwhile (nearcache.Cache.EndWrite).
// Otherwise the leases the writes may hold go back, or, if none was granted
// and a copy was held, the document is leased again in the background (the
// renewer's lease read, a ticket taken after the write) — a document that
// other sidecars' writes made hot is refused the lease (LeaseHot) and
// marked hot here too. failed says the write's outcome is unknown.
func (w *nearWrite) end(entry map[string]string, seq int64, failed bool) {
	if w == nil {
		return
	}
	n := w.c.near
	end := nearcache.WriteEnd{Seq: seq, Failed: failed}
	if w.held {
		end.Gen = w.gen
	}
	if entry != nil {
		end.Entry = nearcache.NewEntry(entry, w.gen, w.sent+int64(n.cfg.LeaseTTL-LeaseMargin))
	}
	out := n.cache.EndWrite(w.id, end)
	switch {
	case !out.Last:
	case out.Installed != nil:
		n.leases[buffer.LeaseGranted].Inc()
	case len(out.Release) > 0:
		if out.Refused {
			// A revocation or an unknown outcome came in between: no
			// copy, and the leases go back.
			n.refuse.Inc()
		}
		for _, gen := range out.Release {
			w.s.releaseLater(Ref{Coll: w.c, ID: w.id}, gen)
		}
	case out.Held:
		select {
		case n.renew <- w.id:
		default:
		}
	}
}
