// Package server assembles a sidecar from its configuration: the Redis
// client, the stores, the buffer, the appliers, the document service, the
// sessions, the HTTP API and the Redis-protocol front door, and runs them
// until its context ends, then shuts them down in order (stop accepting,
// finish in-flight requests, release ownership). Core and Sessions are the
// parts an embedded member (pkg/writeback) assembles too.
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/api"
	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/resp"
)

// Version and Commit are reported by /v1/status and writeback_build_info;
// the CLI sets them from the build.
var (
	Version = "dev"
	Commit  = "unknown"
)

// Server is a running sidecar: a Core behind the front doors.
type Server struct {
	*Core
	http    *http.Server
	ln      net.Listener
	resp    *resp.Server // nil when listenResp is empty
	respLn  net.Listener
	debug   *http.Server // nil when debugListen is empty
	debugLn net.Listener
	sess    *Sessions // Design 2: sessions, queues, mappings
}

// New assembles the sidecar's Core (NewCore), its sessions and front
// doors, and binds their listeners. Errors are one sentence saying what to
// fix.
func New(ctx context.Context, cfg *config.Config, reg *prometheus.Registry, log *slog.Logger) (_ *Server, err error) {
	core, err := NewCore(ctx, cfg, reg, log)
	if err != nil {
		return nil, err
	}
	s := &Server{Core: core}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	wb := cfg.Writeback
	if s.sess, err = NewSessions(ctx, core, reg); err != nil {
		return nil, err
	}
	h := api.New(api.Options{
		Token:        cfg.Auth.Token,
		AdminToken:   cfg.Auth.AdminToken,
		MaxBodyBytes: int64(cfg.Limits.MaxBodyBytes),
		Version:      Version,
		InstanceID:   wb.InstanceID,
		Stores:       s.stores,
		Warnings:     s.currentWarnings,
	}, s.svc, s.app, s.buf, s.m, reg, log)
	s.sess.register(h)
	s.http = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout.Duration,
		ReadTimeout:       cfg.HTTP.ReadTimeout.Duration,
		WriteTimeout:      cfg.HTTP.WriteTimeout.Duration,
		IdleTimeout:       cfg.HTTP.IdleTimeout.Duration,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s.ln, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %v; choose a free address with --listen", cfg.Listen, err)
	}
	if cfg.ListenResp != "" {
		s.resp = resp.New(resp.Options{
			Token:           cfg.Auth.Token,
			MaxCommandBytes: int64(cfg.Limits.MaxBodyBytes),
			MaxConnections:  cfg.Resp.MaxConnections,
			WriteTimeout:    cfg.Resp.WriteTimeout.Duration,
			Version:         Version,
			InstanceID:      wb.InstanceID,
		}, s.svc, s.buf, s.app, s.m, log)
		perm, setPerm := cfg.Resp.SocketPerm()
		s.respLn, err = listen(cfg.ListenResp, perm, setPerm)
		if err != nil {
			fix := "choose a free address with --listen-resp"
			if _, unix := config.UnixSocket(cfg.ListenResp); unix {
				fix = "choose another path with --listen-resp (its directory must exist and be writable)"
			}
			return nil, fmt.Errorf("listenResp %s: %v; %s, or disable the Redis-protocol front door with --listen-resp=\"\"", cfg.ListenResp, err, fix)
		}
	}
	if cfg.DebugListen != "" {
		s.debug = &http.Server{Handler: debugHandler(cfg.Auth.AdminToken), ReadHeaderTimeout: 10 * time.Second}
		s.debugLn, err = net.Listen("tcp", cfg.DebugListen)
		if err != nil {
			return nil, fmt.Errorf("debugListen %s: %v; choose a free loopback address with --debug-listen, or disable profiling with --debug-listen=\"\"", cfg.DebugListen, err)
		}
	}
	return s, nil
}

// DebugAddr returns the profiling listener's address ("" when off).
func (s *Server) DebugAddr() string {
	if s.debugLn == nil {
		return ""
	}
	return s.debugLn.Addr().String()
}

// rollbackCheckEvery is how often the sidecar checks, besides on every new
// connection, that Redis holds no older data than the stores applied.
const rollbackCheckEvery = 30 * time.Second

// replicaTimeout bounds how long a write waits for its replicas (WAIT).
const replicaTimeout = 2 * time.Second

// noRetries turns off go-redis's own retries. It resends a command whose
// reply did not arrive in time — and a write script that ran but whose
// reply was late (a sidecar paused past the read deadline, a slow network)
// would then be buffered twice: an $inc applied twice. The front doors'
// error classes tell clients what is safe to retry instead.
const noRetries = -1

// newRedis returns the client for the configured mode: one server, a
// Sentinel-managed primary (failover is Redis's own; the client follows the
// new primary), or a Redis Cluster (every script's keys share a hash tag).
// Every mode gets the ACL user, password and TLS; sentinel mode also the
// sentinels' own user and password.
func newRedis(c config.Redis, onConnect func(context.Context, *redis.Conn) error) (redis.UniversalClient, error) {
	tc, err := redisTLS(c.TLS)
	if err != nil {
		return nil, err
	}
	switch c.Mode {
	case config.ModeSentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: c.MasterName, SentinelAddrs: c.Addrs,
			SentinelUsername: c.SentinelUsername, SentinelPassword: c.SentinelPassword,
			Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: tc,
			DialTimeout: c.DialTimeout.Duration, PoolSize: c.PoolSize, MaxRetries: noRetries,
			OnConnect: onConnect,
		}), nil
	case config.ModeCluster:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: c.Addrs, Username: c.Username, Password: c.Password, TLSConfig: tc,
			DialTimeout: c.DialTimeout.Duration, PoolSize: c.PoolSize, MaxRetries: noRetries,
			OnConnect: onConnect,
		}), nil
	}
	return redis.NewClient(&redis.Options{
		Addr: c.Addrs[0], Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: tc,
		DialTimeout: c.DialTimeout.Duration, PoolSize: c.PoolSize, MaxRetries: noRetries,
		OnConnect: onConnect,
	}), nil
}

