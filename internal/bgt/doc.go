// Package bgt runs the appliers (the paper's background threads): they own
// a fair share of the partitions of the pending index and of the session
// queues through renewable ownership leases (run.go's scheduler), apply
// their buffered writes and sessions to the stores in batches, exactly once
// and in order, and trim what was applied; bgt also serves the synchronous
// applies (write-through, a miss on a queue, flush) and compacts the stores'
// applied records.
//
// It must not decide what is buffered or acknowledge anything to a client:
// it reads and trims Redis only through packages buffer and session, whose
// scripts keep the buffered state consistent, and talks to the databases
// only through package store.
package bgt
