package document

// The write path. Every write of either front door — a PUT, PATCH or
// DELETE of the HTTP API, a hash command of the Redis port — is driven by
// one state machine (drive) over the answers of the buffer's write script
// (buffer.Outcome); what differs between them is only what an answer
// means for the write (an attempt's decide).

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/fault"
	"github.com/writeback/writeback/internal/store"
)

// Put inserts or replaces a whole document.
func (s *Service) Put(ctx context.Context, coll, id string, body []byte) (int64, error) {
	r, err := s.Ref(coll, id)
	if err != nil {
		return 0, err
	}
	ch, err := change.ParsePut(r.Coll.Table.Schema, r.ID, body)
	if err != nil {
		return 0, err
	}
	return s.write(ctx, r, ch, nil)
}

// Patch applies update operators to an existing document.
func (s *Service) Patch(ctx context.Context, coll, id string, body []byte) (int64, error) {
	r, err := s.Ref(coll, id)
	if err != nil {
		return 0, err
	}
	ch, err := change.ParsePatch(r.Coll.Table.Schema, body)
	if err != nil {
		return 0, err
	}
	var replace map[string]buffer.Replace
	if len(ch.JSON) > 0 || len(ch.Ops) > 0 {
		// A type error the current value already shows ($push onto a
		// number …) is the client's: a 400 now rather than a dead letter
		// later. A concurrent write can still change the value; then only
		// the store can tell, and the change becomes a dead letter.
		cur, err := s.get(ctx, r.Coll, r.ID)
		if err != nil {
			return 0, err
		}
		next, err := change.Apply(cur, ch)
		var te *change.TypeError
		switch {
		case errors.As(err, &te):
			return 0, &change.Error{Msg: te.Msg}
		case err == nil:
			replace = replacements(ch, cur, next)
		}
	}
	return s.write(ctx, r, ch, replace)
}

// replacements are the cache-entry fields a patch's JSON-column or
// document operators change, from the value the patch read to the value
// it computed: the write script sets them only if the entry still holds
// what was read (buffer.WriteOptions.Replace), so consecutive patches of a
// document stay cache hits.
func replacements(ch change.Change, cur, next change.Doc) map[string]buffer.Replace {
	rs := map[string]buffer.Replace{}
	add := func(f string) {
		rs[f] = buffer.Replace{Old: cur[f], New: next[f]}
	}
	for f := range ch.JSON {
		add(f)
	}
	for _, op := range ch.Ops {
		f, _, _ := strings.Cut(op.Path, ".")
		add(f)
	}
	return rs
}

// Delete removes a document.
func (s *Service) Delete(ctx context.Context, coll, id string) (int64, error) {
	r, err := s.Ref(coll, id)
	if err != nil {
		return 0, err
	}
	return s.write(ctx, r, change.Change{Kind: change.Delete}, nil)
}

// maxVoided bounds how often a write starts over because concurrent writes
// kept voiding its I lease while it read the store.
const maxVoided = 16

// write buffers ch; replace (see replacements) updates the cache entry's
// fields that the write script cannot compute.
func (s *Service) write(ctx context.Context, r Ref, ch change.Change, replace map[string]buffer.Replace) (int64, error) {
	pol := s.policy(r.Coll) // once: the fallback may switch meanwhile
	if err := s.applyFirst(ctx, r, pol); err != nil {
		return 0, err
	}
	w := &docWrite{r: r, ch: ch, replace: replace, nw: s.beginWrite(r.Coll, r.ID)}
	w.restart()
	res, err := s.drive(ctx, w, nil)
	w.nw.end(res.Entry, res.Seq, err != nil)
	if err != nil {
		return 0, err
	}
	return s.acknowledge(ctx, r, res.Seq, pol)
}

// docWrite is a write of the HTTP API: a put, patch or delete of a whole
// change, neither counting nor only creating.
type docWrite struct {
	r       Ref
	ch      change.Change
	replace map[string]buffer.Replace
	o       buffer.WriteOptions
	nw      *nearWrite
}

