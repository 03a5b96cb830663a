package resp

import (
	"io"
	"strconv"
)

// Protocol limits, Redis's own unless said otherwise (networking.c).
const (
	// maxInline is PROTO_INLINE_MAX_SIZE: the longest inline command, and
	// the longest a multibulk or bulk header may grow before its CRLF.
	maxInline = 64 << 10
	// maxMultibulk bounds a command's argument count. Redis 7 allows up
	// to INT_MAX; redcon's reader walks the whole count on every read of an
	// incomplete command, so a client announcing billions of arguments
	// would spin it. Redis before 7 had this limit.
	maxMultibulk = 1024 * 1024
	// maxBulk is proto-max-bulk-len's default.
	maxBulk = 512 << 20
	// Before AUTH (when a token is configured) Redis accepts at most 10
	// arguments of at most 16 KiB each.
	maxMultibulkNoAuth = 10
	maxBulkNoAuth      = 16 << 10
)

// protocolError is a malformed or oversized request: Redis replies
// "-ERR Protocol error: <msg>" and closes the connection, and so do we.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "Protocol error: " + e.msg }

// Guard states.
const (
	gStart     = iota // at the start of a command
	gInline           // inside an inline command, before its '\n'
	gMultiHdr         // inside "*<count>", before its '\n'
	gBulkStart        // expecting '$' of the next argument
	gBulkHdr          // inside "$<len>", before its '\n'
	gBulkBody         // inside an argument's bytes and their CRLF
)

// frameGuard sits between a client's connection and redcon's reader and
// enforces the protocol's limits before the reader sees a byte. redcon's
// reader (v1.6.2) has none: it panics on a bulk length near MaxInt64 (the
// bounds check overflows), walks an announced argument count on every read,
// and buffers an endless inline command or bulk without bound. The guard
// follows the RESP framing with a constant-memory state machine and passes
// the bytes through unchanged, except that it drops the empty multibulks
// "*0" and "*-1", which Redis ignores and redcon would refuse. At the first
// violation it hands over everything before it and then fails with a
// *protocolError, worded as Redis words it.
//
// A command is also refused when its arguments together exceed maxCommand
// bytes: the front door's equivalent of the HTTP API's body limit.
type frameGuard struct {
	r          io.Reader
	maxCommand int64
	authed     func() bool // nil: no token configured
	// idle, if set, is called before each read from r that may wait: by
	// then everything read so far has been handed over.
	idle func()

	in  []byte // read from r, not yet processed
	out []byte // processed, not yet handed over (a window of buf)
	buf []byte // reused for out
	err error  // handed over once out is empty

	st      int
	hdr     []byte // the current header line, up to hdrMax bytes
	hdrLen  int    // its full length so far
	args    int64  // arguments still expected in the current multibulk
	body    int64  // bytes of the current argument (and its CRLF) still expected
	cmdSize int64  // argument bytes of the current command so far
	line    int    // length of the current inline command so far
}

// hdrMax is the longest header line kept for parsing; longer ones cannot
// hold a valid length anyway.
const hdrMax = 24

func newFrameGuard(r io.Reader, maxCommand int64, authed func() bool) *frameGuard {
	return &frameGuard{r: r, maxCommand: maxCommand, authed: authed, in: make([]byte, 16<<10), hdr: make([]byte, 0, hdrMax)}
}

// Read implements io.Reader.
func (g *frameGuard) Read(p []byte) (int, error) {
	for len(g.out) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		if g.idle != nil {
			g.idle()
		}
		n, err := g.r.Read(g.in)
		g.out = g.buf[:0]
		g.scan(g.in[:n])
		g.buf = g.out[:0]
		if err != nil && g.err == nil {
			g.err = err
		}
	}
	n := copy(p, g.out)
	g.out = g.out[n:]
	return n, nil
}

