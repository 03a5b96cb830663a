package bgt

import (
	"context"
	"fmt"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/fault"
	"github.com/writeback/writeback/internal/store"
)

// apply applies writes to st in one transaction — converted first when st
// has no transactions (see convert) — and observes the apply metrics.
// planned, when not nil, is writes planned ahead (store.Plan) for a
// store.Planner.
func (a *Applier) apply(ctx context.Context, st store.Store, writes []store.Write, planned *store.Planned) ([]store.Result, error) {
	cv, converting := st.(store.Converter)
	if !converting {
		fault.Hit(fault.BeforeCommit)
		start := time.Now()
		var res []store.Result
		var err error
		if pl, ok := st.(store.Planner); ok && planned != nil {
			res, err = pl.ApplyPlanned(ctx, planned)
		} else {
			res, err = st.Apply(ctx, writes)
		}
		if err == nil {
			a.m.ApplyDuration.Observe(time.Since(start).Seconds())
			a.m.ApplyBatchSize.Observe(float64(len(writes)))
		}
		return res, err
	}
	todo, idx, results, err := a.convert(ctx, cv, writes)
	if err != nil {
		return nil, err
	}
	fault.Hit(fault.BeforeCommit)
	if len(todo) == 0 {
		return results, nil
	}
	start := time.Now()
	res, err := st.Apply(ctx, todo)
	if err != nil {
		return nil, err
	}
	a.m.ApplyDuration.Observe(time.Since(start).Seconds())
	a.m.ApplyBatchSize.Observe(float64(len(todo)))
	for k, i := range idx {
		results[i].Applied += res[k].Applied
		results[i].Missing = results[i].Missing || res[k].Missing
	}
	return results, nil
}

// convert is the paper's Algorithm 2 for a store without transactions
// (see store.Converter), for a batch: it reads the batch's documents with
// their stamps, drops the changes the stamps say were applied (a replay
// after a crash before the trim), compacts the rest (RMW compaction),
// converts them into idempotent changes computed from the stored
// documents, persists the conversions in the buffered writes — waiting
// for the replicas, as a buffered write does — and returns the writes to
// apply (todo, from writes[idx[k]]) and results carrying the skipped
// counts. A change that cannot apply to its stored document ($inc of a
// string …) is a permanent error, which the caller isolates into a dead
// letter. A conversion that finds its buffered write trimmed meanwhile (a
// write-through or flush applied it) fails the batch, to be read again.
func (a *Applier) convert(ctx context.Context, cv store.Converter, writes []store.Write) (todo []store.Write, idx []int, results []store.Result, err error) {
	results = make([]store.Result, len(writes))
	stored := make([]map[string]store.Stored, len(writes))
	byTable := map[*store.Table][]int{}
	for i, w := range writes {
		byTable[w.Table] = append(byTable[w.Table], i)
	}
	for t, is := range byTable {
		ids := make([]string, len(is))
		for k, i := range is {
			ids[k] = writes[i].ID
		}
		m, err := cv.ReadMany(ctx, t, ids)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, i := range is {
			stored[i] = m
		}
	}
	var convs []buffer.Conversion
	for i, w := range writes {
		st := stored[i][w.ID]
		results[i].LastSeq = w.Changes[len(w.Changes)-1].Seq
		k := 0
		for k < len(w.Changes) && w.Changes[k].Seq <= st.Seq {
			k++
		}
		results[i].Skipped = k
		rest := w.Changes[k:]
		if len(rest) == 0 {
			continue
		}
		conv, err := change.Convert(st.Doc, rest)
		if err != nil {
			return nil, nil, nil, &store.Error{Permanent: true, Err: fmt.Errorf("document %s: %w", w.ID, err)}
		}
		if len(conv) != len(rest) || !change.AllIdempotent(rest) {
			ref := buffer.DocRef{Part: w.Partition, Member: buffer.Member(w.Collection, w.ID)}
			// The replacement starts at the head read, so the changes the
			// stamp says were applied (a crash before their trim) go too.
			convs = append(convs, buffer.Conversion{DocRef: ref, First: w.Changes[0].Seq, Last: results[i].LastSeq, Changes: conv})
		}
		c := w
		c.Changes = conv
		todo = append(todo, c)
		idx = append(idx, i)
	}
	ok, err := a.buf.Convert(ctx, convs)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, done := range ok {
		if !done {
			return nil, nil, nil, fmt.Errorf("bgt: the buffered write of %s changed while it was converted; it is read again", convs[i].Member)
		}
	}
	a.m.ConvertedWrites.Add(float64(len(convs)))
	fault.Hit(fault.AfterConvert)
	return todo, idx, results, nil
}