func (w *docWrite) ref() Ref { return w.r }

func (w *docWrite) request() buffer.WriteRequest {
	return buffer.WriteRequest{Coll: w.r.Coll.Name, ID: w.r.ID, Change: w.ch, Schema: w.r.Coll.Table.Schema, Options: w.o}
}

func (w *docWrite) setBase(row change.Doc) { w.o.HaveBase, w.o.Base = true, row }

func (w *docWrite) restart() {
	c := w.r.Coll
	w.o = buffer.WriteOptions{TTL: c.ttl(), Invalidate: c.Policy == WriteAround, Token: buffer.NewToken(), Replace: w.replace}
	w.nw.options(&w.o)
}

func (w *docWrite) decide(_ context.Context, out buffer.Outcome) (next, error) {
	if out == buffer.NotFound {
		return stop, ErrNotFound
	}
	return stop, errors.New("document: unexpected answer of the write script")
}

// next is what the state machine does after an answer it does not handle
// itself (attempt.decide).
type next int

const (
	again   next = iota // send the attempt's next request as it is
	restart             // start afresh (attempt.restart); counts towards maxVoided
	stop                // the write is over: its error (nil: done, nothing buffered)
)

// attempt is a write in progress, as drive sees it.
type attempt interface {
	// ref is the document it writes.
	ref() Ref
	// request is the write to send now.
	request() buffer.WriteRequest
	// setBase records the store's row (nil: none), read after NeedBase
	// under the I lease the request's token took.
	setBase(row change.Doc)
	// restart starts afresh: a new I-lease token, no base.
	restart()
	// decide handles the answers other than Buffered, NeedBase and Voided.
	decide(ctx context.Context, out buffer.Outcome) (next, error)
}

// drive sends a's requests until one is buffered, the attempt stops, or
// concurrent writes have voided it maxVoided times (ErrConflict). It starts
// from first, the answer to a request already sent, when not nil. An
// attempt that stops without error returns the answer it stopped at, whose
// Outcome is not Buffered: nothing was buffered.
//
// The answers it handles itself: Buffered ends it; NeedBase — the document
// is neither cached nor pending, and the request's token is now an I lease —
// reads the store's row and sends the request again with it, and a write
// that slips in meanwhile voids the lease (Voided), which starts the
// attempt over with a new token.
func (s *Service) drive(ctx context.Context, a attempt, first *buffer.WriteResult) (buffer.WriteResult, error) {
	restarts, waits := 0, 0
	var waited time.Time // when the write first found near-cache lease holders
	defer func() {
		if n := a.ref().Coll.near; n != nil && !waited.IsZero() {
			n.wait.Observe(time.Since(waited).Seconds())
		}
	}()
	for tries := 0; tries < 4*maxVoided; tries++ {
		var r buffer.WriteResult
		if first != nil {
			r, first = *first, nil
		} else {
			req := a.request()
			if !waited.IsZero() {
				// It had to revoke other sidecars' leases: once it takes
				// effect the document is hot, so that the writes after it
				// wait for no holder (nearcache: the adaptive rule).
				req.Options.HotWindow = a.ref().Coll.near.cfg.HotWindow
			}
			var err error
			if r, err = s.w.writeOne(ctx, req); err != nil {
				return buffer.WriteResult{}, err
			}
		}
		n := restart
		switch r.Outcome {
		case buffer.Buffered:
			return r, nil
		case buffer.NeedBase:
			ref := a.ref()
			row, _, err := s.w.readRow(ctx, ref.Coll, ref.ID)
			if err != nil {
				return buffer.WriteResult{}, &StoreError{Err: err}
			}
			a.setBase(row)
			n = again
		case buffer.Voided:
			s.m.LeaseConflicts.WithLabelValues("i").Inc()
		case buffer.Leased:
			// Near-cache holders were told to let go: wait for them (or
			// their leases' expiry) and send the same write again. The
			// wait is bounded by the context, not by the tries.
			if waited.IsZero() {
				waited = time.Now()
				if n := a.ref().Coll.near; n != nil {
					n.sent.Inc()
				}
			}
			if err := s.awaitLeases(ctx, a.ref(), r.Wait, waits); err != nil {
				return buffer.WriteResult{}, err
			}
			waits++
			tries--
			n = again
		default:
			var err error
			if n, err = a.decide(ctx, r.Outcome); n == stop {
				return r, err
			}
		}
		if n == restart {
			if restarts++; restarts >= maxVoided {
				break
			}
			a.restart()
		}
	}
	return buffer.WriteResult{}, ErrConflict
}

