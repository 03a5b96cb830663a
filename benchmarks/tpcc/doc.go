// Package tpcc is TPC-C (revision 5.11) run as sessions through a writeback
// sidecar (over HTTP, or in-process through an embedded member beside it),
// one queue per warehouse as in the paper's section 4.3, and directly
// against the database for comparison: the schema and its
// (scalable) initial population, the five transactions in the standard
// mix, terminals without keying or think times, and consistency
// conditions 1–5, 7 and 10 checked after a run and a flush, on PostgreSQL or on
// MariaDB (the transactions and mappings are written in PostgreSQL's
// dialect and translated, dialect.go). It owns the database it
// is given (it drops and recreates the nine TPC-C tables) and nothing
// else; the sidecar comes from package benchmarks/sidecar, and the
// command's report is package tpccrun's.
package tpcc
