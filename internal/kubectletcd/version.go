package kubectletcd

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// VersionInfo is what `version` prints.
type VersionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func (a *app) versionCommand() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(output); err != nil {
				return err
			}
			v := VersionInfo{Version: a.version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if output == formatTable {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "kubectl-etcd %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
				return err
			}
			return table{value: v}.print(cmd.OutOrStdout(), output)
		},
	}
	outputFlag(c, &output)
	return c
}
