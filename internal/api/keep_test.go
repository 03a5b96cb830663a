package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/pkg/client"
)

// keepTTL is the immutable mapping's TTL in keepWorld.
const keepTTL = 1500 * time.Millisecond

// keepWorld is a world with sessions and an immutable mapping over the
// same accounts, "<family>:fix:{id}", whose entries live keepTTL; budget
// is writeback.immutableCache.
func keepWorld(t *testing.T, budget config.ByteSize) (w *world, fix func(id string) string, acct func(id string) string) {
	var family, table string
	w = newWorld(t, opts{sessions: true, edit: func(c *config.Config) {
		for _, m := range c.Mappings {
			// The world's one mapping: "<family>:acct:{id}", queue
			// "<family>/{id}", "SELECT id, balance FROM <table> WHERE id = $1".
			family = strings.TrimSuffix(fmt.Sprint(m["queue"]), "/{id}")
			table = strings.TrimSuffix(strings.TrimPrefix(fmt.Sprint(m["query"]), "SELECT id, balance FROM "), " WHERE id = $1")
		}
		c.Mappings = append(c.Mappings, map[string]any{"plugin": "sql", "store": "pg", "key": family + ":fix:{id}",
			"query": "SELECT id, balance FROM " + table + " WHERE id = $1", "immutable": true, "ttl": keepTTL.String()})
		c.Writeback.ImmutableCache = budget
	}})
	return w, func(id string) string { return w.family + ":fix:" + id }, func(id string) string { return w.family + ":acct:" + id }
}

// A multi-read says which of the values it read outside a session's
// leases the sidecar keeps (an immutable mapping's, read by a peek or
// without a session) and for how long, within the mapping's TTL; never a
// leased read's, another mapping's, an absent entry's, or any when the
// sidecar keeps nothing. The body is the JSON it always was.
func TestCacheReadManyKeep(t *testing.T) {
	w, fix, acct := keepWorld(t, 1<<20)
	many := func(q url.Values) (client.CacheManyResult, string) {
		t.Helper()
		var res client.CacheManyResult
		r := w.do(t, "GET", "/v1/cache?"+q.Encode(), "")
		r.ok(t, "multi-read "+q.Encode(), &res)
		if !json.Valid(r.body) {
			t.Fatalf("multi-read %s: not JSON: %s", q.Encode(), r.body)
		}
		return res, string(r.body)
	}
	checkKeep := func(what string, res client.CacheManyResult, want ...string) {
		t.Helper()
		var got []string
		for k, ms := range res.Keep {
			got = append(got, k)
			if ms <= 0 || ms > keepTTL.Milliseconds() {
				t.Errorf("%s: keep %s for %d ms; want 1 to %d", what, k, ms, keepTTL.Milliseconds())
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: keep %v; want %v", what, got, want)
		}
	}

	res, body := many(url.Values{"session": {"new"}, "key": {fix("2")}, "peek": {fix("1"), acct("1"), fix("9")}})
	checkKeep("a session's multi-read (leased key, peeks)", res, fix("1"))
	if len(res.Values) != 1 || string(res.Values[0]) != `{"id":2,"balance":100}` || len(res.Peeked) != 3 ||
		string(res.Peeked[0]) != `{"id":1,"balance":100}` || string(res.Peeked[1]) != `{"id":1,"balance":100}` || string(res.Peeked[2]) != "null" {
		t.Errorf("a session's multi-read: %s", body)
	}
	res, _ = many(url.Values{"key": {fix("2"), acct("2")}})
	checkKeep("a multi-read without a session", res, fix("2"))
	res, _ = many(url.Values{"session": {"new"}, "key": {fix("2")}})
	checkKeep("a leased read of a kept entry", res)
	res, body = many(url.Values{"key": {acct("2")}})
	checkKeep("a multi-read of another mapping", res)
	if body != `{"values":[{"id":2,"balance":100}]}`+"\n" {
		t.Errorf("a multi-read of another mapping answered %q", body)
	}

	w0, fix0, _ := keepWorld(t, 0)
	var res0 client.CacheManyResult
	w0.do(t, "GET", "/v1/cache?peek="+url.QueryEscape(fix0("1"))+"&key="+url.QueryEscape(fix0("2")), "").ok(t, "a multi-read with no budget", &res0)
	checkKeep("a multi-read with no budget", res0)
}

// countingTransport counts the requests it sends and keeps their URLs.
type countingTransport struct {
	mu   sync.Mutex
	urls []*url.URL
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.urls = append(c.urls, r.URL)
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *countingTransport) sent() []*url.URL {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.urls)
}

