package kept

import (
	"testing"
	"time"
)

// A value is served until its time, then no more; copies are the caller's
// own both ways; nil copies and nil values keep nothing.
func TestCopies(t *testing.T) {
	c := New(1 << 20)
	val := []byte(`{"a":1}`)
	c.Put("k", val, time.Now().Add(80*time.Millisecond))
	val[2] = 'X'
	got, ok := c.Get("k")
	if !ok || string(got) != `{"a":1}` {
		t.Fatalf("Get: %s %v; want the value as put, unchanged by the caller's later change", got, ok)
	}
	got[2] = 'Y'
	if again, _ := c.Get("k"); string(again) != `{"a":1}` {
		t.Fatalf("Get after the caller changed what it was given: %s", again)
	}
	if until, ok := c.Until("k"); !ok || time.Until(until) <= 0 || time.Until(until) > 80*time.Millisecond {
		t.Errorf("Until: %v %v", until, ok)
	}
	time.Sleep(100 * time.Millisecond)
	if _, ok := c.Get("k"); ok {
		t.Error("Get after its time: still served")
	}
	if _, ok := c.Until("k"); ok {
		t.Error("Until after its time: still kept")
	}
	c.Put("nil", nil, time.Now().Add(time.Hour))
	if _, ok := c.Get("nil"); ok {
		t.Error("a nil value was kept")
	}
	var none *Copies
	none.Put("k", val, time.Now().Add(time.Hour))
	if _, ok := none.Get("k"); ok || New(0) != nil {
		t.Error("nil copies keep something")
	}
}

// The budget bounds what is kept.
func TestCopiesBudget(t *testing.T) {
	c := New(64 << 10)
	val := make([]byte, 1000)
	for i := range 1000 {
		c.Put(string(rune('a'+i%26))+time.Duration(i).String(), val, time.Now().Add(time.Hour))
	}
	c.c.CleanUp()
	if w := c.c.WeightedSize(); w > 64<<10 {
		t.Errorf("%d bytes kept within a budget of %d", w, 64<<10)
	}
}
