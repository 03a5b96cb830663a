package buffer

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CheckEvictionPolicy refuses a Redis whose maxmemory-policy could evict
// pinned keys (allkeys-*). It returns a warning when the policy cannot be
// read (CONFIG disabled).
func CheckEvictionPolicy(ctx context.Context, rdb redis.Cmdable) (warning string, err error) {
	res, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		return fmt.Sprintf("cannot read Redis maxmemory-policy (%v); make sure it is noeviction or volatile-*, or buffered writes may be evicted", err), nil
	}
	policy := res["maxmemory-policy"]
	if strings.HasPrefix(policy, "allkeys-") {
		return "", fmt.Errorf("redis maxmemory-policy is %s, which can evict buffered writes; set it to noeviction or a volatile-* policy (CONFIG SET maxmemory-policy noeviction)", policy)
	}
	return "", nil
}

// MemoryConfig is what a Redis node says of its memory: its maxmemory (0:
// none) and its eviction policy.
type MemoryConfig struct {
	MaxMemory int64
	Policy    string
}

// Evicts reports whether the policy may evict pinned keys (allkeys-*).
func (m MemoryConfig) Evicts() bool { return strings.HasPrefix(m.Policy, "allkeys-") }

// ReadMemoryConfig reads node's maxmemory and maxmemory-policy.
func ReadMemoryConfig(ctx context.Context, node redis.Cmdable) (MemoryConfig, error) {
	res, err := node.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		return MemoryConfig{}, fmt.Errorf("buffer: reading Redis maxmemory: %w", err)
	}
	mc := MemoryConfig{Policy: res["maxmemory-policy"]}
	mc.MaxMemory, _ = strconv.ParseInt(res["maxmemory"], 10, 64)
	return mc, nil
}
