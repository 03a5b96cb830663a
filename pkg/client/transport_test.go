package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// poolOf is the pool c sends its requests with.
func poolOf(t *testing.T, c *Client) *pool {
	p, ok := c.rt.(*pool)
	require.True(t, ok, "an http:// client without WithHTTPClient uses the pool, not %T", c.rt)
	return p
}

func (p *pool) counts() (dialed, stale int) {
	return int(p.dialed.Load()), int(p.stale.Load())
}

func TestTransportChoice(t *testing.T) {
	for _, tc := range []struct {
		base string
		opts []Option
		pool bool
	}{
		{"http://127.0.0.1:8480", nil, true},
		{"127.0.0.1:8480", nil, true},
		{"http://sidecar/prefix", nil, true},
		{"https://127.0.0.1:8480", nil, false},
		{"http://127.0.0.1:8480", []Option{WithHTTPClient(&http.Client{})}, false},
	} {
		c := New(tc.base, tc.opts...)
		_, isPool := c.rt.(*pool)
		assert.Equal(t, tc.pool, isPool, "%s with %d options", tc.base, len(tc.opts))
	}
	assert.Equal(t, "sidecar:80", New("http://sidecar/prefix").rt.(*pool).addr)
	assert.Same(t, New("http://127.0.0.1:8480").rt, New("127.0.0.1:8480").rt, "clients of one sidecar share its pool")
}

// TestStaleConnection: a connection the sidecar closed while it was idle
// (its idle timeout, a restart) is not used for the next request, which
// would fail on it, whatever its method.
func TestStaleConnection(t *testing.T) {
	srv, reqs := fake(t, 200, nil, `{"seq":1}`)
	c := New(srv.URL)
	p := poolOf(t, c)
	_, err := c.Delete(context.Background(), "c", "1")
	require.NoError(t, err)
	srv.CloseClientConnections()
	// The close reaches the client's socket a moment later.
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.idle) == 1 && !alive(p.idle[0].nc)
	}, 5*time.Second, time.Millisecond)
	_, err = c.Patch(context.Background(), "c", "1", map[string]any{"$inc": map[string]any{"n": 1}})
	require.NoError(t, err)
	dialed, stale := p.counts()
	assert.Equal(t, 2, dialed)
	assert.Equal(t, 1, stale)
	assert.Len(t, *reqs, 2, "the PATCH went once")
}

// closingServer answers the first request of each connection and closes the
// connection after reading the second one, without answering it: the race
// in which a kept-alive connection is closed as a request goes out on it.
func closingServer(t *testing.T) (addr string, requests *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	requests = new(atomic.Int32)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					requests.Add(1)
					if i == 1 {
						return
					}
					_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"seq\":1}")
				}
			}()
		}
	}()
	return ln.Addr().String(), requests
}

// TestClosedAsSent: a read whose kept-alive connection closes before any
// answer arrives is sent again on a new one, as net/http does; a write is
// not (it may have been done), and its caller hears why.
func TestClosedAsSent(t *testing.T) {
	addr, requests := closingServer(t)
	c := New(addr)
	ctx := context.Background()
	require.NoError(t, c.Healthz(ctx))
	require.NoError(t, c.Healthz(ctx), "the read is sent again on a new connection")
	assert.EqualValues(t, 3, requests.Load())

	requests.Store(0)
	// The pool now holds a connection that answered once: the next
	// request on it is read and not answered.
	_, err := c.Put(ctx, "c", "1", map[string]any{"n": 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "client: PUT http://"+addr+"/v1/docs/c/1")
	assert.EqualValues(t, 1, requests.Load(), "a write is sent once")
}

// TestCancelWithoutDeadline: cancelling a context without a deadline ends
// a request that waits for its answer, and the connection is not reused.
func TestCancelWithoutDeadline(t *testing.T) {
	srv := stalling(t)
	c := New(srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Flush(ctx, time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 5*time.Second)
	dialed, _ := poolOf(t, c).counts()
	require.NoError(t, c.Healthz(context.Background()))
	after, _ := poolOf(t, c).counts()
	assert.Equal(t, dialed+1, after, "the cancelled request's connection was dropped")
}

// TestPathAsEscaped: a key's escaping reaches the sidecar as it was sent
// (a%2Fb is one key, not a/b).
func TestPathAsEscaped(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.EscapedPath() + "?" + r.URL.RawQuery)
		_, _ = io.WriteString(w, `{"n":1}`)
	}))
	defer srv.Close()
	_, err := New(srv.URL).Cache(context.Background(), "a/b c%/../d", "s1", true)
	require.NoError(t, err)
	assert.Equal(t, "/v1/cache/a%2Fb%20c%25%2F..%2Fd?lease=x&session=s1", got.Load())
}

