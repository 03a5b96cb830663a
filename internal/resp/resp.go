// Package resp is the Redis-protocol front door of the sidecar: an
// unmodified Redis client (RESP2 or RESP3) reads and writes documents as
// hashes — key "collection/id" (or "collection:id"), one field per column —
// with the semantics, consistency, policies and metrics of the HTTP API. It
// parses and encodes RESP with github.com/tidwall/redcon behind a guard
// that enforces Redis's protocol limits, translates commands to calls on
// document.Service, and holds no state beyond its connections.
//
// Pipelining: a connection's commands are answered in the order they
// arrived, but executed concurrently wherever they touch different
// documents; one document's commands keep their order (see conn).
package resp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writeback/writeback/internal/api"
	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/metrics"
)

// Options configure the server.
type Options struct {
	// Token, when set, must be presented with AUTH (or HELLO … AUTH) before
	// any other command: the same token as the HTTP API's bearer token.
	Token string
	// MaxCommandBytes bounds the total size of one command's arguments
	// (limits.maxBodyBytes); 0 means Redis's own limits only.
	MaxCommandBytes int64
	// MaxConnections bounds the connections served at once (0: no
	// bound); one more is told "-ERR max number of clients reached" and
	// closed, as Redis does past maxclients.
	MaxConnections int
	// WriteTimeout bounds how long a write of replies may block on a
	// client that does not read them (0: for ever); past it (and before
	// one and a half of it: conn.armWrite) the connection is closed.
	WriteTimeout time.Duration
	Version      string // writeback's version, reported by INFO
	InstanceID   string // this sidecar's name, reported by INFO
}

// Server serves the Redis protocol on the listeners given to Serve.
type Server struct {
	opt Options
	svc *document.Service
	buf *buffer.Buffer
	app *bgt.Applier
	m   *metrics.Metrics
	log *slog.Logger

	series sync.Map // seriesKey → prometheus.Counter or prometheus.Observer, looked up once
	ok200  sync.Map // op → *opSeries: the series of an op's successes, in one lookup

	ctx    context.Context // parent of every command's context
	cancel context.CancelFunc
	start  time.Time
	ids    atomic.Int64 // connection ids
	conns  sync.WaitGroup

	mu      sync.Mutex // guards lns, clients, closing
	lns     map[net.Listener]struct{}
	clients map[*conn]struct{}
	closing bool
}

// New returns a server over the document service. The buffer and the
// appliers are read for INFO.
func New(opt Options, svc *document.Service, buf *buffer.Buffer, app *bgt.Applier, m *metrics.Metrics, log *slog.Logger) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opt: opt, svc: svc, buf: buf, app: app, m: m, log: log,
		ctx: ctx, cancel: cancel, start: time.Now(),
		lns: map[net.Listener]struct{}{}, clients: map[*conn]struct{}{},
	}
	return s
}

// opSeries are an op's duration histogram and its count of successes.
type opSeries struct {
	dur prometheus.Observer
	ok  prometheus.Counter
}

func (o *opSeries) observe(d time.Duration) {
	o.dur.Observe(d.Seconds())
	o.ok.Inc()
}

// seriesKey names a series of writeback_requests_total (code != 0) or
// writeback_request_duration_seconds (code == 0).
type seriesKey struct {
	op   string
	code int
}

// observe counts one command in writeback_requests_total and
// writeback_request_duration_seconds, whose series it looks up once.
func (s *Server) observe(op string, code int, d time.Duration) {
	if code == 200 {
		// The common case in one lookup: near-cache hits answer in a
		// few microseconds, and two lookups were a tenth of that.
		o, ok := s.ok200.Load(op)
		if !ok {
			o, _ = s.ok200.LoadOrStore(op, &opSeries{s.m.RequestDuration.WithLabelValues(op), s.m.Requests.WithLabelValues(op, codeLabel(200))})
		}
		o.(*opSeries).observe(d)
		return
	}
	dur, ok := s.series.Load(seriesKey{op, 0})
	if !ok {
		dur, _ = s.series.LoadOrStore(seriesKey{op, 0}, s.m.RequestDuration.WithLabelValues(op))
	}
	dur.(prometheus.Observer).Observe(d.Seconds())
	req, ok := s.series.Load(seriesKey{op, code})
	if !ok {
		req, _ = s.series.LoadOrStore(seriesKey{op, code}, s.m.Requests.WithLabelValues(op, codeLabel(code)))
	}
	req.(prometheus.Counter).Inc()
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("resp: server closed")

// Serve accepts connections on ln until Shutdown, which closes it.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("resp: accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		if s.opt.MaxConnections > 0 && len(s.clients) >= s.opt.MaxConnections {
			s.mu.Unlock()
			go refuse(nc)
			continue
		}
		c := newConn(s, nc)
		s.clients[c] = struct{}{}
		s.conns.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Shutdown stops accepting, stops reading from every connection, lets the
// commands already read finish and their replies be written, and closes
// the connections. When ctx ends first, it cancels the commands still
// running and closes the connections at once. It returns when every
// connection's goroutines are gone.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.clients {
		c.stopReading()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.conns.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
	}
	s.cancel()
	s.mu.Lock()
	for c := range s.clients {
		c.nc.Close()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// errMaxClients is Redis's answer past maxclients.
const errMaxClients = "-ERR max number of clients reached\r\n"

// refuse answers a connection over MaxConnections and closes it, without
// reading from it; the write is bounded so that a client that does not
// read cannot hold the goroutine.
//
// It half-closes and reads what the client sent, for at most a second,
// before closing: closing with unread input would reset the connection,
// and a reset can destroy the answer before the client reads it.
func refuse(nc net.Conn) {
	defer nc.Close()
	deadline := time.Now().Add(time.Second)
	_ = nc.SetDeadline(deadline)
	if _, err := nc.Write([]byte(errMaxClients)); err != nil {
		return
	}
	if hc, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(nc, 64<<10))
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.clients, c)
	s.mu.Unlock()
	s.conns.Done()
}

func (s *Server) clientCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// commandTimeout bounds every command, as api.RequestTimeout bounds every
// HTTP request: the applied-records compaction relies on reads being
// bounded (bgt.compactApplied).
const commandTimeout = api.RequestTimeout

// statusLabels are the code label values, by HTTP status.
var statusLabels = map[int]string{}

func codeLabel(code int) string {
	if l, ok := statusLabels[code]; ok {
		return l
	}
	return strconv.Itoa(code)
}

func init() {
	for _, c := range []int{200, 400, 401, 404, 409, 413, 500, 503} {
		statusLabels[c] = strconv.Itoa(c)
	}
}
