package sidecar

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/config"
)

// NewRespClient returns a ycsb.Client speaking the Redis protocol to the
// sidecar's front door (Options.ListenResp) with go-redis v9 on a
// connection of its own: read = HGETALL <collection>/<key>, update = HSET
// of the field (of every field, for ycsb.RecordUpdater). The front door has
// no scan, so the client is no ycsb.Scanner. A TRYAGAIN answer (the HTTP
// API's 409) is retried after a short backoff.
func (s *Sidecar) NewRespClient(fields int) (ycsb.Client, error) {
	addr := s.RespAddr()
	if addr == "" {
		return nil, errors.New("the sidecar has no Redis-protocol front door; set Options.ListenResp")
	}
	names := make([]string, fields)
	for i := range names {
		names[i] = ycsb.FieldName(i)
	}
	network := "tcp"
	if path, ok := config.UnixSocket(addr); ok {
		network, addr = "unix", path
	}
	rdb := redis.NewClient(&redis.Options{Network: network, Addr: addr, PoolSize: 1, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	return &respClient{rdb: rdb, coll: s.coll, names: names}, nil
}

type respClient struct {
	rdb   *redis.Client
	coll  string
	names []string
}

func (c *respClient) docKey(key string) string { return c.coll + "/" + key }

func (c *respClient) Read(ctx context.Context, key string, decode bool) (ycsb.Row, error) {
	m, err := c.rdb.HGetAll(ctx, c.docKey(key)).Result()
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("HGETALL %s: no such document", c.docKey(key))
	}
	if !decode {
		return nil, nil
	}
	row := make(ycsb.Row, len(c.names))
	for i, n := range c.names {
		row[i] = m[n]
	}
	return row, nil
}

func (c *respClient) Update(ctx context.Context, key string, field int, value string) error {
	return c.hset(ctx, key, c.names[field], value)
}

func (c *respClient) UpdateRecord(ctx context.Context, key string, row ycsb.Row) error {
	args := make([]any, 0, 2*len(row))
	for i, v := range row {
		args = append(args, c.names[i], v)
	}
	return c.hset(ctx, key, args...)
}

// hset sets fields of an existing document. HSET would create a missing
// one, which an update must not: the workload only updates loaded records,
// and HSET's reply (the fields that were absent) tells a creation apart.
func (c *respClient) hset(ctx context.Context, key string, fieldValues ...any) error {
	return retry(ctx, func() (bool, error) {
		n, err := c.rdb.HSet(ctx, c.docKey(key), fieldValues...).Result()
		if err == nil && n != 0 {
			return false, fmt.Errorf("HSET %s: %d fields were absent; the document did not exist", c.docKey(key), n)
		}
		return err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN"), err
	})
}

func (c *respClient) Close() error { return c.rdb.Close() }

var (
	_ ycsb.Client        = (*respClient)(nil)
	_ ycsb.RecordUpdater = (*respClient)(nil)
)