// TestChunkedAnswer: an answer without a length, written in pieces, is read
// whole, and the connection is reused after it.
func TestChunkedAnswer(t *testing.T) {
	big := `{"docs":[` + strings.Repeat(`{"n":1},`, 20000) + `{"n":2}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < len(big); i += 1000 {
			_, _ = io.WriteString(w, big[i:min(i+1000, len(big))])
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	c := New(srv.URL)
	for range 3 {
		docs, err := c.Scan(context.Background(), "c", "", 0)
		require.NoError(t, err)
		require.Len(t, docs, 20001)
		assert.JSONEq(t, `{"n":2}`, string(docs[20000]))
	}
	dialed, _ := poolOf(t, c).counts()
	assert.Equal(t, 1, dialed)
}

// TestServerCloses: an answer with Connection: close is read and its
// connection not reused.
func TestServerCloses(t *testing.T) {
	srv, _ := fake(t, 200, map[string]string{"Connection": "close"}, `{"seq":1}`)
	c := New(srv.URL)
	for range 3 {
		_, err := c.Delete(context.Background(), "c", "1")
		require.NoError(t, err)
	}
	dialed, stale := poolOf(t, c).counts()
	assert.Equal(t, 3, dialed)
	assert.Zero(t, stale)
}

// TestIdleConnectionsClosed: connections idle for the idle timeout are
// closed without a request.
func TestIdleConnectionsClosed(t *testing.T) {
	srv, _ := fake(t, 200, nil, `{"seq":1}`)
	p := newPool(strings.TrimPrefix(srv.URL, "http://"))
	p.idleTimeout = 50 * time.Millisecond
	c := New(srv.URL)
	c.rt = p
	_, err := c.Delete(context.Background(), "c", "1")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.idle) == 0 && p.reap == nil
	}, 5*time.Second, 5*time.Millisecond)
	_, err = c.Delete(context.Background(), "c", "1")
	require.NoError(t, err)
	dialed, _ := p.counts()
	assert.Equal(t, 2, dialed)
}

// TestDialError: a sidecar that is not there is named in the error.
func TestDialError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	err = New(addr).Healthz(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "client: GET http://"+addr+"/healthz")
	var oe *net.OpError
	assert.True(t, errors.As(err, &oe), "%v", err)
}

// TestLargeHeader: an answer whose header is larger than a few kilobytes
// (a proxy's) is read.
func TestLargeHeader(t *testing.T) {
	srv, _ := fake(t, 200, map[string]string{"X-Proxy-Trace": strings.Repeat("a", 12<<10)}, `{"seq":7}`)
	seq, err := New(srv.URL).Delete(context.Background(), "c", "1")
	require.NoError(t, err)
	assert.EqualValues(t, 7, seq)
}

// TestDeadlineSeenByCaller: a request that its context's deadline ends
// returns after the context is done, so that a caller who checks
// ctx.Err() on an error sees why (the linearizability tests do). A
// deadline of the connection's own at the context's would often fire
// first.
func TestDeadlineSeenByCaller(t *testing.T) {
	c := New(stalling(t).URL)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			_, err := c.Flush(ctx, time.Minute)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Error(t, ctx.Err(), "the request returned before its context was done")
		}()
	}
	wg.Wait()
}
