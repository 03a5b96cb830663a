package resp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/gopool"
	"github.com/writeback/writeback/internal/nearcache"
)

// Limits of one connection.
const (
	// maxInflight bounds the commands read but not yet answered; beyond
	// it the reader stops reading and TCP pushes back on the client.
	maxInflight = 1024
	// maxBatch bounds the commands sent to Redis in one round trip.
	maxBatch = 256
)

// job is one command of a connection, from the moment it is read until its
// reply is written.
type job struct {
	op    string    // metrics op label: the command's family
	start time.Time // when it was read
	proto int       // the protocol its reply is encoded in
	out   []byte    // the encoded reply, complete when done is closed
	code  int       // HTTP-equivalent status, for metrics
	close bool      // close the connection after writing the reply
	// done is closed when the reply is complete. It is made (ready) only
	// when the job is pushed or scheduled, the only ways anyone may wait
	// for it: a near-cache hit answered at once (direct) needs none.
	done     chan struct{}
	finished bool    // finish ran before ready
	pbuf     *[]byte // out's buffer when it came from replyPool

	// What the command still has to do, set when it is prepared. A job
	// with none of read, fw and run was answered then.
	keys   []docKey                                          // the documents it touches, distinct
	key1   [1]docKey                                         // keys' storage for one document
	writes bool                                              // whether it writes them
	ref    document.Ref                                      // its document, for read and fw
	read   func(j *job, s *change.Schema, doc document.Hash) // a one-document read: renders the document (nil: missing)
	fw     *document.FieldWrite                              // a one-document write
	wrote  func(j *job, r document.FieldResult)              // renders fw's result
	mapErr func(err error) *respError                        // errors fw words its own way (may return nil)
	run    func(ctx context.Context, j *job)                 // anything else doing I/O; sets the reply
	whole  bool                                              // read renders the whole document (HGETALL): its reply is memoized in near-cache entries
}

func (j *job) reply(b []byte) { j.out, j.code = b, 200 }

// replyPool holds reply buffers of large replies (HGETALL, HMGET), which
// the writer returns once it has copied them.
var replyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// buffer returns an empty reply buffer with room for n bytes.
func (j *job) buffer(n int) []byte {
	if n > 64<<10 {
		return make([]byte, 0, n)
	}
	j.pbuf = replyPool.Get().(*[]byte)
	return slices.Grow((*j.pbuf)[:0], n)
}

// release gives j's reply buffer back once written.
func (j *job) release() {
	if j.pbuf != nil && cap(j.out) <= 64<<10 {
		*j.pbuf = j.out[:0]
		replyPool.Put(j.pbuf)
	}
	j.pbuf, j.out = nil, nil
}

func (j *job) fail(e *respError) {
	j.out, j.code = redcon.AppendError(j.out[:0], e.msg), e.code
}

func (j *job) answered() bool { return j.read == nil && j.fw == nil && j.run == nil }

// docKey names a document in a connection's ordering.
type docKey struct {
	coll *document.Collection
	id   string
}

func keyOf(r document.Ref) docKey { return docKey{r.Coll, r.ID} }

// setKey makes r the one document j touches.
func (j *job) setKey(r document.Ref) {
	j.key1[0] = keyOf(r)
	j.keys = j.key1[:]
}

// conn is one client connection. Two goroutines serve it:
//
//   - the reader reads commands with redcon's reader (behind the frame
//     guard) and prepares each in arrival order: authentication, the
//     protocol version and every connection-level command are decided right
//     there, so they apply exactly to the commands after them. It queues
//     each command for the writer and starts it (schedule);
//   - the writer takes the queue in order, waits for each command's reply
//     and writes it, flushing whenever it would otherwise wait or the
//     queue is empty.
//
// Between the two, the commands that touch documents run concurrently,
// ordered per document: a command waits for the earlier unfinished
// commands of this connection that conflict with it (a write waits for
// the document's reads and write before it, a read for its write before
// it; reads do not wait for reads). The connection keeps, per document
// with unfinished commands, the last write and the reads since (order):
// the reader records a command when it schedules it, and a command erases
// itself when it finishes, before its done channel closes — so a later
// command either finds it and waits for done, or comes after its end.
//
// A command with nothing to wait for joins the reader's current batch;
// once the reader has taken in every command that had arrived, it
// dispatches the batch: the cache lookups of its reads go to Redis in one
// round trip, and so do the first attempts of its writes (document.GetMany,
// document.WriteFields), each on a goroutine of its own so that the reader goes
// on reading. The commands of one batch never conflict with each other,
// since a command conflicting with an earlier one waits for it. A command
// that has to wait runs on its own goroutine once those it waits for are
// done. So for a pipeline "HSET a …, HGET b, HGET a": HSET a and HGET b run
// at once, in two round trips made concurrently; HGET a runs when HSET a is
// done and sees it; the replies go out in the order HSET, HGET b, HGET a.
//
// Every command's context is the connection's, bounded by commandTimeout;
// the connection's is cancelled when a reply cannot be written (the client
// is gone) and when a shutdown runs out of time.
type conn struct {
	s      *Server
	nc     net.Conn
	id     int64
	addr   string
	ctx    context.Context
	cancel context.CancelFunc
	queue  chan *job // prepared commands, in arrival order: reader → writer

	// The reader's own state.
	proto  int
	authed bool
	name   string
	lib    [2]string // CLIENT SETINFO lib-name, lib-ver
	reads  []*job    // the current batch
	writes []*job

	// wmu guards queued and, while queued is 0, the connection's writes:
	// the writer writes only the jobs queued, the reader only when none is.
	wmu    sync.Mutex
	queued int // jobs pushed whose replies the writer has not written and flushed

	omu   sync.Mutex // guards order and free
	order map[docKey]*docOrder
	free  []*docOrder

	stopping atomic.Bool // set by Shutdown: stop reading, finish, close

	wdl atomic.Int64 // the write deadline set last (Unix ns): armWrite
}

