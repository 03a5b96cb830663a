package api_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/config"
)

// The API's server drops clients that are too slow: one that sends its
// headers a byte at a time (slow loris) after http.readHeaderTimeout, one
// that never finishes its body after http.readTimeout, and a kept-alive
// connection after http.idleTimeout.
func TestHTTPTimeouts(t *testing.T) {
	const limit = 300 * time.Millisecond
	w := newWorld(t, opts{edit: func(c *config.Config) {
		c.HTTP.ReadHeaderTimeout = config.Duration{Duration: limit}
		c.HTTP.ReadTimeout = config.Duration{Duration: 2 * limit}
		c.HTTP.IdleTimeout = config.Duration{Duration: limit}
	}})
	addr := strings.TrimPrefix(w.url, "http://")
	// closedWithin dials, runs send, and checks that the server closes the
	// connection within d (a read sees EOF or a reset, not our deadline).
	closedWithin := func(t *testing.T, d time.Duration, send func(c net.Conn)) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		send(c)
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err = io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the connection is still open after %v", time.Since(start))
		}
	}
	t.Run("slow loris", func(t *testing.T) {
		closedWithin(t, 5*time.Second, func(c net.Conn) {
			// A byte every 50 ms: each arrives in time, the headers never do.
			hdr := "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000)
			for i := 0; i < len(hdr); i++ {
				if _, err := c.Write([]byte{hdr[i]}); err != nil {
					return // closed by the server: what we want
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Error("the server read 1000 header bytes over 50 s")
		})
	})
	t.Run("a body that never comes", func(t *testing.T) {
		closedWithin(t, 5*time.Second, func(c net.Conn) {
			_, _ = io.WriteString(c, "PUT /v1/docs/"+w.coll+"/1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		})
		if st := w.status(t); st.Pending != 0 {
			t.Errorf("an unfinished PUT left %d changes pending", st.Pending)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		closedWithin(t, 5*time.Second, func(c net.Conn) {
			_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("healthz: %v %v", resp, err)
			}
		})
	})
}