// redisTLS builds the TLS configuration of redis.tls; nil when TLS is off.
func redisTLS(t config.RedisTLS) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // insecureSkipVerify is the operator's explicit choice
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.caFile: %v; give the path of a PEM CA bundle", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis.tls.caFile: %s holds no PEM certificate; give a PEM CA bundle", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.certFile: the client certificate and key cannot be loaded (%v); give PEM files of one key pair", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// redisRefused explains a failed first ping: refused credentials, or
// Redis not reachable. In sentinel mode go-redis reports only that no
// sentinel answered, so it asks the sentinels itself for their reason.
func redisRefused(ctx context.Context, c config.Redis, err error) error {
	msg := err.Error()
	if c.Mode == config.ModeSentinel {
		tc, _ := redisTLS(c.TLS) // it loaded once already
		for _, addr := range c.Addrs {
			sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: c.SentinelUsername, Password: c.SentinelPassword,
				TLSConfig: tc, DialTimeout: c.DialTimeout.Duration, MaxRetries: -1})
			serr := sc.Ping(ctx).Err()
			_ = sc.Close()
			if serr != nil {
				msg = "sentinel " + addr + ": " + serr.Error()
				break
			}
		}
	}
	for _, auth := range []string{"WRONGPASS", "NOAUTH", "invalid password", "invalid username-password", "NOPERM"} {
		if strings.Contains(msg, auth) {
			fix := "redis.username and redis.password (WRITEBACK_REDIS_PASSWORD)"
			if c.Mode == config.ModeSentinel {
				fix += ", or the sentinels' redis.sentinelUsername and redis.sentinelPassword"
			}
			return fmt.Errorf("Redis (%s mode, %s) refused the sidecar's credentials (%s); fix %s", c.Mode, strings.Join(c.Addrs, ","), document.OneLine(msg), fix)
		}
	}
	hint := "start it or fix redis.addrs"
	if c.TLS.Enabled {
		hint += " and redis.tls"
	} else if strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset") {
		hint += ", or set redis.tls.enabled if it only speaks TLS"
	}
	return fmt.Errorf("cannot reach Redis (%s mode, %s): %s; %s", c.Mode, strings.Join(c.Addrs, ","), document.OneLine(msg), hint)
}

func storeUsed(cfg *config.Config, name string) bool {
	for _, c := range cfg.Collections {
		if c.Store == name {
			return true
		}
	}
	for _, q := range cfg.Queues {
		if q.Store == name {
			return true
		}
	}
	for _, m := range mappingStores(cfg.Mappings) {
		if m == name {
			return true
		}
	}
	return false
}

func dsnOf(sc config.Store) string {
	if sc.DSN != "" {
		return sc.DSN
	}
	return sc.URI
}

// Addr is the address the API listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// RespAddr is the address the Redis-protocol front door listens on,
// host:port or unix:<path>; "" when it is disabled.
func (s *Server) RespAddr() string {
	if s.respLn == nil {
		return ""
	}
	return listenAddr(s.respLn)
}

// Run serves until ctx is done, then shuts down gracefully: the listener
// stops accepting, in-flight requests finish (up to 10 s), the appliers
// finish their batch and release their partitions, connections close.
func (s *Server) Run(ctx context.Context) error {
	appCtx, stopApp := context.WithCancel(context.Background())
	defer stopApp()
	var wg sync.WaitGroup
	s.Start(appCtx, &wg, true)
	s.sess.Run(appCtx, &wg, true)
	errc := make(chan error, 2)
	go func() { errc <- s.http.Serve(s.ln) }()
	if s.resp != nil {
		go func() { errc <- s.resp.Serve(s.respLn) }()
	}
	if s.debug != nil {
		go func() {
			if err := s.debug.Serve(s.debugLn); !errors.Is(err, http.ErrServerClosed) {
				s.log.Warn("the profiling listener stopped", "err", err)
			}
		}()
	}
	s.log.Info("writeback serving", "addr", s.Addr(), "resp", s.RespAddr(), "instance", s.cfg.Writeback.InstanceID, "collections", len(s.cfg.Collections))

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	// Both front doors stop accepting and finish what they have read, at
	// the same time and within the same 10 s; then the appliers stop.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var down sync.WaitGroup
	down.Add(1)
	go func() {
		defer down.Done()
		_ = s.http.Shutdown(sctx)
	}()
	if s.resp != nil {
		down.Add(1)
		go func() {
			defer down.Done()
			_ = s.resp.Shutdown(sctx)
		}()
	}
	down.Wait()
	stopApp()
	wg.Wait()
	s.close()
	s.log.Info("writeback stopped")
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, resp.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) close() {
	s.sess.Close()
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.respLn != nil {
		_ = s.respLn.Close()
	}
	if s.debug != nil {
		_ = s.debug.Close()
	}
	if s.debugLn != nil {
		_ = s.debugLn.Close()
	}
	s.Core.close()
}
