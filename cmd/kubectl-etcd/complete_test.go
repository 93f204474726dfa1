package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlCompleteHandsTheWordsToThePlugin runs kubectl_complete-etcd as
// kubectl does (the words after `etcd`, then the one being completed, here
// empty) against a kubectl-etcd on PATH that prints what it was given.
func TestKubectlCompleteHandsTheWordsToThePlugin(t *testing.T) {
	dir := t.TempDir()
	echo := "#!/bin/sh\nfor a in \"$@\"; do printf '[%s]\\n' \"$a\"; done\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl-etcd"), []byte(echo), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("kubectl_complete-etcd")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(script); err != nil || info.Mode().Perm()&0o111 == 0 {
		t.Fatalf("kubectl_complete-etcd is not executable: %v %v", info, err)
	}
	cmd := exec.Command(script, "status", "-c", "my cluster", "-o", "")
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "[__complete]\n[status]\n[-c]\n[my cluster]\n[-o]\n[]\n"; string(out) != want {
		t.Errorf("kubectl-etcd got\n%s\nwant\n%s", out, strings.TrimSpace(want))
	}
}
