// Package release reads back what `make release` wrote into dist/: every
// artifact listed with its checksum, the archives' contents and versions,
// the krew manifest's checksums, the packaged chart's version and image,
// the multi-platform image index and its SBOM. `make release-check` (in
// make test) runs it; without RELEASE_DIST it skips.
package release

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/semver"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

var platforms = []string{"linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64"}

// dist is the release directory; the test skips without one.
func dist(t *testing.T) string {
	t.Helper()
	d := os.Getenv("RELEASE_DIST")
	if d == "" {
		t.Skip("RELEASE_DIST is not set: run make release-check")
	}
	return d
}

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set", name)
	}
	return v
}

// sums reads SHA256SUMS.txt: file → checksum.
func sums(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS.txt line %q", sc.Text())
		}
		out[file] = sum
	}
	return out
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestEveryArtifactIsListed checks SHA256SUMS.txt lists every artifact in
// dist/ with its true checksum, and the release has what it promises.
func TestEveryArtifactIsListed(t *testing.T) {
	dir := dist(t)
	listed := sums(t, dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if name == "SHA256SUMS.txt" || name == "krew-etcd.yaml" || strings.HasSuffix(name, ".sigstore.json") {
			continue
		}
		sum, ok := listed[name]
		if !ok {
			t.Errorf("%s is not in SHA256SUMS.txt", name)
			continue
		}
		if got := sha256File(t, filepath.Join(dir, name)); got != sum {
			t.Errorf("%s has sha256 %s, SHA256SUMS.txt says %s", name, got, sum)
		}
	}
	want := []string{"etcd-operator-image.oci.tar", "etcd-operator-image.spdx.json", "provenance.json", "etcd-operator-" + env(t, "RELEASE_CHART_VERSION") + ".tgz"}
	for _, cmd := range []string{"kubectl-etcd", "etcd-migrate"} {
		for _, p := range platforms {
			want = append(want, cmd+"-"+p+".tar.gz")
		}
	}
	for _, w := range want {
		if _, ok := listed[w]; !ok {
			t.Errorf("the release has no %s", w)
		}
	}
}

// archive reads a .tar.gz: file name → contents.
func archive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	return readTar(t, path, true, func(*tar.Header) bool { return true })
}

// readTar reads the files of a tarball (gzipped or not) that keep accepts:
// name → contents.
func readTar(t *testing.T, path string, gzipped bool, keep func(*tar.Header) bool) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var r io.Reader = f
	if gzipped {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if !keep(h) {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = data
	}
}

// TestArchivesHoldTheStampedBinaries checks each archive holds its binary,
// the licence and the README (kubectl-etcd's also its completion scripts),
// and that the binaries this machine can run print the release's version.
func TestArchivesHoldTheStampedBinaries(t *testing.T) {
	dir := dist(t)
	version := env(t, "RELEASE_VERSION")
	for _, cmd := range []string{"kubectl-etcd", "etcd-migrate"} {
		want := []string{"LICENSE", "README.md", cmd}
		if cmd == "kubectl-etcd" {
			want = append(want, kubectlEtcdCompletions...)
		}
		slices.Sort(want)
		for _, p := range platforms {
			files := archive(t, filepath.Join(dir, cmd+"-"+p+".tar.gz"))
			if names := fileNames(files); !slices.Equal(names, want) {
				t.Errorf("%s-%s.tar.gz holds %v, want %v", cmd, p, names, want)
				continue
			}
			if p != runtime.GOOS+"-"+runtime.GOARCH {
				continue
			}
			bin := filepath.Join(t.TempDir(), cmd)
			if err := os.WriteFile(bin, files[cmd], 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), version) {
				t.Errorf("%s version printed %q (%v), want %s", cmd, out, err, version)
			}
		}
	}
}

// kubectlEtcdCompletions are the completion files of the kubectl-etcd
// archives.
var kubectlEtcdCompletions = []string{
	"completions/kubectl-etcd.bash", "completions/kubectl-etcd.fish", "completions/kubectl-etcd.ps1", "completions/kubectl-etcd.zsh",
	"kubectl_complete-etcd",
}

