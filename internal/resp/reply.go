package resp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/rscript"
)

// Replies are encoded with redcon's Append functions, which speak RESP2;
// the RESP3 types Redis uses where RESP2 has none (null, map, set,
// verbatim string) are written here. A reply is encoded in the protocol
// the connection spoke when its command arrived (HELLO switches it for the
// commands after it).

func appendNull(b []byte, proto int) []byte {
	if proto == 3 {
		return append(b, '_', '\r', '\n')
	}
	return redcon.AppendNull(b)
}

// appendMap starts a map of n pairs: RESP3's %n, RESP2's flat array of 2n.
func appendMap(b []byte, n, proto int) []byte {
	if proto == 3 {
		return appendHeader(b, '%', n)
	}
	return redcon.AppendArray(b, 2*n)
}

// appendSet starts a set of n elements: RESP3's ~n, RESP2's array.
func appendSet(b []byte, n, proto int) []byte {
	if proto == 3 {
		return appendHeader(b, '~', n)
	}
	return redcon.AppendArray(b, n)
}

// appendVerbatim writes a text as RESP3 writes INFO: a verbatim string of
// format "txt"; in RESP2 a bulk string.
func appendVerbatim(b []byte, s string, proto int) []byte {
	if proto != 3 {
		return redcon.AppendBulkString(b, s)
	}
	b = appendHeader(b, '=', len(s)+4)
	b = append(b, "txt:"...)
	b = append(b, s...)
	return append(b, '\r', '\n')
}

func appendHeader(b []byte, c byte, n int) []byte {
	b = append(b, c)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// respError is an error reply: its message, with Redis's error prefix
// ("ERR", "WRONGPASS" …), and the HTTP status it counts as in
// writeback_requests_total's code label, so that both front doors share
// the metric's meaning.
type respError struct {
	msg  string
	code int
}

func (e *respError) Error() string { return e.msg }

func errf(code int, format string, args ...any) *respError {
	return &respError{msg: fmt.Sprintf(format, args...), code: code}
}

// Canned errors, worded as Redis words them.
var (
	errNoAuth      = &respError{msg: "NOAUTH Authentication required.", code: 401}
	errWrongPass   = &respError{msg: "WRONGPASS invalid username-password pair or user is disabled.", code: 401}
	errNotInteger  = &respError{msg: "ERR value is not an integer or out of range", code: 400}
	errNotFloat    = &respError{msg: "ERR value is not a valid float", code: 400}
	errHashNotInt  = &respError{msg: "ERR hash value is not an integer", code: 400}
	errHashNotFlt  = &respError{msg: "ERR hash value is not a float", code: 400}
	errOverflow    = &respError{msg: "ERR increment or decrement would overflow", code: 400}
	errFloatInf    = &respError{msg: "ERR increment would produce NaN or Infinity", code: 400}
	errSyntax      = &respError{msg: "ERR syntax error", code: 400}
	errConflict    = &respError{msg: "TRYAGAIN too many concurrent writes to the document; retry with backoff", code: 409}
	errShuttingOff = &respError{msg: "ERR the sidecar is shutting down", code: 503}
)

func errArity(name string) *respError {
	return errf(400, "ERR wrong number of arguments for '%s' command", name)
}

// errUnknownCommand is Redis 7's reply to an unknown command: its name and
// up to 128 bytes of its arguments, each quoted.
func errUnknownCommand(args [][]byte) *respError {
	var b strings.Builder
	for _, a := range args[1:] {
		if b.Len() >= 128 {
			break
		}
		fmt.Fprintf(&b, "'%.*s' ", 128-b.Len(), a)
	}
	return errf(400, "ERR unknown command '%.128s', with args beginning with: %s", args[0], b.String())
}

func errUnknownSubcommand(sub []byte, cmd string) *respError {
	return errf(400, "ERR unknown subcommand '%.128s'. Try %s HELP.", sub, strings.ToUpper(cmd))
}

// toRESP renders an error of the document service as document.Classify
// says, with a prefix that tells the client whether retrying is safe, as
// Redis's TRYAGAIN does: TRYAGAIN when nothing was buffered (go-redis and
// other clients retry it by themselves), BUFFERED when the change is
// buffered and will be applied, UNCERTAIN when it may have been applied
// (neither may be retried blindly), ERR when the command is wrong as sent.
// The message is Classify's sentence: never the driver's error, which is
// logged.
func (s *Server) toRESP(err error) *respError {
	var re *respError
	if errors.As(err, &re) {
		return re
	}
	f := document.Classify(err)
	if re := (*rscript.ReplicationError)(nil); errors.As(err, &re) {
		s.m.ReplicationFailures.Inc()
	}
	switch {
	case f.Internal:
		s.log.Error("command failed", "err", err)
	case f.Log != "":
		s.log.Warn(f.Log, "err", err)
	}
	if errors.Is(err, document.ErrConflict) {
		return errConflict
	}
	return &respError{msg: retryPrefix[f.Retry] + " " + f.Msg, code: f.Status}
}

// retryPrefix is the error prefix of each document.Retry.
var retryPrefix = map[document.Retry]string{
	document.RetryNever:     "ERR",
	document.RetrySafe:      "TRYAGAIN",
	document.RetryBuffered:  "BUFFERED",
	document.RetryUncertain: "UNCERTAIN",
}
