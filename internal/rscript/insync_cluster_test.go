package rscript

import (
	"errors"
	"testing"
)

// In a Cluster each primary's writes are held to its own count: a primary
// short of in-sync replicas refuses, another with enough waits for all of
// its own, and a primary the last refresh did not see waits for the
// minimum alone; Count reports the fewest of any primary.
func TestInSyncPerPrimary(t *testing.T) {
	s := NewInSync()
	var refused int
	s.OnRefuse = func() { refused++ }
	counts := map[string]int{"a:1": 0, "b:2": 2}
	s.nodes.Store(&counts)
	s.n.Store(0)
	d := Durable{Replicas: 1, InSync: s}

	var sf *ShortfallError
	if _, err := d.await(s.CountOf("a:1")); !errors.As(err, &sf) || sf.InSync != 0 || sf.Want != 1 {
		t.Errorf("primary with 0 of 1 in sync: %v, want a ShortfallError", err)
	}
	if n, err := d.await(s.CountOf("b:2")); err != nil || n != 2 {
		t.Errorf("primary with 2 in sync: waits for %d (%v), want 2", n, err)
	}
	if n, err := d.await(s.CountOf("c:3")); err != nil || n != 1 {
		t.Errorf("unknown primary: waits for %d (%v), want the minimum, 1", n, err)
	}
	if refused != 1 || s.Count() != 0 {
		t.Errorf("refused %d, Count %d; want 1 refusal and the fewest of any primary, 0", refused, s.Count())
	}
}
