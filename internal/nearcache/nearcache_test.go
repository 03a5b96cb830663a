package nearcache

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestInstallHonoursTickets(t *testing.T) {
	far := Now() + int64(time.Hour)
	h := map[string]string{"n": "1"}
	tests := []struct {
		name    string
		between func(c *Cache) // what happens between the ticket and the install
		want    bool
	}{
		{"nothing", func(*Cache) {}, true},
		{"revoked", func(c *Cache) { c.Revoke("a") }, false},
		{"local write in progress", func(c *Cache) { c.BeginWrite("a") }, false},
		{"local write came and went", func(c *Cache) { c.BeginWrite("a"); c.EndWrite("a", WriteEnd{}) }, false},
		{"another key revoked", func(c *Cache) { c.Revoke(otherStripe(c, "a")) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(t)
			tk := c.Ticket("a")
			tc.between(c)
			if got := c.Install(tk, NewEntry(h, 1, far)); got != tc.want {
				t.Fatalf("Install = %v, want %v", got, tc.want)
			}
			if _, ok := c.Get("a"); ok != tc.want {
				t.Fatalf("Get found %v, want %v", ok, tc.want)
			}
		})
	}
}

// otherStripe returns a key whose stripe is not key's.
func otherStripe(c *Cache, key string) string {
	for i := 0; ; i++ {
		k := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		if c.stripe(k) != c.stripe(key) {
			return k
		}
	}
}

func TestRevokeDropsInstalledEntry(t *testing.T) {
	c := newTestCache(t)
	far := Now() + int64(time.Hour)
	if !c.Install(c.Ticket("a"), NewEntry(map[string]string{"n": "1"}, 1, far)) {
		t.Fatal("install refused")
	}
	c.Revoke("a")
	if _, ok := c.Get("a"); ok {
		t.Fatal("entry served after Revoke")
	}
	// A request sent before a local write may not install after it.
	tk := c.Ticket("a")
	c.BeginWrite("a")
	c.EndWrite("a", WriteEnd{})
	if c.Install(tk, NewEntry(map[string]string{"n": "0"}, 2, far)) {
		t.Fatal("installed a value read around a local write")
	}
	if !c.Install(c.Ticket("a"), NewEntry(map[string]string{"n": "2"}, 3, far)) {
		t.Fatal("install refused after the write")
	}
	if e, ok := c.Get("a"); !ok || e.Hash["n"] != "2" || e.Gen != 3 {
		t.Fatalf("Get = %+v, %v", e, ok)
	}
}

func TestExpiredEntryIsNotServed(t *testing.T) {
	c := newTestCache(t)
	if !c.Install(c.Ticket("a"), NewEntry(map[string]string{"n": "1"}, 1, Now()-1)) {
		t.Fatal("install refused")
	}
	if _, ok := c.Get("a"); ok {
		t.Fatal("entry served past its deadline")
	}
}

func TestMemoBuildsOnce(t *testing.T) {
	e := NewEntry(map[string]string{"n": "1"}, 1, 0)
	builds := 0
	for range 3 {
		if got := string(e.Memo(MemoJSON, func() []byte { builds++; return []byte(`{"n":1}`) })); got != `{"n":1}` {
			t.Fatalf("Memo = %s", got)
		}
	}
	if builds != 1 {
		t.Fatalf("built %d times, want 1", builds)
	}
}

func TestByteBudgetEvicts(t *testing.T) {
	const budget = 64 << 10
	c, err := New(budget)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var evicted atomic.Int64
	c.OnDrop = func(_ string, _ *Entry, expired bool) {
		if !expired {
			evicted.Add(1)
		}
	}
	big := map[string]string{"s": string(make([]byte, 4<<10))}
	for i := range 100 {
		k := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		c.Install(c.Ticket(k), NewEntry(big, 1, Now()+int64(time.Hour)))
	}
	c.c.CleanUp()
	if b := c.Bytes(); b > budget {
		t.Fatalf("holds %d bytes over a budget of %d", b, budget)
	}
	// Deletion handlers run on otter's executor: poll.
	for deadline := time.Now().Add(5 * time.Second); evicted.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("nothing evicted")
		}
	}
}

