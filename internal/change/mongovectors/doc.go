// Package mongovectors holds no code: its test runs the change package's
// shared test vectors (internal/change/testdata/vectors.json) against a real
// MongoDB-wire server (FerretDB in dev/CI, started by scripts/ferretdb.sh)
// and checks that the server makes of every update the document the change
// package makes. It lives apart so that the change package's own tests need
// no server.
package mongovectors
