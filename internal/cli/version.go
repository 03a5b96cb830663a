package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version and Commit describe the build. Release builds set them with
// -ldflags "-X github.com/writeback/writeback/internal/cli.Version=v1.2.3
// -X github.com/writeback/writeback/internal/cli.Commit=<sha>"; otherwise
// they are taken from the Go build info when it has them.
var (
	Version = "dev"
	Commit  = "unknown"
)

// BuildVersion returns the version and commit of the running binary:
// Version and Commit when set at link time, else what runtime/debug knows
// (the main module's version, the VCS revision with "-dirty" when modified).
func BuildVersion() (version, commit string) {
	version, commit = Version, Commit
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, commit
	}
	if version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	if commit == "unknown" {
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			commit = rev
			if dirty {
				commit += "-dirty"
			}
		}
	}
	return version, commit
}

type versionOptions struct {
	out io.Writer
}

// NewCmdVersion builds "writeback version".
func NewCmdVersion() *cobra.Command {
	opts := &versionOptions{}
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.out = cmd.OutOrStdout()
			return failed(runVersion(opts))
		},
	}
}

func runVersion(opts *versionOptions) error {
	version, commit := BuildVersion()
	_, err := fmt.Fprintf(opts.out, "writeback %s\ncommit:  %s\ngo:      %s %s/%s\n",
		version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
