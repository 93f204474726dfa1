package kubectletcd

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func (a *app) versionCommand() *cobra.Command {
	var output *outputFlags
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			v := &VersionInfo{TypeMeta: resultType("VersionInfo"), Version: a.version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if output.human() {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "kubectl-etcd %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
				return err
			}
			return output.print(cmd.OutOrStdout(), v, nil)
		},
	}
	output = addOutputFlags(c, withoutName)
	return c
}