// armWrite gives the next write at least Options.WriteTimeout: it moves the
// connection's write deadline to one and a half timeouts from now only when
// less than one is left, so that most replies change no timer (setting a
// deadline costs a runtime timer update per reply otherwise). A client
// that reads none of its replies is disconnected after one to one and a
// half timeouts.
func (c *conn) armWrite() {
	d := c.s.opt.WriteTimeout
	if d <= 0 {
		return
	}
	now := time.Now()
	if time.Duration(c.wdl.Load()-now.UnixNano()) >= d {
		return
	}
	dl := now.Add(d + d/2)
	c.wdl.Store(dl.UnixNano())
	_ = c.nc.SetWriteDeadline(dl)
}

// docOrder is what a connection's next command on one document must wait
// for: its unfinished commands.
type docOrder struct {
	write *job   // the last write, nil once finished
	reads []*job // the unfinished reads since it
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(s.ctx)
	return &conn{
		s: s, nc: nc, id: s.ids.Add(1), addr: clientAddr(nc.RemoteAddr(), nc.LocalAddr()),
		ctx: ctx, cancel: cancel, queue: make(chan *job, maxInflight),
		proto: 2, order: map[docKey]*docOrder{},
	}
}

// clientAddr is a client's address as CLIENT INFO and CLIENT LIST show it:
// host:port, or for a Unix socket, as Redis writes it, the socket's path
// and port 0 (the client's end has no name).
func clientAddr(remote, local net.Addr) string {
	if _, ok := remote.(*net.UnixAddr); ok {
		return localAddr(local)
	}
	return remote.String()
}

// localAddr is the address a client connected to, as CLIENT INFO shows it.
func localAddr(local net.Addr) string {
	if u, ok := local.(*net.UnixAddr); ok {
		return u.Name + ":0"
	}
	return local.String()
}

// serve runs the connection until the client or the server ends it.
func (c *conn) serve() {
	written := make(chan struct{})
	go func() {
		defer close(written)
		c.writeLoop()
	}()
	c.readLoop()
	<-written
	c.cancel()
	c.nc.Close()
	c.s.forget(c)
}

// stopReading makes the reader stop at its next read: Shutdown.
func (c *conn) stopReading() {
	c.stopping.Store(true)
	_ = c.nc.SetReadDeadline(time.Now())
}

func (c *conn) readLoop() {
	defer close(c.queue)
	var authed func() bool
	if c.s.opt.Token != "" {
		authed = func() bool { return c.authed }
	}
	g := newFrameGuard(c.nc, c.s.opt.MaxCommandBytes, authed)
	// The batch goes out when the reader is about to wait for the client:
	// every command that had arrived is in it. Dispatching after each
	// ReadCommands instead would cut a pipeline into pieces the size of
	// redcon's buffer (4 KiB), each costing its own round trips to Redis.
	g.idle = c.dispatch
	rd := redcon.NewReader(g)
	for {
		cmds, err := rd.ReadCommands()
		if err != nil {
			c.dispatch()
			if msg, ok := protocolMessage(err); ok && !c.stopping.Load() {
				// Redis answers a protocol error and closes the connection.
				j := c.newJob(famOther)
				j.fail(&respError{msg: "ERR " + msg, code: 400})
				j.close = true
				c.finish(j)
				c.push(j)
			}
			return
		}
		for _, cmd := range cmds {
			j := c.prepare(cmd.Args)
			if len(cmds) == 1 && c.direct(j) {
				continue
			}
			c.push(j)
			c.schedule(j)
			if j.close {
				c.dispatch()
				return
			}
			if len(c.reads)+len(c.writes) >= maxBatch {
				c.dispatch()
			}
		}
	}
}

