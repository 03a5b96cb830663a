// Package tpccrun is the tpcc command of benchmarks/cmd/tpcc: its flags,
// the policies it runs package tpcc's benchmark under, and the tables,
// ratios, JSON and plots it reports. It owns only its output files under
// --out; the schema, the transactions and the consistency checks are
// package tpcc's and must not move here.
package tpccrun
