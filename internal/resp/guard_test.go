package resp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tidwall/redcon"
)

// readAll passes in through a frameGuard, at once or one byte per read,
// and returns what came out and the error that ended it.
func readAll(in string, oneByte bool, maxCommand int64, authed func() bool) (string, error) {
	var r io.Reader = strings.NewReader(in)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	g := newFrameGuard(r, maxCommand, authed)
	var out bytes.Buffer
	buf := make([]byte, 7)
	for {
		k, err := g.Read(buf)
		out.Write(buf[:k])
		if err != nil {
			return out.String(), err
		}
	}
}

func TestFrameGuard(t *testing.T) {
	no := func() bool { return false }
	tests := []struct {
		name, in, out, err string
		max                int64
		authed             func() bool
	}{
		{name: "commands pass", in: "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\n", out: "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\n"},
		{name: "inline passes", in: "PING\r\nECHO x\n", out: "PING\r\nECHO x\n"},
		{name: "empty multibulks are dropped", in: "*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", out: "*1\r\n$4\r\nPING\r\n"},
		{name: "binary bulk", in: "*1\r\n$3\r\n\x00\r\n\r\n", out: "*1\r\n$3\r\n\x00\r\n\r\n"},
		{name: "bulk length near MaxInt64", in: "*1\r\n$9223372036854775807\r\nxx", err: "invalid bulk length"},
		{name: "bulk length over 512 MiB", in: "*1\r\n$536870913\r\n", err: "invalid bulk length"},
		{name: "negative bulk length", in: "*1\r\n$-1\r\n", err: "invalid bulk length"},
		{name: "empty bulk length", in: "*1\r\n$\r\n", err: "invalid bulk length"},
		{name: "leading zero", in: "*1\r\n$04\r\nPING\r\n", err: "invalid bulk length"},
		{name: "LF without CR", in: "*1\r\n$4\nPING\r\n", err: "invalid bulk length"},
		{name: "not a bulk", in: "*1\r\nPING\r\n", err: "expected '$', got 'P'"},
		{name: "huge multibulk", in: "*3000000000\r\n", err: "invalid multibulk length"},
		{name: "garbage multibulk", in: "*x\r\n", err: "invalid multibulk length"},
		{name: "endless inline", in: strings.Repeat("a", maxInline+1), err: "too big inline request"},
		{name: "endless header", in: "*" + strings.Repeat("1", maxInline+1), err: "too big mbulk count string"},
		{name: "endless bulk header", in: "*1\r\n$" + strings.Repeat("1", maxInline+1), err: "too big bulk count string"},
		{name: "command over the limit", in: "*2\r\n$3\r\nSET\r\n$10\r\n", max: 12, out: "*2\r\n$3\r\nSET\r\n", err: "command too large"},
		{name: "command within the limit", in: "*2\r\n$3\r\nSET\r\n$9\r\n123456789\r\n", max: 12, out: "*2\r\n$3\r\nSET\r\n$9\r\n123456789\r\n"},
		{name: "commands before the error pass", in: "*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n", out: "*1\r\n$4\r\nPING\r\n*1\r\n", err: "invalid bulk length"},
		{name: "unauthenticated: 11 arguments", in: "*11\r\n", authed: no, err: "invalid multibulk length"},
		{name: "unauthenticated: 10 arguments", in: "*10\r\n", authed: no, out: "*10\r\n"},
		{name: "unauthenticated: 16 KiB and 1", in: "*1\r\n$16385\r\n", authed: no, err: "invalid bulk length"},
	}
	for _, tc := range tests {
		for _, oneByte := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				out, err := readAll(tc.in, oneByte, tc.max, tc.authed)
				if tc.err == "" {
					if err != io.EOF {
						t.Fatalf("error %v; want none", err)
					}
				} else {
					var pe *protocolError
					if !errors.As(err, &pe) || !strings.Contains(pe.Error(), tc.err) {
						t.Fatalf("error %v; want a protocol error %q", err, tc.err)
					}
				}
				if tc.out != "" && out != tc.out {
					t.Fatalf("passed %q; want %q", out, tc.out)
				}
			})
		}
	}
}

// The guard makes redcon's reader safe: this input panics it unguarded.
func TestFrameGuardProtectsRedcon(t *testing.T) {
	in := "*1\r\n$9223372036854775807\r\nxx"
	rd := redcon.NewReader(newFrameGuard(strings.NewReader(in), 0, nil))
	_, err := rd.ReadCommands()
	if msg, ok := protocolMessage(err); !ok || msg != "Protocol error: invalid bulk length" {
		t.Fatalf("error %v; want the protocol error", err)
	}
}