func TestDueRenewsCopiesBeingRead(t *testing.T) {
	c := newTestCache(t)
	in := func(k string, d time.Duration) *Entry {
		e := NewEntry(map[string]string{"n": "1"}, 1, Now()+int64(d))
		if !c.Install(c.Ticket(k), e) {
			t.Fatalf("%s not installed", k)
		}
		return e
	}
	in("read", time.Minute)
	in("unread", time.Minute)
	in("revoked", time.Minute)
	c.Revoke("revoked")
	if _, ok := c.Get("read"); !ok {
		t.Fatal("read not served")
	}
	if got := c.Due(time.Second, 10, nil); len(got) != 0 {
		t.Fatalf("due %v a minute before the deadline, with a window of a second", got)
	}
	if got := c.Due(time.Hour, 10, nil); !slices.Equal(got, []string{"read"}) {
		t.Fatalf("due %v, want [read]: the unread copy and the revoked one are not renewed", got)
	}
	if got := c.Due(time.Hour, 10, nil); len(got) != 0 {
		t.Fatalf("due again %v: each install is looked at once", got)
	}

	// KeepIdle 1: a copy nobody read is renewed for one period more.
	c.KeepIdle = 1
	in("k", time.Minute)
	if got := c.Due(time.Hour, 10, nil); !slices.Equal(got, []string{"k"}) {
		t.Fatalf("due %v, want [k]: one idle period is kept", got)
	}
	in("k", time.Minute) // the renewal: the period before went unread
	if got := c.Due(time.Hour, 10, nil); len(got) != 0 {
		t.Fatalf("due %v: a second idle period lets the copy go", got)
	}
	e := in("k", time.Minute)
	c.Get("k")
	if got := c.Due(time.Hour, 10, nil); !slices.Equal(got, []string{"k"}) || e.idle != 2 {
		t.Fatalf("due %v (idle %d), want [k]: a read renews whatever the idle count", got, e.idle)
	}

	// max bounds a call; the rest waits for the next.
	for i := range 5 {
		c.Get(fmt.Sprint(i))
		in(fmt.Sprint(i), time.Minute)
		c.Get(fmt.Sprint(i))
	}
	if got := c.Due(time.Hour, 3, nil); len(got) != 3 {
		t.Fatalf("due %v, want 3", got)
	}
	if got := c.Due(time.Hour, 3, nil); len(got) != 2 {
		t.Fatalf("due %v, want the other 2", got)
	}
}

func TestExpiredEntryIsDropped(t *testing.T) {
	c := newTestCache(t)
	dropped := make(chan uint64, 1)
	c.OnDrop = func(_ string, e *Entry, expired bool) {
		if expired {
			dropped <- e.Gen
		}
	}
	c.Install(c.Ticket("a"), NewEntry(map[string]string{"n": "1"}, 7, Now()+int64(10*time.Millisecond)))
	deadline := time.After(10 * time.Second)
	for {
		c.c.CleanUp()
		select {
		case g := <-dropped:
			if g != 7 {
				t.Fatalf("dropped generation %d, want 7", g)
			}
			return
		case <-deadline:
			t.Fatal("the expired entry was not dropped")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestHotMarks(t *testing.T) {
	c := newTestCache(t)
	far := Now() + int64(time.Hour)
	c.MarkHot("a", far)
	if !c.IsHot("a") {
		t.Fatal("a not hot after MarkHot")
	}
	if _, ok := c.Get("a"); ok {
		t.Fatal("a hot mark served as a copy")
	}
	// A copy installed later replaces the mark; a mark does not replace a
	// copy.
	if !c.Install(c.Ticket("a"), NewEntry(map[string]string{"n": "1"}, 1, far)) {
		t.Fatal("install over a hot mark refused")
	}
	c.MarkHot("a", far)
	if e, ok := c.Get("a"); !ok || e.Hash["n"] != "1" || c.IsHot("a") {
		t.Fatalf("a copy was replaced by a hot mark: %v %v", e, ok)
	}
	c.MarkHot("b", Now()-1)
	if c.IsHot("b") {
		t.Fatal("an expired hot mark counts")
	}
}

// A renewal of the same value keeps the reply bytes built for it; one of a
// new value builds them again.
func TestRenewalKeepsMemos(t *testing.T) {
	c := newTestCache(t)
	builds := 0
	build := func() []byte { builds++; return []byte("reply") }
	install := func(h map[string]string) *Entry {
		e := NewEntry(h, 1, Now()+int64(time.Minute))
		if !c.Install(c.Ticket("k"), e) {
			t.Fatal("not installed")
		}
		return e
	}
	install(map[string]string{"a": "1", "b": "2"}).Memo(MemoRESP2, build)
	install(map[string]string{"a": "1", "b": "2"}).Memo(MemoRESP2, build)
	if builds != 1 {
		t.Fatalf("%d builds: a renewal of the same value encoded its reply again", builds)
	}
	install(map[string]string{"a": "1", "b": "3"}).Memo(MemoRESP2, build)
	install(map[string]string{"a": "1"}).Memo(MemoRESP2, build)
	if builds != 3 {
		t.Fatalf("%d builds, want 3: a new value must not reuse the old reply", builds)
	}
}

// newTestCache returns a cache of 1 MiB, closed when the test ends.
func newTestCache(t *testing.T) *Cache {
	t.Helper()
	c, err := New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
