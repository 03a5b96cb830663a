package linear

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"
)

var init0 = State{N: 1, S: "one"}

// op is an operation called at call and returned at ret.
func op(client int, in Op, call, ret int64, out State) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func TestModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"a get of the initial value", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Get}, 0, 1, init0),
		}, true},
		{"a set and an inc, then a get of both", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Set, S: "a"}, 0, 1, State{}),
			op(1, Op{Doc: 1, Kind: Inc, N: 2}, 2, 3, State{}),
			op(0, Op{Doc: 1, Kind: Get}, 4, 5, State{N: 3, S: "a"}),
		}, true},
		{"a get concurrent with a set sees either value", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Set, S: "a"}, 0, 10, State{}),
			op(1, Op{Doc: 1, Kind: Get}, 1, 2, State{N: 1, S: "a"}),
			op(2, Op{Doc: 1, Kind: Get}, 1, 2, init0),
		}, true},
		{"a failed write that took effect", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Inc, N: 5}, 0, math.MaxInt64, State{}),
			op(1, Op{Doc: 1, Kind: Get}, 10, 11, State{N: 6, S: "one"}),
		}, true},
		{"documents are registers of their own", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Set, S: "a"}, 0, 1, State{}),
			op(1, Op{Doc: 2, Kind: Get}, 2, 3, init0),
		}, true},
		{"an unknown get constrains nothing", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Get}, 0, 1, State{N: 99, Unknown: true}),
		}, true},
		{"a stale get after a set returned", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Set, S: "a"}, 0, 1, State{}),
			op(1, Op{Doc: 1, Kind: Get}, 2, 3, init0),
		}, false},
		{"a lost inc", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Inc, N: 2}, 0, 1, State{}),
			op(1, Op{Doc: 1, Kind: Inc, N: 3}, 0, 1, State{}),
			op(0, Op{Doc: 1, Kind: Get}, 2, 3, State{N: 4, S: "one"}),
		}, false},
		{"two gets that disagree on the order of two sets", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Set, S: "a"}, 0, 10, State{}),
			op(1, Op{Doc: 1, Kind: Set, S: "b"}, 0, 10, State{}),
			op(2, Op{Doc: 1, Kind: Get}, 11, 12, State{N: 1, S: "a"}),
			op(3, Op{Doc: 1, Kind: Get}, 13, 14, State{N: 1, S: "b"}),
		}, false},
		{"another document's write seen", []porcupine.Operation{
			op(0, Op{Doc: 1, Kind: Set, S: "a"}, 0, 1, State{}),
			op(1, Op{Doc: 2, Kind: Get}, 2, 3, State{N: 1, S: "a"}),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model(init0), tc.ops); got != tc.legal {
				t.Errorf("linearizable = %v, want %v", got, tc.legal)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	h := NewHistory()
	call := h.Now()
	h.Add(0, Op{Doc: 1, Kind: Set, S: "a"}, call, State{}, false)
	h.Add(1, Op{Doc: 1, Kind: Inc, N: 2}, h.Now(), State{}, true)
	h.Add(0, Op{Doc: 1, Kind: Get}, h.Now(), State{N: 1, S: "a"}, false)
	if reads, writes := h.Counts(); reads != 1 || writes != 2 {
		t.Errorf("counts: %d reads, %d writes; want 1, 2", reads, writes)
	}
	if ret := h.ops[1].Return; ret != math.MaxInt64 {
		t.Errorf("a failed write returned at %d; want it open until the end", ret)
	}
	if ops := h.ops; ops[0].Call > ops[0].Return || ops[0].Return > ops[2].Call {
		t.Errorf("calls and returns out of order: %+v", ops)
	}
	// The failed inc may not have taken effect: linearizable.
	if err := h.Check(init0, filepath.Join(t.TempDir(), "ok.html")); err != nil {
		t.Fatal(err)
	}

	// A get after it of n = 1 (a stale read) is not.
	h.Add(0, Op{Doc: 1, Kind: Get}, h.Now(), init0, false)
	viz := filepath.Join(t.TempDir(), "illegal.html")
	want := fmt.Sprintf("linear: the history is Illegal (visualization: %s)", viz)
	if err := h.Check(init0, viz); err == nil || err.Error() != want {
		t.Errorf("Check: %v, want %s", err, want)
	}
	if _, err := os.Stat(viz); err != nil {
		t.Errorf("no visualization: %v", err)
	}
}
