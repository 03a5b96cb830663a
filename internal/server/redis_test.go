package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/server"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

// writeAndRead checks that a started sidecar serves: a write-back PUT is
// buffered in Redis and read back.
func writeAndRead(t *testing.T, r *running, f *fixture) {
	t.Helper()
	c := client.New(r.url)
	ctx := context.Background()
	if _, err := c.Put(ctx, f.table, "2", map[string]any{"n": 2, "s": "two"}); err != nil {
		t.Fatalf("put: %v", err)
	}
	doc, _, err := c.Get(ctx, f.table, "2")
	if err != nil || !strings.Contains(string(doc), `"s":"two"`) {
		t.Fatalf("get: %s, %v", doc, err)
	}
}

// newFailure builds a server that must fail and returns its error.
func newFailure(t *testing.T, cfg *config.Config) string {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), cfg, prometheus.NewRegistry(), quietLog())
	if err == nil {
		_ = srv.Run(canceled())
		t.Fatal("New accepted the configuration")
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("New: %q is more than one line", err)
	}
	return err.Error()
}

// With redis.username and redis.password naming an ACL user of the real
// Redis, the sidecar works; with a wrong password it refuses to start,
// saying which settings to fix and quoting no password.
func TestRedisACLUser(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	user, pass := f.prefix+"_user", f.prefix+"-pw"
	if err := f.rdb.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+pass, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { f.rdb.Do(context.Background(), "ACL", "DELUSER", user) })

	t.Run("the right password", func(t *testing.T) {
		cfg := f.config(t)
		cfg.Redis.Username, cfg.Redis.Password = user, pass
		writeAndRead(t, run(t, cfg), f)
	})
	t.Run("a wrong password", func(t *testing.T) {
		cfg := f.config(t)
		cfg.Redis.Username, cfg.Redis.Password = user, "not-"+pass
		msg := newFailure(t, cfg)
		for _, want := range []string{"refused the sidecar's credentials", "fix redis.username and redis.password"} {
			if !strings.Contains(msg, want) {
				t.Errorf("New: %q; want it to contain %q", msg, want)
			}
		}
		if strings.Contains(msg, pass) {
			t.Errorf("New: %q quotes the password", msg)
		}
	})
}

// tlsFiles are the PEM files of a CA, a server certificate it signed for
// localhost and 127.0.0.1, and a client certificate it signed.
type tlsFiles struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func writeTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "writeback test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	sDER, sKey := leaf(2, x509.ExtKeyUsageServerAuth)
	cDER, cKey := leaf(3, x509.ExtKeyUsageClientAuth)
	return tlsFiles{
		ca:         write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", sDER), serverKey: write("server-key.pem", "PRIVATE KEY", keyDER(sKey)),
		clientCert: write("client.pem", "CERTIFICATE", cDER), clientKey: write("client-key.pem", "PRIVATE KEY", keyDER(cKey)),
	}
}

