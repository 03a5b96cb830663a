// Package bench is what the YCSB, BG and TPC-C benchmark commands share:
// the policies they compare, the database's own asynchronous commit, a
// progress line per second, results as a table on stdout and as JSON, and
// PNG plots (gonum/plot) with labelled axes, one line per policy and a
// legend.
package bench
