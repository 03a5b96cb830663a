// Package linear is what the linearizability tests check their histories
// against with porcupine: a register of (n, s) per document, written by a
// $set of s or an $inc of n and read whole, and a History that concurrent
// clients record their operations in. It does no I/O: the tests drive the
// sidecars and stores and record what they saw.
package linear

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The kinds of Op.
const (
	Get byte = 'g' // read the document
	Set byte = 's' // $set s to Op.S
	Inc byte = 'i' // $inc n by Op.N
)

// Op is an operation of a history on one document.
type Op struct {
	Doc  int
	Kind byte   // Get, Set or Inc
	S    string // Set's value
	N    int64  // Inc's amount
}

// State is a document's value, and a get's output.
type State struct {
	N int64
	S string
	// Unknown marks a get whose output is not known: it constrains nothing.
	Unknown bool
}

// Model is the porcupine model of one register per document, each starting
// at init: a Set replaces S, an Inc adds to N, and a Get must return the
// current value (unless its output is Unknown). Documents are checked
// apart.
func Model(init State) porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[int][]porcupine.Operation{}
			for _, op := range h {
				d := op.Input.(Op).Doc
				by[d] = append(by[d], op)
			}
			var out [][]porcupine.Operation
			for _, ops := range by {
				out = append(out, ops)
			}
			return out
		},
		Init: func() any { return init },
		Step: func(state, input, output any) (bool, any) {
			st, in := state.(State), input.(Op)
			switch in.Kind {
			case Set:
				return true, State{N: st.N, S: in.S}
			case Inc:
				return true, State{N: st.N + in.N, S: st.S}
			}
			out := output.(State)
			return out.Unknown || out == st, st
		},
		DescribeOperation: func(input, output any) string {
			in := input.(Op)
			switch in.Kind {
			case Set:
				return fmt.Sprintf("doc%d set %s", in.Doc, in.S)
			case Inc:
				return fmt.Sprintf("doc%d inc %d", in.Doc, in.N)
			}
			return fmt.Sprintf("doc%d get -> %v", in.Doc, output)
		},
	}
}

// History is the operations concurrent clients record, timed from when it
// was made. It is safe for concurrent use.
type History struct {
	start time.Time
	mu    sync.Mutex // guards ops
	ops   []porcupine.Operation
}

// NewHistory returns an empty history whose clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the history's clock: take an operation's call time from it just
// before the call.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records client's operation in, called at call (from Now), that has
// just returned out. A failed operation may or may not have taken effect:
// it stays open until the end of the history.
func (h *History) Add(client int, in Op, call int64, out State, failed bool) {
	ret := h.Now()
	if failed {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// Counts returns how many gets and how many writes were recorded.
func (h *History) Counts() (reads, writes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range h.ops {
		if op.Input.(Op).Kind == Get {
			reads++
		} else {
			writes++
		}
	}
	return reads, writes
}

// Check returns an error unless porcupine finds the history linearizable
// for Model(init) within a minute; porcupine's visualization of it is then
// in the file vizPath, which the error names.
func (h *History) Check(init State, vizPath string) error {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	m := Model(init)
	res, info := porcupine.CheckOperationsVerbose(m, ops, time.Minute)
	if res == porcupine.Ok {
		return nil
	}
	if err := porcupine.VisualizePath(m, info, vizPath); err != nil {
		return fmt.Errorf("linear: the history is %s (no visualization: %v)", res, err)
	}
	return fmt.Errorf("linear: the history is %s (visualization: %s)", res, vizPath)
}
