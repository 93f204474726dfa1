package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// lookPath resolves argv[0] inside the current root with the container's
// PATH (not the init's), as a runtime does after entering the container.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		if err := executable(file); err != nil {
			return "", fmt.Errorf("exec: %q: %w", file, err)
		}
		return file, nil
	}
	path := envValue(env, "PATH")
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		candidate := filepath.Join(dir, file)
		if executable(candidate) == nil {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH (%s)", file, path)
}

func executable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() {
		return errors.New("is a directory")
	}
	if info.Mode()&0o111 == 0 {
		return errors.New("permission denied")
	}
	return nil
}