// A client with WithImmutableCache serves what the sidecar said it keeps
// from its own copies, with no request, until the sidecar stops keeping
// it; asks only for the rest, and answers in the order asked; never serves
// a leased key or another mapping's entry from a copy; and hands out bytes
// of the caller's own.
func TestClientKeepsImmutableEntries(t *testing.T) {
	w, fix, acct := keepWorld(t, 1<<20)
	ct := &countingTransport{}
	c := client.New(w.url, client.WithImmutableCache(1<<20), client.WithHTTPClient(&http.Client{Transport: ct}))
	ctx := context.Background()
	read := func(session string, r client.Reads) client.CacheManyResult {
		t.Helper()
		res, err := c.ReadCache(ctx, session, r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	requests := func() int { return len(ct.sent()) }
	one, two := `{"id":1,"balance":100}`, `{"id":2,"balance":100}`

	res := read("", client.Reads{Peek: []string{fix("1"), acct("1")}})
	if string(res.Peeked[0]) != one || string(res.Peeked[1]) != one || requests() != 1 {
		t.Fatalf("first read: %s after %d requests", res.Peeked, requests())
	}
	res.Peeked[0][2] = 'X' // the caller's own bytes
	res = read("", client.Reads{Keys: []string{fix("1")}, Peek: []string{fix("1")}})
	if string(res.Values[0]) != one || string(res.Peeked[0]) != one || requests() != 1 {
		t.Fatalf("a read of the kept entry: %s %s after %d requests; want it served with no request", res.Values, res.Peeked, requests())
	}
	res.Values[0][2] = 'X'
	if res = read("", client.Reads{Keys: []string{fix("1")}}); string(res.Values[0]) != one {
		t.Fatalf("the kept entry reads %s after a caller changed the bytes it was given; want %s", res.Values[0], one)
	}

	// A read for update without a session is the sidecar's to refuse, kept
	// or not.
	if _, err := c.ReadCache(ctx, "", client.Reads{Keys: []string{fix("1")}, ForUpdate: true}); !client.IsInvalid(err) {
		t.Errorf("lease=x without a session, on a kept entry: %v; want the sidecar's 400", err)
	}

	// Another mapping's entry is always asked for; a transfer changes it.
	w.do(t, "POST", "/v1/sessions/"+w.begin(t)+"/commit", w.commitBody(1, 1)).ok(t, "a transfer into 1", nil)
	n := requests()
	res = read("", client.Reads{Peek: []string{acct("1")}})
	if string(res.Peeked[0]) != `{"id":1,"balance":101}` || requests() != n+1 {
		t.Errorf("a read of another mapping: %s after %d requests; want 101 asked for", res.Peeked, requests()-n)
	}

	// In a session: the leased key is asked for even though a copy is
	// kept, with the peeks no copy holds; the answer is in the order asked.
	res = read("new", client.Reads{Keys: []string{fix("1")}, Peek: []string{fix("2"), fix("1"), acct("2")}})
	last := ct.sent()[requests()-1].Query()
	if !slices.Equal(last["key"], []string{fix("1")}) || !slices.Equal(last["peek"], []string{fix("2"), acct("2")}) {
		t.Errorf("a session's read asked for keys %v and peeks %v; want the leased key and the peeks no copy holds", last["key"], last["peek"])
	}
	if res.Session == "" || len(res.Values) != 1 || len(res.Peeked) != 3 || string(res.Peeked[0]) != two || string(res.Peeked[1]) != one || string(res.Peeked[2]) != two {
		t.Errorf("a session's read answered %+v", res)
	}
	if _, err := c.CommitSession(ctx, res.Session, client.Commit{}); err != nil {
		t.Errorf("the session's commit: %v", err)
	}

	// A session to begin with everything kept still begins one.
	n = requests()
	res = read("new", client.Reads{Peek: []string{fix("1")}})
	if res.Session == "" || requests() != n+1 || string(res.Peeked[0]) != one {
		t.Errorf("session=new with every peek kept: %+v after %d requests; want a session begun", res, requests()-n)
	}

	// Once the sidecar's copy is over, so is the client's.
	time.Sleep(keepTTL + 100*time.Millisecond)
	n = requests()
	res = read("", client.Reads{Peek: []string{fix("2")}})
	if requests() != n+1 || string(res.Peeked[0]) != two {
		t.Errorf("a read after the TTL: %s after %d requests; want it asked for", res.Peeked, requests()-n)
	}
}
