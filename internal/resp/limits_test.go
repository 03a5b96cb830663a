package resp_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/config"
)

// connectedClients reads INFO clients' connected_clients over rc.
func connectedClients(t *testing.T, rc *redis.Client) int {
	t.Helper()
	info, err := rc.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "connected_clients:"); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatalf("INFO clients has no connected_clients: %q", info)
	return 0
}

// Past resp.maxConnections, a connection is answered as Redis answers past
// maxclients and closed; once a client leaves, a new one is served.
func TestMaxConnections(t *testing.T) {
	w := startWorld(t, func(c *config.Config) { c.Resp.MaxConnections = 2 })
	a, b := w.raw(t), w.raw(t)
	a.send("PING\r\n")
	a.expect("+PONG\r\n")
	b.send("PING\r\n")
	b.expect("+PONG\r\n")

	c := w.raw(t)
	c.send("PING\r\n") // never read: the answer comes first
	c.expect("-ERR max number of clients reached\r\n")
	c.expectClosed()

	a.nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := w.raw(t)
		d.send("PING\r\n")
		_ = d.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := d.rd.ReadString('\n')
		if line == "+PONG\r\n" {
			break
		}
		d.nc.Close()
		if time.Now().After(deadline) {
			t.Fatalf("after a client left, a new one still gets %q, %v", line, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A client that sends commands but never reads their replies is
// disconnected once a reply has waited resp.writeTimeout to be written;
// the other clients are served all along.
func TestWriteTimeout(t *testing.T) {
	w := startWorld(t, func(c *config.Config) { c.Resp.WriteTimeout = config.Duration{Duration: 300 * time.Millisecond} })
	rc := w.client(t, 2)
	before := connectedClients(t, rc)
	nc, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.(*net.TCPConn).SetReadBuffer(4 << 10)
	// 64 KiB replies until the socket buffers are full and the server's
	// write blocks; our writes end when the server closes.
	arg := strings.Repeat("x", 64<<10)
	cmd := fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(arg), arg)
	sent := make(chan int, 1)
	go func() {
		n := 0
		_ = nc.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for n < 2000 {
			if _, err := nc.Write([]byte(cmd)); err != nil {
				break
			}
			n++
		}
		sent <- n
	}()
	deadline := time.Now().Add(15 * time.Second)
	for connectedClients(t, rc) > before {
		if time.Now().After(deadline) {
			t.Fatal("a client that reads no replies is still connected after 15 s (resp.writeTimeout is 300ms)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := <-sent; n >= 2000 {
		t.Errorf("the server took all %d commands (%d MiB of replies) from a client that reads none", n, n/16)
	}
}
