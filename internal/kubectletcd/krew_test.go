package kubectletcd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKrewManifestRendersForEveryPlatform renders hack/krew/etcd.yaml as
// `make cli` does and checks each platform names its own archive and
// checksum.
func TestKrewManifestRendersForEveryPlatform(t *testing.T) {
	dir := t.TempDir()
	sums := filepath.Join(dir, "cli-SHA256SUMS.txt")
	var lines []string
	platforms := []string{"linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64"}
	for i, p := range platforms {
		lines = append(lines, fmt.Sprintf("%064x  kubectl-etcd-%s.tar.gz", i+1, p), fmt.Sprintf("%064x  kubectl-etcd-%s", i+10, p))
	}
	if err := os.WriteFile(sums, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("../../hack/krew/render.sh", "v1.2.3", sums)
	cmd.Env = append(os.Environ(), "RELEASE_URL=https://example.com/r")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render.sh: %v", err)
	}
	if strings.Contains(string(out), "{{") {
		t.Fatalf("placeholders left:\n%s", out)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name string }
		Spec       struct {
			Version   string
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string } `json:"selector"`
				URI      string
				Sha256   string
				Bin      string
				Files    []struct{ From, To string }
			}
		}
	}
	if err := yaml.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "etcd" || m.Spec.Version != "v1.2.3" || len(m.Spec.Platforms) != 4 {
		t.Fatalf("manifest: %+v", m)
	}
	for i, p := range m.Spec.Platforms {
		want := p.Selector.MatchLabels["os"] + "-" + p.Selector.MatchLabels["arch"]
		if p.URI != "https://example.com/r/kubectl-etcd-"+want+".tar.gz" || p.Sha256 != fmt.Sprintf("%064x", i+1) || p.Bin != "kubectl-etcd" || want != platforms[i] {
			t.Errorf("platform %d: %+v", i, p)
		}
		// What the archives hold (make cli, make release) is installed.
		var from []string
		for _, f := range p.Files {
			from = append(from, f.From)
		}
		if want := []string{"kubectl-etcd", "README.md", "LICENSE", "completions/*", "kubectl_complete-etcd"}; !slices.Equal(from, want) {
			t.Errorf("platform %d installs %v, want %v", i, from, want)
		}
	}
	if err := exec.Command("../../hack/krew/render.sh", "v1", filepath.Join(dir, "missing")).Run(); err == nil {
		t.Error("rendering without checksums succeeded")
	}
}
