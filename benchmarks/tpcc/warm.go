package tpcc

import (
	"context"
	"encoding/json"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/writeback/writeback/pkg/client"
)

// warmBatch is the keys of one multi-read of Warm.
const warmBatch = 500

// Warm reads, outside any session, every entry the transactions read that
// no transaction drops — warehouses, districts, customers, the customers of
// each last name, items, stock, each customer's last order, the lines of
// those orders and of the orders not yet delivered — so that a run starts
// with the cache as warm as the database's buffer pool is after the load.
// It returns how many entries it read.
func Warm(ctx context.Context, c *client.Client, s Scale) (int, error) {
	var keys []string
	for w := 1; w <= s.Warehouses; w++ {
		keys = append(keys, MapWarehouse.Key(w))
		for d := 1; d <= Districts; d++ {
			keys = append(keys, MapDistrict.Key(w, d), MapOldestNewOrder.Key(w, d))
			for cu := 1; cu <= s.Customers; cu++ {
				keys = append(keys, MapCustomer.Key(w, d, cu), MapLastOrder.Key(w, d, cu))
			}
			for n := range lastNames(s) {
				keys = append(keys, MapCustomersByName.Key(w, d, LastName(n)))
			}
		}
		for i := 1; i <= s.Items; i++ {
			keys = append(keys, MapStock.Key(w, i))
		}
	}
	for i := 1; i <= s.Items; i++ {
		keys = append(keys, MapItem.Key(i))
	}
	vals, err := warmKeys(ctx, c, keys)
	if err != nil {
		return 0, err
	}
	// The lines' keys name orders, which only the entries just read know.
	orders := make(map[string]bool)
	for w := 1; w <= s.Warehouses; w++ {
		for d := 1; d <= Districts; d++ {
			next, err := warmInt(vals, MapDistrict.Key(w, d), "d_next_o_id")
			if err != nil {
				return 0, err
			}
			oldest, err := warmInt(vals, MapOldestNewOrder.Key(w, d), "no_o_id")
			if err != nil {
				return 0, err
			}
			for o := oldest; o < next; o++ {
				orders[MapOrderLines.Key(w, d, o)] = true
			}
			for cu := 1; cu <= s.Customers; cu++ {
				if vals[MapLastOrder.Key(w, d, cu)] == nil {
					continue // a customer without orders
				}
				o, err := warmInt(vals, MapLastOrder.Key(w, d, cu), "o_id")
				if err != nil {
					return 0, err
				}
				orders[MapOrderLines.Key(w, d, o)] = true
			}
		}
	}
	lines := make([]string, 0, len(orders))
	for k := range orders {
		lines = append(lines, k)
	}
	if _, err := warmKeys(ctx, c, lines); err != nil {
		return 0, err
	}
	return len(keys) + len(lines), nil
}

// warmKeys reads keys in batches, four at a time, and returns their values
// by key.
func warmKeys(ctx context.Context, c *client.Client, keys []string) (map[string]json.RawMessage, error) {
	vals := make([][]json.RawMessage, (len(keys)+warmBatch-1)/warmBatch)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for at := 0; at < len(keys); at += warmBatch {
		batch := keys[at:min(at+warmBatch, len(keys))]
		g.Go(func() (err error) {
			if vals[at/warmBatch], err = c.CacheMany(gctx, batch, "", false); err != nil {
				return fmt.Errorf("tpcc: warming the cache: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	byKey := make(map[string]json.RawMessage, len(keys))
	for i, k := range keys {
		if v := vals[i/warmBatch][i%warmBatch]; v != nil && string(v) != "null" {
			byKey[k] = v
		}
	}
	return byKey, nil
}

// warmInt is the integer column col of the entry of key in vals.
func warmInt(vals map[string]json.RawMessage, key, col string) (int, error) {
	var row map[string]json.RawMessage
	if err := json.Unmarshal(vals[key], &row); err != nil {
		return 0, fmt.Errorf("tpcc: warming the cache: entry %s: %w", key, err)
	}
	var n int
	if err := json.Unmarshal(row[col], &n); err != nil {
		return 0, fmt.Errorf("tpcc: warming the cache: entry %s has no integer %s", key, col)
	}
	return n, nil
}