// protocolMessage tells a protocol error (ours or redcon's) from an I/O
// error.
func protocolMessage(err error) (string, bool) {
	var pe *protocolError
	if errors.As(err, &pe) {
		return pe.Error(), true
	}
	if s := err.Error(); strings.HasPrefix(s, "Protocol error: ") {
		return s, true
	}
	return "", false
}

// jobPool recycles the jobs answered at once (direct), which nothing else
// ever saw.
var jobPool = sync.Pool{New: func() any { return new(job) }}

func (c *conn) newJob(op string) *job {
	j := jobPool.Get().(*job)
	*j = job{op: op, start: time.Now(), proto: c.proto}
	return j
}

// closedDone is the done of a job finished before anyone could wait for it.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ready makes j's done before it can be waited for (push, schedule); the
// reader calls it, as it calls finish for the jobs answered when prepared.
func (j *job) ready() {
	if j.done != nil {
		return
	}
	if j.finished {
		j.done = closedDone
		return
	}
	j.done = make(chan struct{})
}

// push hands j to the writer. When maxInflight commands are waiting for
// their replies it blocks — after dispatching the current batch, whose
// commands the writer may be waiting for.
func (c *conn) push(j *job) {
	j.ready()
	c.wmu.Lock()
	c.queued++
	c.wmu.Unlock()
	select {
	case c.queue <- j:
	default:
		c.dispatch()
		c.queue <- j
	}
}

// finish records j's metrics, takes it out of the ordering and releases
// its reply.
func (c *conn) finish(j *job) {
	c.s.observe(j.op, j.code, time.Since(j.start))
	if len(j.keys) > 0 {
		c.omu.Lock()
		for _, k := range j.keys {
			o := c.order[k]
			if o == nil {
				continue
			}
			if o.write == j {
				o.write = nil
			} else if i := slices.Index(o.reads, j); i >= 0 {
				o.reads = slices.Delete(o.reads, i, i+1)
			}
			if o.write == nil && len(o.reads) == 0 {
				delete(c.order, k)
				c.free = append(c.free, o)
			}
		}
		c.omu.Unlock()
	}
	if j.done == nil {
		// Answered before it was pushed or scheduled: nobody waits yet.
		j.finished = true
		return
	}
	close(j.done)
}

// schedule starts j, or makes it wait for the commands it conflicts with.
func (c *conn) schedule(j *job) {
	if j.answered() {
		return
	}
	deps := c.deps(j)
	switch {
	case len(deps) == 0 && j.read != nil:
		if e, ok := c.s.svc.Cached(j.ref); ok {
			// A near-cache hit is answered right here, on the reader: no
			// Redis round trip, no goroutine.
			c.answerCached(j, e)
			return
		}
		c.reads = append(c.reads, j)
	case len(deps) == 0 && j.fw != nil:
		c.writes = append(c.writes, j)
	default:
		gopool.Go(func() { c.runAlone(j, deps) })
	}
}