// fileNames are the regular files of an archive, sorted (directories have
// no contents and are left out).
func fileNames(files map[string][]byte) []string {
	var names []string
	for n := range files {
		if !strings.HasSuffix(n, "/") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// TestKubectlEtcdArchivesCompleteEveryShell checks the completion scripts
// in the kubectl-etcd archives: the same in every archive, each what the
// binary of this machine's archive generates for its shell, and an
// executable kubectl_complete-etcd that hands the words to the plugin.
func TestKubectlEtcdArchivesCompleteEveryShell(t *testing.T) {
	dir := dist(t)
	host := archive(t, filepath.Join(dir, "kubectl-etcd-"+runtime.GOOS+"-"+runtime.GOARCH+".tar.gz"))
	bin := filepath.Join(t.TempDir(), "kubectl-etcd")
	if err := os.WriteFile(bin, host["kubectl-etcd"], 0o755); err != nil {
		t.Fatal(err)
	}
	for shell, file := range map[string]string{"bash": "kubectl-etcd.bash", "zsh": "kubectl-etcd.zsh", "fish": "kubectl-etcd.fish", "powershell": "kubectl-etcd.ps1"} {
		generated, err := exec.Command(bin, "completion", shell).Output()
		if err != nil {
			t.Fatalf("kubectl-etcd completion %s: %v", shell, err)
		}
		if !slices.Equal(host["completions/"+file], generated) {
			t.Errorf("completions/%s is not what kubectl-etcd completion %s prints", file, shell)
		}
	}
	if !strings.Contains(string(host["kubectl_complete-etcd"]), "exec kubectl-etcd __complete \"$@\"") {
		t.Errorf("kubectl_complete-etcd does not hand the words to kubectl-etcd __complete:\n%s", host["kubectl_complete-etcd"])
	}
	for _, p := range platforms {
		path := filepath.Join(dir, "kubectl-etcd-"+p+".tar.gz")
		files := archive(t, path)
		for _, name := range kubectlEtcdCompletions {
			if !slices.Equal(files[name], host[name]) {
				t.Errorf("%s of kubectl-etcd-%s.tar.gz differs from this machine's archive", name, p)
			}
		}
		modes := readTarModes(t, path)
		if modes["kubectl_complete-etcd"]&0o111 != 0o111 || modes["completions/kubectl-etcd.bash"] != 0o644 {
			t.Errorf("kubectl-etcd-%s.tar.gz: kubectl_complete-etcd mode %o, completions mode %o; want executable and 644", p, modes["kubectl_complete-etcd"], modes["completions/kubectl-etcd.bash"])
		}
	}
}

// readTarModes reads a .tar.gz's file modes: name → permission bits.
func readTarModes(t *testing.T, path string) map[string]int64 {
	t.Helper()
	modes := map[string]int64{}
	readTar(t, path, true, func(h *tar.Header) bool {
		modes[h.Name] = h.Mode & 0o777
		return false
	})
	return modes
}

// TestKrewManifestNamesTheArchives checks the krew manifest's version (a
// SemVer whatever the commit), and
// that each platform's checksum is its archive's.
func TestKrewManifestNamesTheArchives(t *testing.T) {
	dir := dist(t)
	data, err := os.ReadFile(filepath.Join(dir, "krew-etcd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	// krew takes only a v-prefixed SemVer: the chart's version, which is
	// the tag on a tag.
	if want := "v" + env(t, "RELEASE_CHART_VERSION"); m.Spec.Version != want || !semver.IsValid(m.Spec.Version) || len(m.Spec.Platforms) != len(platforms) {
		t.Fatalf("krew manifest version %q (want %q, a SemVer) with %d platforms", m.Spec.Version, want, len(m.Spec.Platforms))
	}
	listed := sums(t, dir)
	for _, p := range m.Spec.Platforms {
		if file := filepath.Base(p.URI); listed[file] != p.SHA256 {
			t.Errorf("krew says %s has sha256 %s; SHA256SUMS.txt says %s", file, p.SHA256, listed[file])
		}
	}
}

// TestChartCarriesTheVersionAndImage checks the packaged chart's version
// and appVersion, and that it renders the release's image by default.
func TestChartCarriesTheVersionAndImage(t *testing.T) {
	dir := dist(t)
	chart := filepath.Join(dir, "etcd-operator-"+env(t, "RELEASE_CHART_VERSION")+".tgz")
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, "helm"), "show", "chart", chart).Output()
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(out, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != env(t, "RELEASE_CHART_VERSION") || meta.AppVersion != env(t, "RELEASE_VERSION") {
		t.Errorf("chart version %q appVersion %q", meta.Version, meta.AppVersion)
	}
	kube, err := tools.Pinned("KUBERNETES_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := exec.Command(filepath.Join(bin, "helm"), "template", "eo", chart, "--kube-version", kube).Output()
	if err != nil {
		t.Fatal(err)
	}
	if img := env(t, "RELEASE_IMAGE"); !strings.Contains(string(rendered), "image: "+img+"\n") {
		t.Errorf("the packaged chart does not render image %s by default", img)
	}
	for _, file := range []string{"files/alerts.yaml", "files/dashboard.json", "values.schema.json"} {
		if !strings.Contains(tarNames(t, chart), "etcd-operator/"+file) {
			t.Errorf("the packaged chart lacks %s", file)
		}
	}
}

func tarNames(t *testing.T, path string) string {
	t.Helper()
	var names []string
	for n := range archive(t, path) {
		names = append(names, n)
	}
	return strings.Join(names, "\n")
}

// TestImageIndex checks the image tarball names the release's image (as the
// sandbox's loader reads it) with a manifest for each Linux platform.
func TestImageIndex(t *testing.T) {
	dir := dist(t)
	oci := filepath.Join(dir, "etcd-operator-image.oci.tar")
	refs, err := images.Refs(oci)
	if err != nil {
		t.Fatal(err)
	}
	want, err := images.Normalize(env(t, "RELEASE_IMAGE"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(refs, want) {
		t.Errorf("the image tarball names %v, want %s", refs, want)
	}
	blobs := smallFiles(t, oci)
	type manifests struct {
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform *struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	var outer, inner manifests
	if err := json.Unmarshal(blobs["index.json"], &outer); err != nil || len(outer.Manifests) != 1 {
		t.Fatalf("index.json %s (%v)", blobs["index.json"], err)
	}
	if err := json.Unmarshal(blobs["blobs/sha256/"+strings.TrimPrefix(outer.Manifests[0].Digest, "sha256:")], &inner); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range inner.Manifests {
		if m.Platform != nil {
			got = append(got, m.Platform.OS+"/"+m.Platform.Architecture)
		}
	}
	if !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("the image index has platforms %v", got)
	}
}

// smallFiles reads the files under 1 MiB of a tarball (an OCI layout's
// index and manifests; not its layers).
func smallFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	return readTar(t, path, false, func(h *tar.Header) bool { return h.Typeflag == tar.TypeReg && h.Size < 1<<20 })
}

// TestSBOM checks the SBOM describes the operator binaries and the
// etcd-tools binaries of both platforms, and their modules.
func TestSBOM(t *testing.T) {
	dir := dist(t)
	var sbom struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name        string `json:"name"`
			VersionInfo string `json:"versionInfo"`
		} `json:"packages"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "etcd-operator-image.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &sbom); err != nil || sbom.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("SBOM: %v %q", err, sbom.SPDXVersion)
	}
	var binaries, tools, controllerRuntime int
	for _, p := range sbom.Packages {
		if strings.Contains(p.Name, "manager-linux-") {
			binaries++
		}
		if strings.Contains(p.Name, "etcd-tools-linux-") {
			tools++
		}
		if p.Name == "sigs.k8s.io/controller-runtime" {
			controllerRuntime++
		}
	}
	if binaries != 2 || tools != 2 || controllerRuntime != 1 {
		t.Errorf("the SBOM lists %d operator binaries, %d etcd-tools binaries and controller-runtime %d times, want 2, 2 and 1", binaries, tools, controllerRuntime)
	}
}

// TestChartVersionOfAnyDescribe packages the chart with the version
// hack/chart-version.sh gives for each kind of `git describe` output, as
// make release does. A commit between tags can be all digits with a
// leading zero (0869528): made the pre-release of 0.0.0 as it is, Helm
// refused it and make release failed on that commit alone.
func TestChartVersionOfAnyDescribe(t *testing.T) {
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, describe := range []string{"0869528", "0869528-dirty", "1234567", "abc1234", "v1.2.0", "v1.2.0-3-g0123abc", "v1.2.0-rc.1-dirty", "dev"} {
		out, err := exec.Command(filepath.Join(root, "hack", "chart-version.sh"), describe).Output()
		if err != nil {
			t.Fatalf("chart-version.sh %s: %v", describe, err)
		}
		version := strings.TrimSpace(string(out))
		if strings.HasPrefix(describe, "v1.2.0") && version != strings.TrimPrefix(describe, "v") {
			t.Errorf("on a tag, %s gave chart version %s, want the tag without its v", describe, version)
		}
		dir := t.TempDir()
		cmd := exec.Command(filepath.Join(bin, "helm"), "package", filepath.Join(root, "charts", "etcd-operator"), "--version", version, "--app-version", describe, "-d", dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("describe %s: helm package --version %s: %v\n%s", describe, version, err, out)
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "etcd-operator-"+version+".tgz")); err != nil {
			t.Errorf("describe %s: %v", describe, err)
		}
	}
}