// scan runs the state machine over b, appending what passes to g.out. It
// stops at the first violation, recording it in g.err.
func (g *frameGuard) scan(b []byte) {
	if g.err != nil {
		return
	}
	out := g.out
	for i := 0; i < len(b); {
		switch g.st {
		case gStart:
			switch b[i] {
			case '*':
				g.st, g.hdr, g.hdrLen, g.cmdSize = gMultiHdr, g.hdr[:0], 0, 0
				i++ // the header is emitted once parsed
			default:
				g.st, g.line = gInline, 0
			}
		case gInline:
			j := i
			for j < len(b) && b[j] != '\n' {
				j++
			}
			g.line += j - i
			if g.line > maxInline {
				g.fail(out, "too big inline request")
				return
			}
			if j < len(b) {
				j++ // the '\n'
				g.st = gStart
			}
			out = append(out, b[i:j]...)
			i = j
		case gMultiHdr, gBulkHdr:
			j := i
			for j < len(b) && b[j] != '\n' {
				j++
			}
			g.hdrLen += j - i
			if room := hdrMax - len(g.hdr); room > 0 {
				g.hdr = append(g.hdr, b[i:i+min(room, j-i)]...)
			}
			if j == len(b) {
				if g.hdrLen > maxInline {
					if g.st == gMultiHdr {
						g.fail(out, "too big mbulk count string")
					} else {
						g.fail(out, "too big bulk count string")
					}
					return
				}
				i = j
				continue
			}
			i = j + 1 // past the '\n'
			var ok bool
			if out, ok = g.header(out); !ok {
				return
			}
		case gBulkStart:
			if b[i] != '$' {
				g.fail(out, "expected '$', got '"+string(b[i])+"'")
				return
			}
			g.st, g.hdr, g.hdrLen = gBulkHdr, g.hdr[:0], 0
			i++
		case gBulkBody:
			n := min(int64(len(b)-i), g.body)
			out = append(out, b[i:i+int(n)]...)
			i += int(n)
			if g.body -= n; g.body == 0 {
				if g.args--; g.args == 0 {
					g.st = gStart
				} else {
					g.st = gBulkStart
				}
			}
		}
	}
	g.out = out
}

// header checks a complete header line (in g.hdr, without its '\n') and
// emits it in canonical form.
func (g *frameGuard) header(out []byte) ([]byte, bool) {
	n, ok := parseLength(g.hdr, g.hdrLen)
	noAuth := g.authed != nil && !g.authed()
	if g.st == gMultiHdr {
		switch {
		case !ok || n > maxMultibulk || (noAuth && n > maxMultibulkNoAuth):
			g.fail(out, "invalid multibulk length")
			return out, false
		case n <= 0:
			g.st = gStart // an empty command: nothing to pass on
			return out, true
		}
		g.args, g.st = n, gBulkStart
		out = append(out, '*')
		out = strconv.AppendInt(out, n, 10)
		return append(out, '\r', '\n'), true
	}
	if !ok || n < 0 || n > maxBulk || (noAuth && n > maxBulkNoAuth) {
		g.fail(out, "invalid bulk length")
		return out, false
	}
	if g.cmdSize += n; g.maxCommand > 0 && g.cmdSize > g.maxCommand {
		g.fail(out, "command too large: its arguments exceed limits.maxBodyBytes ("+strconv.FormatInt(g.maxCommand, 10)+" bytes)")
		return out, false
	}
	g.body, g.st = n+2, gBulkBody
	out = append(out, '$')
	out = strconv.AppendInt(out, n, 10)
	return append(out, '\r', '\n'), true
}

// fail records a violation; what was processed before it is handed over
// first.
func (g *frameGuard) fail(out []byte, msg string) {
	g.out = out
	g.err = &protocolError{msg: msg}
}

// parseLength parses a header's length as Redis's string2ll does: an
// optional '-' and decimal digits without leading zeros, ended by "\r".
// full is the line's length, of which hdr holds the first bytes.
func parseLength(hdr []byte, full int) (int64, bool) {
	if full != len(hdr) || len(hdr) < 2 || hdr[len(hdr)-1] != '\r' {
		return 0, false
	}
	s := hdr[:len(hdr)-1]
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 18 || (s[0] == '0' && len(s) > 1) {
		return 0, false // 18 digits cannot overflow
	}
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
