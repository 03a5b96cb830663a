// Package standard compiles in the built-in mapping plugins: import it for
// its side effects, and add blank imports here (or in your own build) for
// more.
package standard

import (
	_ "github.com/writeback/writeback/mappings/sqlmap" // plugin "sql"
)
