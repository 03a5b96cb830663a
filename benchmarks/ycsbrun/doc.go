// Package ycsbrun is the ycsb command of benchmarks/cmd/ycsb: its flags,
// the policy comparison and the applier sweep it runs on each store, and
// the tables, JSON and plots it reports (Main says what a run does). It
// owns the table it loads (dropped at the end, kept after a failure) and
// its sidecars' Redis prefixes, and nothing else; the workload is package
// ycsb's and must not move here.
package ycsbrun