// writer is the I/O drive does: a buffered write and a store read. The
// service's is the buffer and the collection's store; tests drive the
// state machine with a fake.
type writer interface {
	writeOne(ctx context.Context, req buffer.WriteRequest) (buffer.WriteResult, error)
	readRow(ctx context.Context, c *Collection, id string) (change.Doc, int64, error)
}

// ioWriter is the service's writer.
type ioWriter struct{ buf *buffer.Buffer }

func (w ioWriter) writeOne(ctx context.Context, req buffer.WriteRequest) (buffer.WriteResult, error) {
	return w.buf.WriteCounted(ctx, req.Coll, req.ID, req.Change, req.Schema, req.Options)
}

func (w ioWriter) readRow(ctx context.Context, c *Collection, id string) (change.Doc, int64, error) {
	return c.Store.Read(ctx, c.Table, c.Name, id, w.buf.Partition(c.Name, id))
}

// applyFirst is what every write to a write-back collection does first
// while pinned memory is over its limit and it writes through (pol, the
// policy the write follows, decided once at its start, is write-through):
// it applies the document's pending changes to the store before its own
// (which acknowledge then applies), so that they reach the store in order,
// and it refuses the write — before anything is buffered — when the store
// cannot take them.
func (s *Service) applyFirst(ctx context.Context, r Ref, pol Policy) error {
	if r.Coll.Policy != WriteBack || pol == WriteBack {
		return nil
	}
	if err := s.app.ApplyDoc(ctx, r.Coll.Name, r.ID, math.MaxInt64); err != nil {
		return &StoreError{Err: err}
	}
	return nil
}

// acknowledge completes a buffered write under the policy it follows (pol,
// decided at its start: a write buffered as write-back is acknowledged so
// even if the fallback switched on meanwhile): write-back is done;
// write-through and write-around apply the document's buffered writes up
// to seq first.
func (s *Service) acknowledge(ctx context.Context, r Ref, seq int64, pol Policy) (int64, error) {
	fault.Hit(fault.AfterBuffer)
	s.m.BufferedChanges.WithLabelValues(r.Coll.Name).Inc()
	if pol == WriteBack {
		return seq, nil
	}
	if err := s.app.ApplyDoc(ctx, r.Coll.Name, r.ID, seq); err != nil {
		if store.IsPermanent(err) {
			// Rejected: a dead letter now, and the document holds the
			// store's value again; this sidecar's copy, installed from
			// the write, goes (the dead letter dropped its lease record).
			if r.Coll.near != nil {
				r.Coll.near.cache.Revoke(r.ID)
			}
			return 0, &StoreError{Err: err}
		}
		return 0, &StoreError{Err: err, Buffered: seq}
	}
	return seq, nil
}

// ReplayDeadLetter buffers the changes of a dead letter again, as new
// writes (new sequence numbers) after whatever was written since, and
// removes the dead letter once they are buffered. Use it after fixing what
// made the store reject them (a constraint, a column's size …).
func (s *Service) ReplayDeadLetter(ctx context.Context, d buffer.DeadLetter) error {
	c, err := s.Collection(d.Collection)
	if err != nil {
		return err
	}
	changes, err := d.DeadChanges()
	if err != nil {
		return err
	}
	for _, ch := range changes {
		ch.Seq = 0
		if _, err := s.write(ctx, Ref{Coll: c, ID: d.ID}, ch, nil); err != nil {
			return err
		}
	}
	_, err = s.buf.DropDeadLetter(ctx, d.Collection, d.ID, d.Seq)
	return err
}
