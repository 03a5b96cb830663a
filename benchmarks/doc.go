// Package benchmarks holds the load harnesses of the sidecar: Go
// micro-benchmarks (bench_test.go, `make bench`) that put a cache hit, a
// one-field update and their baselines side by side, the YCSB demo
// (benchmarks/demo, `make demo`), and the code they share (benchmarks/ycsb
// for the workload and the database, benchmarks/sidecar for an in-process
// sidecar). See README.md in this directory.
package benchmarks
