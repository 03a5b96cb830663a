// Package tpcc is TPC-C (revision 5.11) run as sessions through a writeback
// sidecar, as in section 4.3 of the paper (one queue per warehouse), and
// directly against the database for comparison: the standard schema and
// initial population (scalable down for quick runs), the five transactions
// with the standard mix, NURand, terminals per warehouse without keying or
// think times, and consistency conditions 1–4 checked on the database after
// a run and a flush.
//
// It owns the database it is given (it drops and recreates the nine TPC-C
// tables) and nothing else; the sidecar comes from package
// benchmarks/sidecar.
package tpcc
