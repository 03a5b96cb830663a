package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/jitter"
)

// docKey identifies an applied record.
type docKey struct{ collection, id string }

// applyBatch is the validated input of one Apply: the writes and, in lock
// order, the indices of those that have changes.
type applyBatch struct {
	writes []Write
	// order sorts the documents by (collection, id) bytewise, which is the
	// order of the applied table's primary key in both databases (COLLATE
	// "C" / VARBINARY). Every transaction locks its records in this one
	// order, so two batches sharing documents queue up instead of
	// deadlocking.
	order []int
	// cut says that the batch is a cut of each of its collections in each
	// of its partitions (see PlanCut): it moves their floors instead of
	// its documents' records.
	cut bool
}

func newApplyBatch(writes []Write) (*applyBatch, error) {
	b := &applyBatch{writes: writes, order: make([]int, 0, len(writes))}
	for i, w := range writes {
		if len(w.Changes) == 0 {
			continue
		}
		if w.Table == nil || w.Table.Schema == nil {
			return nil, fmt.Errorf("store: write %d (%s/%s) has no table", i, w.Collection, w.ID)
		}
		if w.Collection == "" || w.ID == "" {
			return nil, fmt.Errorf("store: write %d has an empty collection or id", i)
		}
		var prev int64
		for _, c := range w.Changes {
			if c.Seq <= prev {
				return nil, fmt.Errorf("store: changes of %s/%s are not in increasing positive seq order (%d after %d)", w.Collection, w.ID, c.Seq, prev)
			}
			prev = c.Seq
		}
		b.order = append(b.order, i)
	}
	slices.SortFunc(b.order, func(x, y int) int {
		wx, wy := &writes[x], &writes[y]
		return cmp.Or(strings.Compare(wx.Collection, wy.Collection), strings.Compare(wx.ID, wy.ID))
	})
	for j := 1; j < len(b.order); j++ {
		if w, prev := &writes[b.order[j]], &writes[b.order[j-1]]; w.Collection == prev.Collection && w.ID == prev.ID {
			// Two writes of one document would have to be merged in seq
			// order; the applier hands each document over once.
			return nil, fmt.Errorf("store: document %s/%s appears twice in one batch", w.Collection, w.ID)
		}
	}
	return b, nil
}

// Planned is a batch of writes validated and planned ahead of Apply (see
// Plan and Planner).
type Planned struct {
	b     *applyBatch
	err   error      // newApplyBatch's: applying fails with it
	first *applyPlan // the first attempt's plan (firstPlan), or nil
	taken bool       // an attempt took first: the next ones plan again
}

// Plan validates writes and plans them as a SQL store's Apply first does:
// as if no change of them was applied before, the usual case (see
// firstPlan). That needs no connection, so an applier plans the next
// batch this way while the current one is in the store, and only sends
// the next one's statements once it commits (Planner).
func Plan(writes []Write) *Planned {
	b, err := newApplyBatch(writes)
	if err != nil {
		return &Planned{err: err}
	}
	return &Planned{b: b, first: b.firstPlan()}
}

// PlanCut is Plan of a batch that is a cut: for each collection k and
// partition p of its writes, the writes hold every change of k in p with a
// seq at or below the highest of them that was buffered when the batch was
// read and is not applied yet — all of them, or a replay of an applier that
// died before it trimmed them. Applying it moves the floor of each (k, p)
// to that highest seq and writes no applied record: a change of document d
// of k in p is in the store iff its seq is at or below the higher of
// (k, p)'s floor and d's record. Only an applier reading the pending index
// as a cut may plan one (the rounds' batches, see bgt); every other apply
// (a write-through, a split, a dead letter) keeps the records.
func PlanCut(writes []Write) *Planned {
	p := Plan(writes)
	if p.b != nil {
		p.b.cut = true
	}
	return p
}

// take returns an attempt's first plan: the one planned ahead the first
// time, a new one for a rerun of the transaction (nil when it fails).
func (p *Planned) take() *applyPlan {
	if p.taken {
		return p.b.firstPlan()
	}
	p.taken = true
	return p.first
}

// Planner is a store whose Apply can take a batch planned ahead:
// ApplyPlanned(ctx, Plan(writes)) is Apply(ctx, writes), whatever was
// applied in between (the plan's assumption is checked in the store, as
// Apply's first attempt checks it). Applying a Planned again plans again.
type Planner interface {
	ApplyPlanned(ctx context.Context, p *Planned) ([]Result, error)
}

// applyPlanned is a SQL store's ApplyPlanned: Plan's error, or nothing to
// do, or attempts of once (the batch and the attempt's first plan, see
// take), rerun while retryable says so.
func applyPlanned(p *Planned, retryable func(error) bool, once func(b *applyBatch, first *applyPlan) ([]Result, error)) ([]Result, error) {
	if p.err != nil {
		return nil, p.err
	}
	if len(p.b.order) == 0 {
		return make([]Result, len(p.b.writes)), nil
	}
	return retryTx(retryable, func() ([]Result, error) { return once(p.b, p.take()) })
}

