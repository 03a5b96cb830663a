package bench

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echo serves a line echo on a free loopback port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrips sends n one-line pings through addr, each after the answer to
// the previous one, and returns the fastest round trip.
func roundTrips(t *testing.T, addr string, n int) time.Duration {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	fastest := time.Hour
	for i := range n {
		start := time.Now()
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
		line, err := r.ReadString('\n')
		if err != nil || line != "ping\n" {
			t.Fatalf("round trip %d: %q, %v", i, line, err)
		}
		fastest = min(fastest, time.Since(start))
	}
	return fastest
}

// The proxy adds its delay each way: every round trip through a 1 ms proxy
// takes at least 2 ms, where the same echo answers directly in well under
// a millisecond.
func TestLatencyProxyAddsDelayEachWay(t *testing.T) {
	up := echo(t)
	p, err := StartLatencyProxy(up, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !strings.HasPrefix(p.Addr, "127.0.0.1:") || p.Addr == up {
		t.Fatalf("proxy address %q", p.Addr)
	}
	direct := roundTrips(t, up, 20)
	proxied := roundTrips(t, p.Addr, 20)
	t.Logf("fastest round trip: direct %v, through the 1 ms proxy %v", direct, proxied)
	if proxied < 2*time.Millisecond {
		t.Errorf("fastest round trip through the proxy %v; want at least 2 ms (1 ms each way)", proxied)
	}
	if direct >= time.Millisecond {
		t.Logf("direct round trip %v: the machine is loaded", direct)
	}
}

func TestValidateLatency(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond} {
		if err := ValidateLatency(d); err != nil {
			t.Errorf("%v: %v", d, err)
		}
	}
	for _, d := range []time.Duration{-time.Millisecond, 1500 * time.Microsecond, time.Microsecond} {
		if err := ValidateLatency(d); err == nil {
			t.Errorf("%v accepted", d)
		}
	}
	if _, err := StartLatencyProxy("127.0.0.1:1", 0); err == nil {
		t.Error("a proxy without delay started")
	}
}

func TestWithStoreAddr(t *testing.T) {
	for _, tc := range []struct{ driver, dsn, addr, want string }{
		{"postgres", "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable", "127.0.0.1:5432", "postgres://postgres@127.0.0.1:9999/writeback?sslmode=disable"},
		{"postgres", "postgres://postgres@localhost/writeback", "localhost:5432", "postgres://postgres@127.0.0.1:9999/writeback"},
		{"mysql", "root@tcp(127.0.0.1:3306)/writeback", "127.0.0.1:3306", "root@tcp(127.0.0.1:9999)/writeback"},
		{"mongodb", "mongodb://127.0.0.1:27017/", "127.0.0.1:27017", "mongodb://127.0.0.1:9999/?directConnection=true"},
	} {
		addr, err := StoreAddr(tc.driver, tc.dsn)
		if err != nil || addr != tc.addr {
			t.Errorf("StoreAddr(%s) = %q, %v; want %q", tc.dsn, addr, err, tc.addr)
		}
		got, err := WithStoreAddr(tc.driver, tc.dsn, "127.0.0.1:9999")
		if err != nil || got != tc.want {
			t.Errorf("WithStoreAddr(%s) = %q, %v; want %q", tc.dsn, got, err, tc.want)
		}
	}
	for _, dsn := range []string{"root@unix(/tmp/my.sock)/db", "not a dsn"} {
		if _, err := StoreAddr("mysql", dsn); err == nil {
			t.Errorf("StoreAddr(mysql, %q) succeeded", dsn)
		}
	}
	if _, err := StoreAddr("postgres", "postgres://a:1,b:2/db"); err == nil {
		t.Error("several hosts accepted")
	}
}
