package buffer

// Membership tokens: one per partition, a random value that changes
// whenever the partition's set of existing documents may have changed, so
// that a scan can tell whether a range it listed before still holds the
// same documents without asking the store.

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// MembershipTokens returns every partition's membership token, in one
// round trip when they all exist. A partition's token is deleted in the
// same atomic step as anything that may change which of its documents
// exist: every buffered put or delete (writeScript), a rejected prefix
// (deadScript), a rollback (CheckRollback). A missing token — deleted, or
// evicted, or never created — is created here with a fresh random value;
// SET NX GET makes concurrent callers agree on it. Tokens never repeat, so
// two reads that return the same token for a partition saw no change of
// its membership between them.
//
// It needs Redis 7.0 or later (SET with both NX and GET); on older servers
// it returns an error and callers scan without tokens.
func (b *Buffer) MembershipTokens(ctx context.Context) ([]string, error) {
	toks, err := b.readMembers(ctx)
	if err != nil {
		return nil, err
	}
	var missing []int
	for p, t := range toks {
		if t == "" {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return toks, nil
	}
	pipe := b.rdb.Pipeline()
	sets := make([]*redis.StatusCmd, len(missing))
	for i, p := range missing {
		tok, err := newMembersToken()
		if err != nil {
			return nil, err
		}
		toks[p] = tok
		sets[i] = pipe.SetArgs(ctx, b.membersKey(p), tok, redis.SetArgs{Mode: "NX", Get: true})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: creating membership tokens: %w", err)
	}
	for i, p := range missing {
		// Nil: this call's token was set. A value: a concurrent caller set
		// its own first, and both go by it.
		if old, err := sets[i].Result(); err == nil {
			toks[p] = old
		}
	}
	return toks, nil
}

// newMembersToken returns a fresh membership token: 16 random bytes, hex.
// Unlike I-lease tokens they must never repeat across processes and
// restarts (a repeated token would let a stale scan pass for current), so
// they come from crypto/rand; they are created only after a put or delete.
func newMembersToken() (string, error) {
	var t [16]byte
	if _, err := crand.Read(t[:]); err != nil {
		return "", fmt.Errorf("buffer: membership token: %w", err)
	}
	return hex.EncodeToString(t[:]), nil
}

// readMembers reads every partition's membership token, "" for a missing
// one: one MGET on a single server (one command, not one per partition),
// a pipeline of GETs in a Cluster, whose partitions live in many slots.
func (b *Buffer) readMembers(ctx context.Context) ([]string, error) {
	toks := make([]string, b.parts)
	if _, cluster := b.rdb.(*redis.ClusterClient); !cluster {
		keys := make([]string, b.parts)
		for p := range b.parts {
			keys[p] = b.membersKey(p)
		}
		vals, err := b.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("buffer: membership tokens: %w", err)
		}
		for p, v := range vals {
			toks[p], _ = v.(string)
		}
		return toks, nil
	}
	pipe := b.rdb.Pipeline()
	gets := make([]*redis.StringCmd, b.parts)
	for p := range b.parts {
		gets[p] = pipe.Get(ctx, b.membersKey(p))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: membership tokens: %w", err)
	}
	for p, c := range gets {
		toks[p] = c.Val()
	}
	return toks, nil
}