// firstPlan is the plan of the first attempt of an Apply: every record
// assumed behind its write's first change, no row read. nil when that plan
// fails (a patch must read its row first, or it fails as if every change
// applied, which may not be so for the changes that do: only the second
// plan's errors count).
func (b *applyBatch) firstPlan() *applyPlan {
	plan, err := b.plan(nil, func(*Table, string) (change.Doc, error) { return nil, errNeedsRow })
	if err != nil {
		return nil
	}
	return plan
}

// floor is what a batch holds of one collection in one partition: the
// lowest first change and the highest last change of its writes there.
type floor struct {
	collection  string
	part        int
	first, last int64
}

// floors returns the batch's (collection, partition) pairs in lock order:
// bytewise by collection, then by partition — the order of the floors
// table's primary key, in which every transaction locks its floors.
func (b *applyBatch) floors() []floor {
	var out []floor
	at := map[floorKey]int{}
	for _, i := range b.order {
		w := &b.writes[i]
		first, last := w.Changes[0].Seq, w.Changes[len(w.Changes)-1].Seq
		k := floorKey{w.Collection, w.Partition}
		j, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, floor{collection: w.Collection, part: w.Partition, first: first, last: last})
			continue
		}
		out[j].first, out[j].last = min(out[j].first, first), max(out[j].last, last)
	}
	slices.SortFunc(out, func(x, y floor) int {
		return cmp.Or(strings.Compare(x.collection, y.collection), cmp.Compare(x.part, y.part))
	})
	return out
}

// floorKey names a floor.
type floorKey struct {
	collection string
	part       int
}

// floorArrays returns the floors' keys and last changes as statement
// arguments (the first changes go as JSON: pgFloorFirsts).
func floorArrays(fs []floor) (collections []string, parts, lasts []int64) {
	for _, f := range fs {
		collections = append(collections, f.collection)
		parts, lasts = append(parts, int64(f.part)), append(lasts, f.last)
	}
	return collections, parts, lasts
}

// withFloors returns the applied seqs of the batch's documents raised to
// their floors: what the store holds of each (see PlanCut).
func (b *applyBatch) withFloors(records map[docKey]int64, floors map[floorKey]int64) map[docKey]int64 {
	applied := make(map[docKey]int64, len(b.order))
	for _, i := range b.order {
		w := &b.writes[i]
		k := docKey{w.Collection, w.ID}
		applied[k] = max(records[k], floors[floorKey{w.Collection, w.Partition}])
	}
	return applied
}

// keys returns the records to lock, in lock order.
func (b *applyBatch) keys() (collections, ids []string, parts []int64) {
	for _, i := range b.order {
		w := &b.writes[i]
		collections = append(collections, w.Collection)
		ids = append(ids, w.ID)
		parts = append(parts, int64(w.Partition))
	}
	return collections, ids, parts
}

// applyPlan is the second half of an Apply, decided once the records are
// locked and their seqs known.
type applyPlan struct {
	results []Result
	// puts are left to the driver: an upsert is not spelled the same, nor
	// equally safe, in both databases.
	puts    []*putGroup
	deletes []*delGroup
	// patches are left to the driver too: neither database spells a
	// set-based UPDATE like the other, nor tells the rows it matched alike.
	patches []*patchGroup
	records []AppliedRecord // the records to move forward, in lock order (none for a cut)
}

// delGroup is the rows that Delete effects remove from one table.
type delGroup struct {
	t   *Table
	ids []any // the keys, as statement arguments
}

// queries are the DELETE statements of the group.
func (g *delGroup) queries(d dialect) []*query { return deleteQueries(d, g.t, g.ids) }

// putGroup is the rows that Put effects write into one table, all with the
// same columns.
type putGroup struct {
	t    *Table
	cols []string
	ids  []string // the key of each row
	rows [][]any
}

