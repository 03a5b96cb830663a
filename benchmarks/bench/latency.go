package bench

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// LatencyProxy is a TCP proxy on a free loopback port that delays every
// byte by a fixed time in each direction: Shopify's toxiproxy, run
// in-process as a library, with a latency toxic on its upstream and on its
// downstream stream. It stands for a store on another machine: a request
// and its answer each take the delay, so a round trip takes twice it more.
type LatencyProxy struct {
	Addr  string        // where clients connect: 127.0.0.1:<port>
	Delay time.Duration // added in each direction

	proxy *toxiproxy.Proxy
}

// StartLatencyProxy starts a proxy to upstream (host:port) adding delay in
// each direction. Toxiproxy's latency toxic counts whole milliseconds, so
// the delay must be a positive whole number of them.
func StartLatencyProxy(upstream string, delay time.Duration) (*LatencyProxy, error) {
	if err := ValidateLatency(delay); err != nil {
		return nil, err
	}
	if delay == 0 {
		return nil, fmt.Errorf("a latency proxy needs a delay above 0")
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "store", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("starting the latency proxy to %s: %w", upstream, err)
	}
	ms := delay.Milliseconds()
	for _, stream := range []string{"upstream", "downstream"} {
		spec := fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":%q,"attributes":{"latency":%d}}`, stream, stream, ms)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			p.Stop()
			return nil, fmt.Errorf("adding the %s latency toxic: %w", stream, err)
		}
	}
	return &LatencyProxy{Addr: p.Listen, Delay: delay, proxy: p}, nil
}

// Close stops the proxy and closes its connections.
func (p *LatencyProxy) Close() { p.proxy.Stop() }

// ValidateLatency explains, in one sentence, why d cannot be a store
// latency: negative, or not a whole number of milliseconds. Zero (no
// proxy) is valid.
func ValidateLatency(d time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("store latency %v is negative; use 0 (no proxy) or a whole number of milliseconds", d)
	case d%time.Millisecond != 0:
		return fmt.Errorf("store latency %v is not a whole number of milliseconds, which is what toxiproxy's latency toxic counts", d)
	}
	return nil
}

// StoreAddr is the host:port a store's DSN (MongoDB: URI) connects to.
func StoreAddr(driver, dsn string) (string, error) {
	if driver == "mysql" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return "", fmt.Errorf("the MySQL DSN %q: %v", dsn, err)
		}
		if cfg.Net != "tcp" {
			return "", fmt.Errorf("the MySQL DSN %q does not use TCP; a latency proxy needs tcp(host:port)", dsn)
		}
		return cfg.Addr, nil
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("the DSN %q is not a URL with a host; write it as scheme://user@host:port/db", dsn)
	}
	if strings.Contains(u.Host, ",") {
		return "", fmt.Errorf("the DSN %q names several hosts; a latency proxy stands for one", dsn)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		port := map[string]string{"postgres": "5432", "mongodb": "27017"}[driver]
		return net.JoinHostPort(u.Hostname(), port), nil
	}
	return u.Host, nil
}

// WithStoreAddr returns the DSN (MongoDB: URI) with its host:port replaced
// by addr, everything else kept.
func WithStoreAddr(driver, dsn, addr string) (string, error) {
	if _, err := StoreAddr(driver, dsn); err != nil {
		return "", err
	}
	if driver == "mysql" {
		cfg, _ := mysql.ParseDSN(dsn)
		cfg.Addr = addr
		return cfg.FormatDSN(), nil
	}
	u, _ := url.Parse(dsn)
	u.Host = addr
	if driver == "mongodb" {
		// The driver would otherwise discover the server under the name
		// it gives itself and connect there, around the proxy.
		q := u.Query()
		q.Set("directConnection", "true")
		u.RawQuery = q.Encode()
		if u.Path == "" {
			u.Path = "/"
		}
	}
	return u.String(), nil
}
