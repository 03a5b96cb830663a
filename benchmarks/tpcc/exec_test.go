package tpcc

import (
	"errors"
	"testing"

	"github.com/writeback/writeback/internal/api"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/pkg/client"
)

// TestIsNotApplied: the terminals count a write-through commit that the
// sidecar answers "committed but not yet applied" as committed, from the
// answer the API gives it, and nothing else.
func TestIsNotApplied(t *testing.T) {
	answer := func(err error) *client.Error {
		f := api.SessionFailure(err)
		return &client.Error{StatusCode: f.Status, Code: f.Code, Message: f.Msg}
	}
	committed := &session.NotAppliedError{Session: "s", Queue: Queue(1), Seq: 7, Err: errors.New("store down")}
	if e := answer(committed); !IsNotApplied(e) {
		t.Errorf("%v: not counted as committed", e)
	}
	for _, err := range []error{
		&session.QueueStoppedError{Queue: Queue(1)},
		&session.AbortedError{},
		errors.New("is committed in queue, says an unrelated error"),
	} {
		if e := answer(err); IsNotApplied(e) {
			t.Errorf("%v: counted as committed", e)
		}
	}
}
