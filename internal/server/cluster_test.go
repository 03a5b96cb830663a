package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/pkg/client"
)

// tlsCluster is a private Redis Cluster of three primaries that speaks
// only TLS (client certificates required, the cluster bus too) and admits
// one ACL user besides a default user with a password of its own.
type tlsCluster struct {
	addrs      []string
	files      tlsFiles
	user, pass string
}

// startTLSCluster starts the cluster on free loopback ports and waits
// until every node reports cluster_state:ok.
func startTLSCluster(t *testing.T) *tlsCluster {
	t.Helper()
	c := &tlsCluster{files: writeTLSFiles(t), user: "wbuser", pass: "wbuser-pw"}
	var buses []string
	for range 3 {
		addr := freeLoopback(t)
		_, port, _ := net.SplitHostPort(addr)
		_, bus, _ := net.SplitHostPort(freeLoopback(t))
		dir := t.TempDir()
		startServer(t, addr, "redis-server as a TLS cluster node", "--port", "0", "--tls-port", port, "--bind", "127.0.0.1",
			"--tls-cert-file", c.files.serverCert, "--tls-key-file", c.files.serverKey, "--tls-ca-cert-file", c.files.ca,
			"--tls-auth-clients", "yes", "--tls-cluster", "yes", "--tls-client-cert-file", c.files.clientCert, "--tls-client-key-file", c.files.clientKey,
			"--cluster-enabled", "yes", "--cluster-port", bus, "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--requirepass", "admin-pw", "--user", c.user, "on", ">"+c.pass, "~*", "&*", "+@all",
			"--save", "", "--appendonly", "no", "--dir", dir)
		c.addrs, buses = append(c.addrs, addr), append(buses, bus)
	}
	// The cluster is formed by hand: redis-cli 7.0's --cluster create
	// meets the nodes without their bus ports (--cluster-port).
	ctx := context.Background()
	for i, addr := range c.addrs {
		node := c.node(t, addr)
		lo, hi := i*16384/3, (i+1)*16384/3-1
		if err := node.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", addr, err)
		}
		if err := node.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("CLUSTER SET-CONFIG-EPOCH on %s: %v", addr, err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(addr)
			if err := c.node(t, c.addrs[0]).Do(ctx, "CLUSTER", "MEET", host, port, buses[i]).Err(); err != nil {
				t.Fatalf("CLUSTER MEET %s: %v", addr, err)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range c.addrs {
		node := c.node(t, addr)
		for {
			info, err := node.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok within 20 s: %v\n%s", addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// node is a TLS client of one node, as the admin (default user).
func (c *tlsCluster) node(t *testing.T, addr string) *redis.Client {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(c.files.clientCert, c.files.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(c.files.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: "admin-pw",
		TLSConfig: &tls.Config{ServerName: "localhost", RootCAs: pool, Certificates: []tls.Certificate{pair}}})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// config is the fixture's configuration on the cluster as its ACL user.
func (c *tlsCluster) config(t *testing.T, f *fixture) *config.Config {
	cfg := f.config(t)
	cfg.Redis.Mode, cfg.Redis.Addrs = config.ModeCluster, c.addrs
	cfg.Redis.Username, cfg.Redis.Password = c.user, c.pass
	cfg.Redis.TLS = config.RedisTLS{Enabled: true, CAFile: c.files.ca, CertFile: c.files.clientCert, KeyFile: c.files.clientKey, ServerName: "localhost"}
	cfg.Redis.DialTimeout = config.Duration{Duration: time.Second}
	return cfg
}

// Redis Cluster with TLS and an ACL user (issue 16, exposure): the sidecar
// serves through redis.tls and redis.username/password on every node, and
// refuses to start with a wrong password or without TLS, naming the
// settings. Memory over time (issue 16, item 6): every primary of the
// cluster is re-checked periodically, not only the one first dialled — a
// CONFIG SET on the last primary to an allkeys-* policy and a maxmemory
// below writeback.pinnedMemoryLimit is noticed within the 30 s check:
// writeback_redis_eviction_unsafe 1, write-back collections fall back to
// write-through, and /v1/status warns about the limit; the same check
// finds no rollback (other deployments' applied records in the shared
// database are not this cluster's floors).
func TestRedisClusterTLSAndACL(t *testing.T) {
	f := newFixture(t)
	c := startTLSCluster(t)

	t.Run("a wrong password", func(t *testing.T) {
		cfg := c.config(t, f)
		cfg.Redis.Password = "not-" + c.pass
		msg := newFailure(t, cfg)
		for _, want := range []string{"cluster mode", "refused the sidecar's credentials", "fix redis.username and redis.password"} {
			if !strings.Contains(msg, want) {
				t.Errorf("New: %q; want it to contain %q", msg, want)
			}
		}
		if strings.Contains(msg, c.pass) {
			t.Errorf("New: %q quotes the password", msg)
		}
	})
	t.Run("TLS off", func(t *testing.T) {
		cfg := c.config(t, f)
		cfg.Redis.TLS = config.RedisTLS{}
		msg := newFailure(t, cfg)
		for _, want := range []string{"cannot reach Redis (cluster mode", "redis.tls.enabled"} {
			if !strings.Contains(msg, want) {
				t.Errorf("New: %q; want it to contain %q", msg, want)
			}
		}
	})
	t.Run("serves, and re-checks every primary's memory", func(t *testing.T) {
		r := run(t, c.config(t, f))
		writeAndRead(t, r, f)
		for id := 10; id < 26; id++ { // spread over the partitions, so over the nodes
			if code := r.call(t, "PUT", "/v1/docs/"+f.table+"/"+strconv.Itoa(id), `{"n":1}`, nil); code != http.StatusOK {
				t.Fatalf("PUT %d: %d", id, code)
			}
		}
		holding := 0
		for _, addr := range c.addrs {
			if n, err := c.node(t, addr).DBSize(context.Background()).Result(); err == nil && n > 0 {
				holding++
			}
		}
		if holding < 2 {
			t.Errorf("the sidecar's keys are on %d of 3 primaries; the cluster was not exercised", holding)
		}
		// A flush reads the partitions' batches (cuts: one transaction per
		// partition, on its primary) and drains them.
		res, err := client.New(r.url).Flush(context.Background(), 20*time.Second)
		if err != nil || !res.Drained || r.status(t).Pending != 0 {
			t.Fatalf("flush on the cluster: %+v, %v, %d pending; want drained", res, err, r.status(t).Pending)
		}
		if got := r.metric(t, "writeback_redis_eviction_unsafe"); got != 0 {
			t.Fatalf("writeback_redis_eviction_unsafe = %v on noeviction primaries; want 0", got)
		}

		last := c.node(t, c.addrs[2])
		ctx := context.Background()
		if err := last.ConfigSet(ctx, "maxmemory", "64mb").Err(); err != nil {
			t.Fatal(err)
		}
		if err := last.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { last.ConfigSet(context.Background(), "maxmemory-policy", "noeviction") })
		poll(t, 45*time.Second, "the last primary's allkeys-lru to be noticed by the periodic check", func() bool {
			return r.metric(t, "writeback_redis_eviction_unsafe") == 1
		})
		poll(t, 5*time.Second, "the write-back collection to fall back to write-through", func() bool {
			for _, col := range r.status(t).Collections {
				if col.Name == f.table {
					return col.WriteThroughFallback
				}
			}
			return false
		})
		// The same 30 s check looked for a rollback on every primary: none
		// happened, whatever other tests applied in the shared database.
		if got := r.metric(t, "writeback_redis_rollbacks_total"); got != 0 {
			t.Errorf("writeback_redis_rollbacks_total = %v on a cluster that never rolled back; want 0", got)
		}
		// The check sets the eviction metric before it warns (and a new
		// connection's check sets only the metric): wait for the warning.
		poll(t, 45*time.Second, "a status warning naming pinnedMemoryLimit over the last primary's 64 MiB maxmemory", func() bool {
			w := strings.Join(r.status(t).Warnings, "\n")
			return strings.Contains(w, "pinnedMemoryLimit") && strings.Contains(w, "67108864")
		})
	})
}
