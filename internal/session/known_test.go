package session

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestKnownSessions: a session is known from its first note on, only while
// every later note is seen in order; an X stays an X; what is taken is
// forgotten; too many sessions shrink the map, the oldest first.
func TestKnownSessions(t *testing.T) {
	var ks knownSessions
	ks.noted("a", 7, 1, "X", []string{"k1"}, time.Minute)
	ks.noted("a", 7, 2, "S", []string{"k1", "k2"}, time.Minute)
	ks.read("a", []ref{{key: "k1"}, {key: "k2"}}, []json.RawMessage{json.RawMessage(`{"v":1}`), nil})
	k := ks.take("a", time.Minute)
	if k == nil || k.start != 7 || k.notes != 2 || k.read["k1"] != "X" || k.read["k2"] != "S" {
		t.Fatalf("after two notes: %+v, want start 7, 2 notes, k1 X (never downgraded), k2 S", k)
	}
	if v, ok := k.values["k1"]; !ok || v != `{"v":1}` {
		t.Errorf("k1's value %v %v", v, ok)
	}
	if v, ok := k.values["k2"]; !ok || v != nil {
		t.Errorf("k2 (read, no value) %v %v, want a known nil", v, ok)
	}
	if ks.take("a", time.Minute) != nil {
		t.Error("a taken session is still known")
	}

	ks.noted("b", 1, 1, "S", []string{"k"}, time.Minute)
	ks.noted("b", 1, 3, "S", []string{"k"}, time.Minute) // note 2 was made elsewhere
	if ks.take("b", time.Minute) != nil {
		t.Error("a session with a note not seen here is known")
	}
	ks.noted("c", 1, 2, "S", []string{"k"}, time.Minute) // its first note was not seen here
	if ks.take("c", time.Minute) != nil {
		t.Error("a session whose first note was not seen here is known")
	}
	ks.noted("d", 1, 1, "S", []string{"k"}, time.Minute)
	ks.forget("d")
	if ks.take("d", time.Minute) != nil {
		t.Error("a forgotten session is known")
	}
	ks.noted("e", 1, 1, "S", []string{"k"}, time.Minute)
	if ks.take("e", -time.Second) != nil {
		t.Error("a session older than the timeout is known")
	}

	for i := range maxKnown + 10 {
		ks.noted(fmt.Sprint(i), 1, 1, "S", []string{"k"}, time.Minute)
	}
	if n := len(ks.m); n > maxKnown {
		t.Errorf("%d sessions known, want at most %d", n, maxKnown)
	}
}