// plan keeps, for each write, the changes past its applied seq, compacts
// them, and gathers the effects set-based: the rows to put, grouped by table
// and column set; one DELETE per table; the patches grouped by table and
// shape (patchGroup), one UPDATE each.
//
// row reads (and locks) a row in the transaction; it is called only for
// patches with operators inside JSON columns, which are computed here from
// the row's current value — exactly once, since the applied records are
// locked by the same transaction.
func (b *applyBatch) plan(applied map[docKey]int64, row func(t *Table, id string) (change.Doc, error)) (*applyPlan, error) {
	p := &applyPlan{results: make([]Result, len(b.writes)), records: make([]AppliedRecord, 0, len(b.writes))}
	putIndex := map[string]int{}
	delIndex := map[string]int{}
	patches := newPatchGroups(len(b.writes))
	for _, i := range b.order {
		w := &b.writes[i]
		r := &p.results[i]
		seq := applied[docKey{w.Collection, w.ID}]
		r.LastSeq = w.Changes[len(w.Changes)-1].Seq
		// Changes are in increasing seq order: the applied ones are a prefix.
		k := sort.Search(len(w.Changes), func(j int) bool { return w.Changes[j].Seq > seq })
		r.Skipped, r.Applied = k, len(w.Changes)-k
		if r.Applied == 0 {
			continue
		}
		e, err := change.Compact(w.Changes[k:])
		if err != nil {
			return nil, &Error{Permanent: true, Err: fmt.Errorf("store: %s/%s: %w", w.Collection, w.ID, err)}
		}
		switch e.Kind {
		case change.Put:
			cols, row, err := putRow(w.Table, w.ID, e.Doc)
			if err != nil {
				return nil, err
			}
			gk := w.Table.Name + "\x00" + strings.Join(cols, "\x00")
			gi, ok := putIndex[gk]
			if !ok {
				gi = len(p.puts)
				putIndex[gk] = gi
				p.puts = append(p.puts, &putGroup{t: w.Table, cols: cols})
			}
			p.puts[gi].ids = append(p.puts[gi].ids, w.ID)
			p.puts[gi].rows = append(p.puts[gi].rows, row)
		case change.Delete:
			gi, ok := delIndex[w.Table.Name]
			if !ok {
				gi = len(p.deletes)
				delIndex[w.Table.Name] = gi
				p.deletes = append(p.deletes, &delGroup{t: w.Table})
			}
			p.deletes[gi].ids = append(p.deletes[gi].ids, w.ID)
		case change.Patch:
			if len(e.JSON) > 0 {
				if err := foldJSON(&e, w, row); err != nil {
					return nil, err
				}
			}
			cols, vals, err := patchRow(w.Table, w.ID, e)
			if err != nil {
				return nil, err
			}
			patches.add(w.Table, cols, w.ID, i, vals)
		}
		if !b.cut { // a cut moves floors instead
			p.records = append(p.records, AppliedRecord{Collection: w.Collection, ID: w.ID, Partition: w.Partition, Seq: r.LastSeq})
		}
	}
	p.patches = patches.ordered()
	return p, nil
}

// foldJSON computes the operators inside JSON columns of a patch from the
// row's current values and turns them into plain column sets. A value the
// operators cannot apply to ($push on a non-array …) is the data's fault:
// a permanent error, so the change becomes a dead letter.
func foldJSON(e *change.Effect, w *Write, row func(t *Table, id string) (change.Doc, error)) error {
	cur, err := row(w.Table, w.ID)
	if err != nil {
		return err
	}
	if cur == nil {
		e.JSON = nil // no row: the patch updates nothing (Result.Missing)
		return nil
	}
	// e.Set is e's own: Compact shares a change's Set only with an Effect
	// that has no JSON operators.
	if e.Set == nil {
		e.Set = change.Doc{}
	}
	for col, ops := range e.JSON {
		v, err := change.ApplyJSON(col, cur[col], ops)
		if err != nil {
			return &Error{Permanent: true, Err: fmt.Errorf("store: %s/%s: %w", w.Collection, w.ID, err)}
		}
		e.Set[col] = v
	}
	e.JSON = nil
	return nil
}

// putRow returns the columns (schema order) and values of a Put of doc into
// row id. The key always comes from id; a field that is not a column is the
// data's fault.
func putRow(t *Table, id string, doc change.Doc) ([]string, []any, error) {
	var cols []string
	var row []any
	for _, c := range t.Schema.Columns {
		if c.Name == t.Schema.Key {
			cols, row = append(cols, c.Name), append(row, id)
			continue
		}
		v, ok := doc[c.Name]
		if !ok {
			continue
		}
		a, err := columnArg(c, v)
		if err != nil {
			return nil, nil, err
		}
		cols, row = append(cols, c.Name), append(row, a)
	}
	for name := range doc {
		if _, ok := t.Schema.Column(name); !ok {
			return nil, nil, permanentf("store: %s has no column %q (put of %s)", t.Name, name, id)
		}
	}
	return cols, row, nil
}

// maxAttempts bounds how often Apply reruns a transaction the database
// aborted to break a deadlock or a serialization conflict. Locking in one
// order makes those rare; they can still come from other writers of the
// same tables (and, on InnoDB, from the gap locks of inserts into the
// same index range), and rerunning the whole transaction is always safe.
const maxAttempts = 6

// retryBackoff is the first pause before a rerun: the transactions that
// collided rerun at random points of a doubling window, not in lockstep.
const retryBackoff = 2 * time.Millisecond

// retryTx runs tx until it succeeds, fails for another reason than a
// deadlock or a serialization failure (retryable), or maxAttempts is reached.
func retryTx[T any](retryable func(error) bool, tx func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := tx()
		if err == nil || attempt == maxAttempts || !retryable(err) {
			return v, err
		}
		time.Sleep(jitter.Backoff(retryBackoff, 50*time.Millisecond, attempt))
	}
}

// wrapErr wraps a database error as a store error with its permanence.
func wrapErr(op string, err error, permanent func(error) bool) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	return &Error{Permanent: permanent(err), Err: fmt.Errorf("store: %s: %w", op, err)}
}
