package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionInfo is what `herald version` reports.
type versionInfo struct {
	// Version is the module version herald was built from: a release such
	// as v1.2.0 with `go install ...@v1.2.0`, or "(devel)" from a checkout.
	Version string `json:"version"`
	// Revision is the VCS commit, when the build recorded one.
	Revision string `json:"revision,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func readVersion() versionInfo {
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v.Revision = s.Value
		}
	}
	return v
}

func (c *app) versionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print herald's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := readVersion()
			if asJSON {
				return json.NewEncoder(c.base.Out).Encode(v)
			}
			line := fmt.Sprintf("herald %s %s %s", v.Version, v.Go, v.Platform)
			if v.Revision != "" {
				line += " (" + v.Revision + ")"
			}
			_, err := fmt.Fprintln(c.base.Out, line)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