// direct answers a near-cache hit and writes its reply on the reader,
// when nothing else is waiting to be written: a client that sends one
// command at a time then costs no hand-over to the writer. It reports
// whether it did.
func (c *conn) direct(j *job) bool {
	if j.read == nil || j.fw != nil || j.run != nil || j.close {
		return false
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.queued > 0 {
		// Earlier replies come first: the writer's turn.
		return false
	}
	// Nothing pushed is unwritten, so nothing before j is unfinished: j
	// has no command to wait for.
	e, ok := c.s.svc.Cached(j.ref)
	if !ok {
		return false
	}
	c.answerCached(j, e)
	c.armWrite()
	if _, err := c.nc.Write(j.out); err != nil {
		c.cancel()
		c.nc.Close()
	}
	j.release()
	jobPool.Put(j)
	return true
}

// answerCached answers a read from a near-cache entry; a whole-document
// reply is encoded once per entry and protocol.
func (c *conn) answerCached(j *job, e *nearcache.Entry) {
	schema := j.ref.Coll.Table.Schema
	if !j.whole {
		j.read(j, schema, e.Hash)
		c.finish(j)
		return
	}
	slot := nearcache.MemoRESP2
	if j.proto == 3 {
		slot = nearcache.MemoRESP3
	}
	out := e.Memo(slot, func() []byte {
		j.read(j, schema, e.Hash)
		b := bytes.Clone(j.out)
		j.release()
		return b
	})
	j.out, j.code = out, 200
	c.finish(j)
}

// deps returns the unfinished commands j must wait for, and records j as
// the latest command on its documents.
func (c *conn) deps(j *job) []*job {
	var deps []*job
	c.omu.Lock()
	defer c.omu.Unlock()
	for _, k := range j.keys {
		o := c.order[k]
		if o == nil {
			if n := len(c.free); n > 0 {
				o, c.free = c.free[n-1], c.free[:n-1]
			} else {
				o = &docOrder{}
			}
			c.order[k] = o
		}
		if o.write != nil {
			deps = append(deps, o.write)
		}
		if j.writes {
			deps = append(deps, o.reads...)
			clear(o.reads)
			o.reads = o.reads[:0]
			o.write = j
		} else {
			o.reads = append(o.reads, j)
		}
	}
	return deps
}

// dispatch starts the current batch.
func (c *conn) dispatch() {
	if len(c.reads) > 0 {
		rs := c.reads
		c.reads = nil
		gopool.Go(func() { c.execReads(rs) })
	}
	if len(c.writes) > 0 {
		ws := c.writes
		c.writes = nil
		gopool.Go(func() { c.execWrites(ws) })
	}
}

// batchContext is the context of a batch's commands, cancelled when the
// last of them finishes.
func (c *conn) batchContext(n int) (context.Context, func()) {
	ctx, cancel := context.WithTimeout(c.ctx, commandTimeout)
	var left atomic.Int32
	left.Store(int32(n))
	return ctx, func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
}

func (c *conn) execReads(rs []*job) {
	ctx, doneOne := c.batchContext(len(rs))
	refs := make([]document.Ref, len(rs))
	for i, j := range rs {
		refs[i] = j.ref
	}
	c.s.svc.GetMany(ctx, refs, func(i int, doc document.Hash, err error) {
		c.readDone(rs[i], doc, err)
		doneOne()
	})
}

func (c *conn) execWrites(ws []*job) {
	ctx, doneOne := c.batchContext(len(ws))
	fws := make([]document.FieldWrite, len(ws))
	for i, j := range ws {
		fws[i] = *j.fw
	}
	c.s.svc.WriteFields(ctx, fws, func(i int, r document.FieldResult, err error) {
		c.writeDone(ws[i], r, err)
		doneOne()
	})
}

// runAlone runs a command that had to wait, or that is not a one-document
// read or write, on its own.
func (c *conn) runAlone(j *job, deps []*job) {
	for _, d := range deps {
		<-d.done
	}
	ctx, cancel := context.WithTimeout(c.ctx, commandTimeout)
	defer cancel()
	switch {
	case j.run != nil:
		j.run(ctx, j)
		c.finish(j)
	case j.read != nil:
		var wg sync.WaitGroup
		wg.Add(1)
		c.s.svc.GetMany(ctx, []document.Ref{j.ref}, func(_ int, doc document.Hash, err error) {
			c.readDone(j, doc, err)
			wg.Done()
		})
		wg.Wait()
	default:
		r, err := c.s.svc.WriteField(ctx, *j.fw)
		c.writeDone(j, r, err)
	}
}

func (c *conn) readDone(j *job, doc document.Hash, err error) {
	switch {
	case err == nil, errors.Is(err, document.ErrNotFound):
		j.read(j, j.ref.Coll.Table.Schema, doc)
	default:
		j.fail(c.s.toRESP(err))
	}
	c.finish(j)
}

func (c *conn) writeDone(j *job, r document.FieldResult, err error) {
	if err == nil {
		j.wrote(j, r)
	} else if e := j.mapErr; e != nil && e(err) != nil {
		j.fail(e(err))
	} else {
		j.fail(c.s.toRESP(err))
	}
	c.finish(j)
}

// writeLoop writes the replies in arrival order.
func (c *conn) writeLoop() {
	w := redcon.NewWriter(c.nc)
	pending, broken := false, false
	flush := func() {
		if !pending || broken {
			return
		}
		pending = false
		c.armWrite()
		if err := w.Flush(); err != nil {
			// The client is gone, or does not read its replies
			// (Options.WriteTimeout): stop the commands still running
			// and the reader; the queue still drains.
			broken = true
			c.cancel()
			c.nc.Close()
		}
	}
	for j := range c.queue {
		func() {
			select {
			case <-j.done:
			default:
				flush()
				<-j.done
			}
			if broken {
				return
			}
			w.WriteRaw(j.out)
			j.release()
			pending = true
			if j.close {
				flush()
				broken = true
				c.nc.Close()
				return
			}
			if len(c.queue) == 0 {
				flush()
			}
		}()
		// Written and, if it was the last, flushed: once none is left the
		// reader may write its next reply itself (direct).
		c.wmu.Lock()
		c.queued--
		c.wmu.Unlock()
	}
	flush()
}
