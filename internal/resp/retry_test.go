package resp_test

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/writeback/writeback/internal/config"
)

// cutProxy forwards TCP connections to target until cut, which closes its
// listener and every connection: the target looks down.
type cutProxy struct {
	addr  string
	mu    sync.Mutex // guards ln and conns
	ln    net.Listener
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// With the store down, the Redis-protocol port tells retry-safety by the
// error's prefix, never quoting the driver: a write-through write that got
// buffered is BUFFERED (do not retry: it will be applied), a read that
// needs the store is TRYAGAIN (nothing was done).
func TestRetryPrefixes(t *testing.T) {
	var px *cutProxy
	w := startWorld(t, func(c *config.Config) {
		pg := c.Stores["pg"]
		u, err := url.Parse(pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		px = newCutProxy(t, u.Host)
		u.Host = px.addr
		pg.DSN = u.String()
		c.Stores["pg"] = pg
		wt := c.Collections[w0(c)+"_nn"]
		wt.Policy = config.PolicyWriteThrough
		c.Collections[w0(c)+"_nn"] = wt
	})
	c := w.raw(t)
	// Cached while the store is up, so that the next write needs no read.
	c.send(fmt.Sprintf("HSET %s_nn/5 req x n 1\r\n", w.table))
	c.expect(":2\r\n")
	px.cut()
	for _, tc := range []struct{ name, cmd, prefix, has string }{
		{"a buffered write-through write", fmt.Sprintf("HINCRBY %s_nn/5 n 1\r\n", w.table), "-BUFFERED ", "buffered as seq "},
		{"a read that needs the store", fmt.Sprintf("HGETALL %s/6\r\n", w.table), "-TRYAGAIN ", "the store is unavailable; retry with backoff"},
	} {
		c.send(tc.cmd)
		line, err := c.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !strings.HasPrefix(line, tc.prefix) || !strings.Contains(line, tc.has) {
			t.Errorf("%s: %q; want %q… saying %q", tc.name, line, tc.prefix, tc.has)
		}
		for _, raw := range []string{"dial", "refused", "postgres", "EOF", px.addr} {
			if strings.Contains(line, raw) {
				t.Errorf("%s: %q quotes the driver's error (%q)", tc.name, line, raw)
			}
		}
	}
}

// w0 is the name of the world's first collection: the one without _nn.
func w0(c *config.Config) string {
	for name := range c.Collections {
		if !strings.HasSuffix(name, "_nn") {
			return name
		}
	}
	return ""
}
