package resp_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzProtocol feeds arbitrary bytes to a real front door over TCP:
// truncated frames, huge lengths, binary garbage, and real commands (the
// seeds in testdata/fuzz/FuzzProtocol; "{c}" in an input stands for the
// test collection). Whatever it gets, the server must not crash, must end
// the connection (with an error reply where Redis gives one) or keep
// answering, must leave no goroutine behind, and must answer PING on a
// fresh connection afterwards.
func FuzzProtocol(f *testing.F) {
	w := startWorld(f, nil)
	ping := func(t testing.TB) {
		t.Helper()
		c := w.raw(t)
		c.send("*1\r\n$4\r\nPING\r\n")
		c.expect("+PONG\r\n")
		c.nc.Close()
	}
	ping(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		in = bytes.ReplaceAll(in, []byte("{c}"), []byte(w.table))
		base, _ := frontDoorGoroutines()
		nc, err := net.Dial("tcp", w.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(4 * time.Second))
		// The server may close the connection before taking everything
		// (a protocol error): writing then fails, which is fine.
		go func() {
			_, _ = nc.Write(in)
			_ = nc.(*net.TCPConn).CloseWrite()
		}()
		// Having read to the end, the server answers what it read and
		// closes the connection (a reset, when it closed with input left
		// unread, is a close too).
		var ne net.Error
		if _, err := io.Copy(io.Discard, nc); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server did not close the connection: %v", err)
		}
		nc.Close()
		ping(t)
		settle(t, base, 5*time.Second) // before the fuzzer's 10 s limit per input
	})
}