// startTLSRedis runs a redis-server of its own that speaks only TLS and
// requires client certificates, until the test ends; it returns its
// address.
func startTLSRedis(t *testing.T, f tlsFiles) string {
	t.Helper()
	addr := freeLoopback(t)
	_, port, _ := net.SplitHostPort(addr)
	startServer(t, addr, "redis-server with TLS (is it built with TLS?)", "--port", "0", "--tls-port", port, "--bind", "127.0.0.1",
		"--tls-cert-file", f.serverCert, "--tls-key-file", f.serverKey, "--tls-ca-cert-file", f.ca,
		"--tls-auth-clients", "yes", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	return addr
}

// freeLoopback returns a loopback address nothing listens on.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer runs redis-server with args until the test ends and waits
// until it listens on addr; what names it in failures.
func startServer(t *testing.T, addr, what string, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (%v); install Redis to run this test", err)
	}
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", what, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s within 10 s: %s", what, addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Redis that speaks only TLS and requires client certificates: the
// sidecar serves with redis.tls (CA, client key pair, server name); it
// refuses to start, saying what to fix, without TLS, with a CA that did
// not sign the server's certificate, with a CA file missing or holding no
// certificate, and without a client certificate.
func TestRedisTLS(t *testing.T) {
	f := newFixture(t)
	files := writeTLSFiles(t)
	addr := startTLSRedis(t, files)
	withTLS := func(t *testing.T) *config.Config {
		cfg := f.config(t)
		cfg.Redis.Addrs = []string{addr}
		cfg.Redis.TLS = config.RedisTLS{Enabled: true, CAFile: files.ca, CertFile: files.clientCert, KeyFile: files.clientKey, ServerName: "localhost"}
		return cfg
	}
	t.Run("TLS with a client certificate", func(t *testing.T) {
		r := run(t, withTLS(t))
		writeAndRead(t, r, f)
		// The data really is in the TLS Redis.
		pair, err := tls.LoadX509KeyPair(files.clientCert, files.clientKey)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}})
		defer rdb.Close()
		if n, err := rdb.DBSize(context.Background()).Result(); err != nil || n == 0 {
			t.Errorf("the TLS Redis holds %d keys (%v); want the sidecar's", n, err)
		}
	})
	cases := []struct {
		name string
		edit func(c *config.Config)
		want []string
	}{
		{"TLS off", func(c *config.Config) { c.Redis.TLS = config.RedisTLS{} },
			[]string{"cannot reach Redis", "redis.tls.enabled"}},
		{"a CA that did not sign the server's certificate", func(c *config.Config) { c.Redis.TLS.CAFile = files.clientCert },
			[]string{"cannot reach Redis", "certificate", "redis.tls"}},
		{"a missing CA file", func(c *config.Config) { c.Redis.TLS.CAFile = files.ca + ".missing" },
			[]string{"redis.tls.caFile: ", "give the path of a PEM CA bundle"}},
		{"a CA file without certificates", func(c *config.Config) { c.Redis.TLS.CAFile = files.clientKey },
			[]string{"redis.tls.caFile: ", "holds no PEM certificate"}},
		{"no client certificate", func(c *config.Config) { c.Redis.TLS.CertFile, c.Redis.TLS.KeyFile = "", "" },
			[]string{"cannot reach Redis", "redis.tls"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := withTLS(t)
			cfg.Redis.DialTimeout = config.Duration{Duration: time.Second}
			tc.edit(cfg)
			msg := newFailure(t, cfg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("New: %q; want it to contain %q", msg, w)
				}
			}
		})
	}
}

// startSentinel runs a redis-sentinel of its own, with requirepass, that
// monitors the test Redis as master name; it returns its address.
func startSentinel(t *testing.T, master, pass string) string {
	t.Helper()
	addr := freeLoopback(t)
	host, port, _ := net.SplitHostPort(addr)
	rhost, rport, _ := net.SplitHostPort(testenv.RedisAddr(t))
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("port %s\nbind %s\nsentinel monitor %s %s %s 1\nrequirepass %s\n", port, host, master, rhost, rport, pass)), 0o600); err != nil {
		t.Fatal(err)
	}
	startServer(t, addr, "redis-sentinel", conf, "--sentinel")
	return addr
}

// In sentinel mode, redis.sentinelPassword authenticates to the sentinels
// (which here require a password the data node does not): with it the
// sidecar finds the master and serves; with a wrong one it refuses to
// start, naming the sentinel settings.
func TestRedisSentinelPassword(t *testing.T) {
	f := newFixture(t)
	master := f.prefix + "_master"
	addr := startSentinel(t, master, "sentinel-pw")
	sentinel := func(t *testing.T, pass string) *config.Config {
		cfg := f.config(t)
		cfg.Redis.Mode, cfg.Redis.Addrs, cfg.Redis.MasterName, cfg.Redis.SentinelPassword = config.ModeSentinel, []string{addr}, master, pass
		return cfg
	}
	t.Run("the right sentinel password", func(t *testing.T) {
		writeAndRead(t, run(t, sentinel(t, "sentinel-pw")), f)
	})
	t.Run("a wrong sentinel password", func(t *testing.T) {
		msg := newFailure(t, sentinel(t, "wrong-pw"))
		t.Log(msg)
		for _, want := range []string{"refused the sidecar's credentials", "redis.sentinelPassword"} {
			if !strings.Contains(msg, want) {
				t.Errorf("New: %q; want it to contain %q", msg, want)
			}
		}
	})
}
