// Command writeback is the write-back cache sidecar; see internal/cli for
// its commands.
package main

import (
	"os"

	"github.com/writeback/writeback/internal/cli"
)

func main() {
	os.Exit(cli.Main())
}
