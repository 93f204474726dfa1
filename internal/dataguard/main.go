package dataguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
)

// Main checks the member's data directory, then runs etcd (the
// arguments after "--" are its command line) as its child until etcd
// exits, and returns the code the container ends with. It takes the
// container's signals itself, to pass them on, so it runs without the
// manager's signal handler. The operator binary and the small etcd-tools
// binary both run it as their guard-data command.
func Main(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "guard-data:", err)
		return 1
	}
	if len(args) == 0 {
		return fail(errors.New("no command to run after --"))
	}
	dataDir, stateDir := os.Getenv(EnvDataDir), os.Getenv(EnvStateDir)
	if err := Guard(os.Getenv(EnvMemberID), dataDir, stateDir); err != nil {
		return fail(err)
	}
	path, err := exec.LookPath(args[0])
	if err != nil && !strings.Contains(args[0], "/") {
		// etcd's images keep it in /usr/local/bin, whatever PATH says.
		path, err = exec.LookPath("/usr/local/bin/" + args[0])
	}
	if err != nil {
		return fail(err)
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	cmd := &exec.Cmd{Path: path, Args: args, Env: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	code, err := Supervise(cmd, signals, dataDir, stateDir)
	if err != nil {
		return fail(err)
	}
	return code
}
