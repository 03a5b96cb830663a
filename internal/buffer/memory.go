package buffer

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CheckEvictionPolicy refuses a Redis whose maxmemory-policy could evict
// pinned keys (allkeys-*). It returns a warning when the policy cannot be
// read (CONFIG disabled).
func CheckEvictionPolicy(ctx context.Context, rdb redis.UniversalClient) (warning string, err error) {
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
