package document

// Renewals: the leases of the near cache's copies being read are renewed
// before they expire, in the background and in batches.

import (
	"context"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/nearcache"
)

// renewQueue bounds the leases asked for after local writes, and the
// releases, waiting for their goroutines.
const renewQueue = 4096

// keepIdle is how many lease periods in a row a copy nobody read is leased
// again (nearcache.Cache.KeepIdle): a document read about once in two
// lease periods stays served from the near cache, at the price of one
// renewal, in a batch, per period.
const keepIdle = 1

// renewer leases again, in batches of up to maxRenew per round trip, the
// documents whose copies come within the last quarter of their lease and
// were read during it (nearcache.Cache.Due), so that a document being read
// is served from the near cache without a gap — extending the copies'
// leases (extend), which reads no value again — and the documents this
// sidecar just wrote (beginWrite), whose values it reads again.
func (s *Service) renewer(c *Collection) {
	const maxRenew = 256
	window := c.near.cfg.LeaseTTL / 4
	tick := time.NewTicker(max(window/4, 10*time.Millisecond))
	defer tick.Stop()
	refs := make([]Ref, 0, maxRenew)
	is := make([]int, 0, maxRenew)
	ids := make([]string, 0, maxRenew)
	for {
		ids = ids[:0]
		select {
		case <-tick.C:
		case id := <-c.near.renew:
			ids = append(ids, id)
		more:
			for len(ids) < maxRenew {
				select {
				case id := <-c.near.renew:
					ids = append(ids, id)
				default:
					break more
				}
			}
		case <-s.near.stop:
			return
		}
		// ids holds documents just written (read again) or nothing; then
		// the due copies, until none is left, are extended, and those that
		// cannot be are read again.
		for {
			due := len(ids) == 0
			if due {
				if ids = c.near.cache.Due(window, maxRenew, ids); len(ids) == 0 {
					break
				}
				ids = s.extend(c, ids)
			}
			if len(ids) > 0 {
				refs, is = refs[:0], is[:0]
				for i, id := range ids {
					refs, is = append(refs, Ref{Coll: c, ID: id}), append(is, i)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				s.leaseMany(ctx, refs, is, func(int, *nearcache.Entry, Hash, error) {}, false, true)
				cancel()
			}
			ids = ids[:0]
		}
	}
}

// extend extends the leases of the copies of ids (the due ones) that this
// sidecar still holds, in one round trip, without reading their values
// again (buffer.ExtendLeases), and returns — reusing ids — those to lease
// again with their values: no copy held, or its lease no longer the
// copy's (the document was written since).
func (s *Service) extend(c *Collection, ids []string) []string {
	n := c.near
	reqs := make([]buffer.NearExtend, 0, len(ids))
	olds := make([]*nearcache.Entry, 0, len(ids))
	tickets := make([]nearcache.Ticket, 0, len(ids))
	rest := ids[:0]
	for _, id := range ids {
		old, ok := n.cache.Peek(id)
		if !ok {
			rest = append(rest, id)
			continue
		}
		olds, tickets = append(olds, old), append(tickets, n.cache.Ticket(id))
		reqs = append(reqs, buffer.NearExtend{Coll: c.Name, ID: id, Gen: old.Gen, NewGen: s.near.gen.Add(1), TTL: n.cfg.LeaseTTL})
	}
	if len(reqs) == 0 {
		return rest
	}
	// As a grant's: ticket and send time before the request.
	sent := nearcache.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	res, err := s.buf.ExtendLeases(ctx, reqs)
	cancel()
	if err != nil {
		return rest // the copies keep their deadlines; Due offers them no more
	}
	for k, r := range reqs {
		ref := Ref{Coll: c, ID: r.ID}
		switch res[k] {
		case 0:
			rest = append(rest, r.ID)
		case buffer.LeaseGranted:
			e := nearcache.NewEntry(olds[k].Hash, r.NewGen, sent+int64(n.cfg.LeaseTTL-LeaseMargin))
			if !n.cache.Install(tickets[k], e) {
				n.refuse.Inc()
				s.releaseLater(ref, r.NewGen)
				continue
			}
			n.extended.Inc()
		case buffer.LeaseUnconfirmed:
			n.leases[buffer.LeaseUnconfirmed].Inc()
			s.releaseLater(ref, r.NewGen)
		default: // LeaseRevoking: the revocation drops the copy
			n.leases[res[k]].Inc()
		}
	}
	return rest
}
