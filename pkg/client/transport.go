package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// transport sends one request and reads its whole answer. A Client of an
// http:// sidecar without WithHTTPClient uses a pool (below); with
// WithHTTPClient, or over https, a netTransport.
type transport interface {
	roundTrip(ctx context.Context, r *request) (answer, error)
}

// request is what a Client sends.
type request struct {
	method      string
	url         string // absolute
	body        []byte // JSON; nil: none
	token       string // bearer token; "": none
	ifNoneMatch string // "": none
}

// answer is a response read whole.
type answer struct {
	status     int
	body       []byte
	etag       string
	retryAfter string
}

// netTransport sends requests with an *http.Client.
type netTransport struct{ hc *http.Client }

func (t netTransport) roundTrip(ctx context.Context, r *request) (answer, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, body)
	if err != nil {
		return answer{}, fmt.Errorf("client: %w", err)
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.ifNoneMatch != "" {
		req.Header.Set("If-None-Match", r.ifNoneMatch)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if n := resp.ContentLength; n > 0 {
		buf.Grow(int(min(n, 1<<20)) + bytes.MinRead) // one allocation when the length is known
	}
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return answer{}, fmt.Errorf("client: %s %s: reading the answer: %w", r.method, r.url, err)
	}
	return answer{status: resp.StatusCode, body: buf.Bytes(), etag: resp.Header.Get("ETag"), retryAfter: resp.Header.Get("Retry-After")}, nil
}

// Pool limits, as the shared net/http transport's were.
const (
	poolMaxIdle     = 512              // idle connections kept per sidecar
	poolIdleTimeout = 90 * time.Second // below the sidecar's http.idleTimeout (2m)
	poolDialTimeout = 5 * time.Second
)

// pool keeps connections to one sidecar alive and sends each request on
// one of them, on the calling goroutine, with fasthttp's HTTP/1.1 codec.
// net/http's transport hands every request to two goroutines of its
// connection, a writer and a reader, and their hand-overs cost about as
// much CPU as the rest of a request to a sidecar on the same node: 33–34
// µs per request against 18 here, the server's included
// (BenchmarkTransport). fasthttp's own HostClient has no context: a call
// could not be cancelled. The pool is small enough to be this package's
// own.
type pool struct {
	addr        string
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	idleTimeout time.Duration // poolIdleTimeout; shorter in tests

	mu   sync.Mutex // guards idle and reap
	idle []*pconn   // most recently used last
	reap *time.Timer

	dialed, stale atomic.Int64 // connections opened, and dropped as closed by the sidecar; for tests
}

// pools holds one pool per sidecar address, shared by every Client of it
// as net/http's shared transport was.
var pools sync.Map // host:port → *pool

func poolFor(addr string) *pool {
	if p, ok := pools.Load(addr); ok {
		return p.(*pool)
	}
	p, _ := pools.LoadOrStore(addr, newPool(addr))
	return p.(*pool)
}

func newPool(addr string) *pool {
	d := &net.Dialer{Timeout: poolDialTimeout, KeepAlive: 30 * time.Second}
	return &pool{addr: addr, dial: d.DialContext, idleTimeout: poolIdleTimeout}
}

// pconn is one kept-alive connection.
type pconn struct {
	nc        net.Conn
	br        *bufio.Reader // reads nc through pc.Read, which counts
	bw        *bufio.Writer
	read      int64     // bytes read from nc
	idleSince time.Time // when it went back to the pool
	broken    bool      // must not be reused
}

func (pc *pconn) Read(b []byte) (int, error) {
	n, err := pc.nc.Read(b)
	pc.read += int64(n)
	return n, err
}

// longAgo is a deadline that has passed: it wakes a blocked read or write.
var longAgo = time.Unix(1, 0)

func (p *pool) roundTrip(ctx context.Context, r *request) (answer, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return answer{}, p.fail(r, err)
		}
		pc, reused, err := p.get(ctx)
		if err != nil {
			return answer{}, p.fail(r, ctxErr(ctx, err))
		}
		a, answered, err := pc.do(ctx, r)
		if err == nil {
			p.put(pc)
			return a, nil
		}
		pc.nc.Close()
		err = ctxErr(ctx, err)
		// The sidecar closed a kept-alive connection as this request went
		// out on it (its idle timeout, a restart): nothing was answered,
		// and a read is sent again, as net/http does. Anything else may
		// have been done: the caller decides.
		if reused && !answered && attempt == 0 && ctx.Err() == nil && (r.method == http.MethodGet || r.method == http.MethodHead) {
			continue
		}
		return answer{}, p.fail(r, err)
	}
}

