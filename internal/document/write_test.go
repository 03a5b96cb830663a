package document

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
)

// scripted is a fake writer: it answers the state machine's requests with
// its outcomes in order and records what it was sent.
type scripted struct {
	answers []buffer.WriteResult
	rowErr  error
	sent    []buffer.WriteRequest
	reads   int
}

func (f *scripted) writeOne(_ context.Context, req buffer.WriteRequest) (buffer.WriteResult, error) {
	f.sent = append(f.sent, req)
	if len(f.sent) > len(f.answers) {
		return buffer.WriteResult{}, errors.New("fake: no more answers")
	}
	return f.answers[len(f.sent)-1], nil
}

func (f *scripted) readRow(context.Context, *Collection, string) (change.Doc, int64, error) {
	f.reads++
	if f.rowErr != nil {
		return nil, 0, f.rowErr
	}
	return change.Doc{"id": json.RawMessage("7"), "n": json.RawMessage("1")}, 0, nil
}

func outcomes(os ...buffer.Outcome) []buffer.WriteResult {
	rs := make([]buffer.WriteResult, len(os))
	for i, o := range os {
		rs[i] = buffer.WriteResult{Outcome: o}
		if o == buffer.Buffered {
			rs[i].Seq = int64(100 + i)
		}
	}
	return rs
}

