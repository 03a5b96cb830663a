package bg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/writeback/writeback/pkg/client"
	"github.com/writeback/writeback/pkg/writeback"
)

// sidecarConn runs the actions through a sidecar's HTTP API, or the same
// calls of an embedded member: a member is a document (GET), an update a
// PATCH with $push and $pull on its friends and pending arrays (MongoDB
// fields, or PostgreSQL jsonb columns).
type sidecarConn struct {
	c    writeback.Documents
	coll string
	many bool          // List reads the profiles with one GetMany
	proj *writeback.DB // embedded: reads project the fields an action shows
}

// NewSidecarConn returns a Conn of collection coll that c (a sidecar's
// HTTP client, or an embedded member) serves.
func NewSidecarConn(c writeback.Documents, coll string) Conn { return &sidecarConn{c: c, coll: coll} }

// NewEmbeddedConn returns a Conn of collection coll that an embedded member
// serves. It reads the profiles a list shows with one GetMany, as the
// database policies read them with one query: an application in the
// member's process would, the hits costing no round trip and the misses
// one between them.
//
// Its reads take the fields an action shows as their JSON texts
// (DB.GetValues, embedded.go): a profile and its lists, a member's list,
// the profiles of a list — as the database policies select only those
// columns — so that the application decodes no more of a document than it
// needs, and nothing is encoded for it to decode.
func NewEmbeddedConn(db *writeback.DB, coll string) Conn {
	return &sidecarConn{c: db, coll: coll, many: true, proj: db}
}

// countedFields are what viewing a profile reads: the profile and the
// lists it counts.
var countedFields = append(append([]string{}, ProfileFields...), Friends.String(), Pending.String())

func (c *sidecarConn) get(ctx context.Context, m int32) (*memberDoc, error) {
	id := ID(m)
	raw, _, err := c.c.Get(ctx, c.coll, id)
	if err != nil {
		return nil, fmt.Errorf("bg: reading %s: %w", id, err)
	}
	var d memberDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("bg: decoding %s: %w", id, err)
	}
	return &d, d.checkProfile(id)
}

// getProfile reads and checks a member's profile.
func (c *sidecarConn) getProfile(ctx context.Context, m int32) error {
	id := ID(m)
	raw, _, err := c.c.Get(ctx, c.coll, id)
	if err != nil {
		return fmt.Errorf("bg: reading %s: %w", id, err)
	}
	var d profileDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("bg: decoding %s: %w", id, err)
	}
	return d.checkProfile(id)
}

func (c *sidecarConn) Profile(ctx context.Context, m int32) (int, int, error) {
	if c.proj != nil {
		return c.embeddedProfile(ctx, m)
	}
	id := ID(m)
	raw, _, err := c.c.Get(ctx, c.coll, id)
	if err != nil {
		return 0, 0, fmt.Errorf("bg: reading %s: %w", id, err)
	}
	var d countedDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return 0, 0, fmt.Errorf("bg: decoding %s: %w", id, err)
	}
	if err := d.checkProfile(id); err != nil {
		return 0, 0, err
	}
	return int(d.Friends), int(d.Pending), nil
}

// List reads the member, then the profiles it shows: concurrently over
// HTTP, as ten reads one after the other would cost ten round trips; with
// one multi-read embedded (NewEmbeddedConn).
func (c *sidecarConn) List(ctx context.Context, m int32, l List, n int) (int, []int32, error) {
	if c.proj != nil {
		return c.embeddedList(ctx, m, l, n)
	}
	d, err := c.get(ctx, m)
	if err != nil {
		return 0, nil, err
	}
	list := d.list(l)
	shown, err := parseIDs(list[:min(n, len(list))])
	if err != nil {
		return 0, nil, err
	}
	if c.many {
		return len(list), shown, c.getMany(ctx, shown)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, x := range shown {
		g.Go(func() error { return c.getProfile(gctx, x) })
	}
	if err := g.Wait(); err != nil {
		return 0, nil, err
	}
	return len(list), shown, nil
}

// getMany reads and checks the profiles of ms in one call.
func (c *sidecarConn) getMany(ctx context.Context, ms []int32) error {
	if len(ms) == 0 {
		return nil
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = ID(m)
	}
	docs, err := c.c.GetMany(ctx, c.coll, ids)
	if err != nil {
		return fmt.Errorf("bg: reading %d profiles: %w", len(ids), err)
	}
	for i, raw := range docs {
		if raw == nil {
			return fmt.Errorf("bg: the profile %s does not exist", ids[i])
		}
		var d profileDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("bg: decoding %s: %w", ids[i], err)
		}
		if err := d.checkProfile(ids[i]); err != nil {
			return err
		}
	}
	return nil
}

// patchBody is u as update operators:
// {"$push":{"friends":"m0000012"},"$pull":{"pending":"m0000012"}}.
func patchBody(u Update) json.RawMessage {
	var push, pull []string
	for _, op := range u.Ops {
		kv := `"` + op.List.String() + `":"` + ID(op.X) + `"`
		if op.Add {
			push = append(push, kv)
		} else {
			pull = append(pull, kv)
		}
	}
	var parts []string
	if len(push) > 0 {
		parts = append(parts, `"$push":{`+strings.Join(push, ",")+`}`)
	}
	if len(pull) > 0 {
		parts = append(parts, `"$pull":{`+strings.Join(pull, ",")+`}`)
	}
	return json.RawMessage("{" + strings.Join(parts, ",") + "}")
}

// Update PATCHes the member; a 409 (the patch lost its cache-fill race 16
// times) is retried after a short backoff, as an application would.
func (c *sidecarConn) Update(ctx context.Context, u Update) error {
	body := patchBody(u)
	id := ID(u.M)
	backoff := time.Millisecond
	for {
		_, err := c.c.Patch(ctx, c.coll, id, body)
		if !client.IsAborted(err) {
			if err != nil {
				return fmt.Errorf("bg: updating %s: %w", id, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bg: updating %s: %w", id, errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

func (c *sidecarConn) Close() error { return nil }

var _ Conn = (*sidecarConn)(nil)