func (p *pool) fail(r *request, err error) error {
	return fmt.Errorf("client: %s %s: %w", r.method, r.url, err)
}

// ctxErr is ctx's error when ctx ended the request, else err.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// get returns an idle connection that is still open, or a new one; reused
// says which.
func (p *pool) get(ctx context.Context) (pc *pconn, reused bool, err error) {
	now := time.Now()
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		pc = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if now.Sub(pc.idleSince) < p.idleTimeout && alive(pc.nc) {
			return pc, true, nil
		}
		// Closed by the sidecar while idle (its idle timeout, a restart),
		// or idle too long: a request sent on it would fail.
		pc.nc.Close()
		p.stale.Add(1)
	}
	// The dial ends through ctx, as do's reads and writes: a dial under
	// ctx's deadline gets a socket deadline at the same instant, which
	// can fire first and leave the caller an i/o timeout while ctx.Err()
	// is still nil. The dialer's own timeout still bounds it.
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	nc, err := p.dial(dctx, "tcp", p.addr)
	stop()
	cancel()
	if err != nil {
		return nil, false, err
	}
	p.dialed.Add(1)
	pc = &pconn{nc: nc, bw: bufio.NewWriterSize(nc, 4096)}
	// An answer's header must fit in the reader's buffer: the sidecar's
	// are a few hundred bytes, a proxy's may be more.
	pc.br = bufio.NewReaderSize(pc, 16<<10)
	return pc, false, nil
}

// put gives a connection back after a complete exchange.
func (p *pool) put(pc *pconn) {
	if pc.broken {
		pc.nc.Close()
		return
	}
	pc.idleSince = time.Now()
	p.mu.Lock()
	if len(p.idle) >= poolMaxIdle {
		p.mu.Unlock()
		pc.nc.Close()
		return
	}
	p.idle = append(p.idle, pc)
	if p.reap == nil {
		p.reap = time.AfterFunc(p.idleTimeout, p.closeIdle)
	}
	p.mu.Unlock()
}

// closeIdle closes the connections idle for the idle timeout, so that an
// unused Client does not hold sockets the sidecar has closed; it runs
// again while any are left.
func (p *pool) closeIdle() {
	cutoff := time.Now().Add(-p.idleTimeout)
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.idle[:0]
	for _, pc := range p.idle {
		if pc.idleSince.After(cutoff) {
			keep = append(keep, pc)
		} else {
			pc.nc.Close()
		}
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	if len(p.idle) == 0 {
		p.reap = nil
		return
	}
	p.reap.Reset(p.idle[0].idleSince.Sub(cutoff))
}

// do sends r on pc and reads the answer; answered says whether any of it
// arrived. Once ctx is done (its deadline or its cancellation), the
// connection gets a deadline that has passed, so a blocked read or write
// returns at once — after ctx.Err() is set: a deadline of the connection's
// own at ctx's could fire first, and the caller would see a timeout while
// its context still looked alive.
func (pc *pconn) do(ctx context.Context, r *request) (a answer, answered bool, err error) {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = pc.nc.SetDeadline(longAgo) })
		defer func() {
			if !stop() {
				pc.broken = true // its deadline has passed
			}
		}()
	}

	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(r.url)
	// Keys are escaped by the caller ("a%2Fb" is one key): the path goes
	// as it is.
	req.URI().DisablePathNormalizing = true
	req.Header.SetMethod(r.method)
	req.Header.SetUserAgent("writeback-go-client")
	req.Header.Set("Accept", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.ifNoneMatch != "" {
		req.Header.Set("If-None-Match", r.ifNoneMatch)
	}
	if r.body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(r.body)
	}
	if err := req.Write(pc.bw); err != nil {
		return answer{}, false, err
	}
	if err := pc.bw.Flush(); err != nil {
		return answer{}, false, err
	}

	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	before := pc.read
	if err := resp.Read(pc.br); err != nil {
		return answer{}, pc.read > before, err
	}
	if resp.ConnectionClose() || pc.br.Buffered() > 0 {
		// The sidecar closes it, or sent more than one answer.
		pc.broken = true
	}
	a = answer{status: resp.StatusCode(), body: bytes.Clone(resp.Body())}
	if v := resp.Header.Peek("ETag"); len(v) > 0 {
		a.etag = string(v)
	}
	if v := resp.Header.Peek("Retry-After"); len(v) > 0 {
		a.retryAfter = string(v)
	}
	return a, true, nil
}