func repeat(o buffer.Outcome, n int) []buffer.Outcome {
	out := make([]buffer.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// TestDrive runs the write state machine over scripted answers of the
// write script, for the HTTP API's writes and the Redis port's field
// writes, and checks what it sends at each step and how it ends.
func TestDrive(t *testing.T) {
	schema, err := change.NewSchema("id", []change.Column{{Name: "id", Type: change.TypeInt}, {Name: "n", Type: change.TypeInt, Nullable: true}, {Name: "s", Type: change.TypeText, Nullable: true}})
	if err != nil {
		t.Fatal(err)
	}
	coll := &Collection{Name: "c", Policy: WriteBack, TTL: time.Hour, Table: &store.Table{Name: "c", Schema: schema}}
	ref := Ref{Coll: coll, ID: "7"}
	patch := change.Change{Kind: change.Patch, Set: change.Doc{"s": json.RawMessage(`"x"`)}}
	docWriteOf := func(ch change.Change) attempt {
		w := &docWrite{r: ref, ch: ch}
		w.restart()
		return w
	}
	fieldOf := func(fw FieldWrite) func(*Service) attempt {
		return func(s *Service) attempt {
			fw.Ref = ref
			st, err := s.newFieldState(&fw)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	}
	hset := fieldOf(FieldWrite{Op: SetFields, Set: change.Doc{"s": json.RawMessage(`"x"`)}})
	hdel := fieldOf(FieldWrite{Op: UnsetFields, Unset: []string{"s"}})
	hincr := fieldOf(FieldWrite{Op: IncField, Field: "n", Amount: "5"})

	// step checks one request the machine sent: its token relative to the
	// previous request's (same or new), whether it carried a base, and
	// whether it was a create (an IfAbsent put) or a counting write.
	type step struct {
		sameToken, base, create, count bool
	}
	tests := []struct {
		name     string
		attempt  func(*Service) attempt
		answers  []buffer.Outcome
		rowErr   error
		steps    []step
		wantErr  error // errors.Is; nil: none
		wantOut  buffer.Outcome
		wantRead int
	}{
		{name: "put buffered at once", attempt: func(*Service) attempt { return docWriteOf(change.Change{Kind: change.Delete}) },
			answers: []buffer.Outcome{buffer.Buffered}, steps: []step{{}}, wantOut: buffer.Buffered},
		{name: "patch needs its base, then buffered with the same token", attempt: func(*Service) attempt { return docWriteOf(patch) },
			answers: []buffer.Outcome{buffer.NeedBase, buffer.Buffered}, steps: []step{{}, {sameToken: true, base: true}}, wantOut: buffer.Buffered, wantRead: 1},
		{name: "a write voids the lease while the base is read: start over", attempt: func(*Service) attempt { return docWriteOf(patch) },
			answers: []buffer.Outcome{buffer.NeedBase, buffer.Voided, buffer.NeedBase, buffer.Buffered},
			steps:   []step{{}, {sameToken: true, base: true}, {}, {sameToken: true, base: true}}, wantOut: buffer.Buffered, wantRead: 2},
		{name: "patch of a missing document", attempt: func(*Service) attempt { return docWriteOf(patch) },
			answers: []buffer.Outcome{buffer.NotFound}, steps: []step{{}}, wantErr: ErrNotFound},
		{name: "voided maxVoided times: conflict", attempt: func(*Service) attempt { return docWriteOf(patch) },
			answers: repeat(buffer.Voided, maxVoided), steps: make([]step, maxVoided), wantErr: ErrConflict},
		{name: "the store cannot be read for the base", attempt: func(*Service) attempt { return docWriteOf(patch) },
			answers: []buffer.Outcome{buffer.NeedBase}, rowErr: errors.New("down"), steps: []step{{}}, wantErr: &StoreError{}, wantRead: 1},
		{name: "HSET of a missing document creates it; someone else did first: patch again", attempt: hset,
			answers: []buffer.Outcome{buffer.NotFound, buffer.Exists, buffer.Buffered},
			steps:   []step{{count: true}, {create: true}, {count: true}}, wantOut: buffer.Buffered},
		{name: "HDEL of a missing document does nothing", attempt: hdel,
			answers: []buffer.Outcome{buffer.NotFound}, steps: []step{{count: true}}, wantOut: buffer.NotFound},
		{name: "HINCRBY that would overflow", attempt: hincr,
			answers: []buffer.Outcome{buffer.Overflow}, steps: []step{{count: true}}, wantErr: ErrOverflow},
		{name: "HINCRBY of a missing document creates it with the amount", attempt: hincr,
			answers: []buffer.Outcome{buffer.NeedBase, buffer.NotFound, buffer.Buffered},
			steps:   []step{{count: true}, {sameToken: true, base: true, count: true}, {create: true}}, wantOut: buffer.Buffered, wantRead: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &scripted{answers: outcomes(tc.answers...), rowErr: tc.rowErr}
			s := &Service{w: f, colls: map[string]*Collection{"c": coll}, m: metrics.New(prometheus.NewRegistry())}
			r, err := s.drive(context.Background(), tc.attempt(s), nil)
			switch want := tc.wantErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("err %v, want none", err)
				}
				if r.Outcome != tc.wantOut {
					t.Errorf("ended at outcome %d, want %d", r.Outcome, tc.wantOut)
				}
			case *StoreError:
				var se *StoreError
				if !errors.As(err, &se) {
					t.Fatalf("err %v, want a StoreError", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("err %v, want %v", err, want)
				}
			}
			if f.reads != tc.wantRead {
				t.Errorf("%d store reads, want %d", f.reads, tc.wantRead)
			}
			if len(f.sent) != len(tc.steps) {
				t.Fatalf("%d requests sent, want %d", len(f.sent), len(tc.steps))
			}
			for i, st := range tc.steps {
				req := f.sent[i]
				if i > 0 && (req.Options.Token == f.sent[i-1].Options.Token) != st.sameToken {
					t.Errorf("request %d: same token as before %v, want %v", i, !st.sameToken, st.sameToken)
				}
				if req.Options.HaveBase != st.base {
					t.Errorf("request %d: base %v, want %v", i, req.Options.HaveBase, st.base)
				}
				if create := req.Options.IfAbsent && req.Change.Kind == change.Put; create != st.create {
					t.Errorf("request %d: create %v, want %v", i, create, st.create)
				}
				if req.Options.Count != st.count {
					t.Errorf("request %d: counting %v, want %v", i, req.Options.Count, st.count)
				}
			}
		})
	}
}
