package release

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// cosign runs the toolchain's cosign; it returns its output and error.
func cosign(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "cosign"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// verifyBlob checks file against its sigstore bundle with the key.
func verifyBlob(t *testing.T, pub, file, bundle string) error {
	t.Helper()
	out, err := cosign(t, nil, "verify-blob", "--key", pub, "--bundle", bundle, "--insecure-ignore-tlog=true", file)
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// Every artifact of the release has a sigstore bundle beside it that
// cosign verifies with the release's public key; an artifact changed by a
// byte, or checked with another key, is refused.
func TestArtifactsAreSigned(t *testing.T) {
	dir := dist(t)
	pub := env(t, "RELEASE_COSIGN_PUB")
	signed := []string{"SHA256SUMS.txt", "krew-etcd.yaml"}
	for name := range sums(t, dir) {
		signed = append(signed, name)
	}
	for _, name := range signed {
		f := filepath.Join(dir, name)
		if err := verifyBlob(t, pub, f, f+".sigstore.json"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	tampered := filepath.Join(t.TempDir(), "SHA256SUMS.txt")
	data, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tampered, append(data, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := verifyBlob(t, pub, tampered, filepath.Join(dir, "SHA256SUMS.txt.sigstore.json")); err == nil {
		t.Error("a changed SHA256SUMS.txt verified")
	}
	if err := verifyBlob(t, otherKey(t), filepath.Join(dir, "SHA256SUMS.txt"), filepath.Join(dir, "SHA256SUMS.txt.sigstore.json")); err == nil {
		t.Error("SHA256SUMS.txt verified with another key")
	}
}

// otherKey is the public key of a new pair, which signed nothing.
func otherKey(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", `"$COSIGN" generate-key-pair >/dev/null`)
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "COSIGN_PASSWORD=other", "COSIGN="+filepath.Join(bin, "cosign"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate-key-pair: %v\n%s", err, out)
	}
	return filepath.Join(dir, "cosign.pub")
}

// The provenance names the source commit and the digest of every artifact
// it came with.
func TestProvenance(t *testing.T) {
	dir := dist(t)
	data, err := os.ReadFile(filepath.Join(dir, "provenance.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		BuildDefinition struct {
			ExternalParameters   map[string]string `json:"externalParameters"`
			ResolvedDependencies []struct {
				Digest map[string]string `json:"digest"`
			} `json:"resolvedDependencies"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Byproducts []struct {
				Name   string            `json:"name"`
				Digest map[string]string `json:"digest"`
			} `json:"byproducts"`
		} `json:"runDetails"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	deps := p.BuildDefinition.ResolvedDependencies
	if len(deps) != 1 || len(deps[0].Digest["gitCommit"]) != 40 || p.BuildDefinition.ExternalParameters["version"] != env(t, "RELEASE_VERSION") {
		t.Errorf("provenance build definition: %+v", p.BuildDefinition)
	}
	listed := sums(t, dir)
	n := 0
	for _, b := range p.RunDetails.Byproducts {
		if listed[b.Name] != b.Digest["sha256"] {
			t.Errorf("provenance says %s has sha256 %s, SHA256SUMS.txt %s", b.Name, b.Digest["sha256"], listed[b.Name])
		}
		n++
	}
	if n != len(listed)-1 { // every artifact but provenance.json itself
		t.Errorf("provenance lists %d artifacts, SHA256SUMS.txt %d besides it", n, len(listed)-1)
	}
}

// The image, pushed to a registry (an in-process one) as the release
// workflow pushes it, is signed and carries the SBOM and the provenance as
// in-toto attestations, which cosign verifies with the release's key (and
// refuses with another); the provenance's subject is the pushed index.
func TestImageSignedWithSBOMAndProvenance(t *testing.T) {
	dir := dist(t)
	pub := env(t, "RELEASE_COSIGN_PUB")
	key := strings.TrimSuffix(pub, ".pub") + ".key"
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	root := tools.RepoRoot()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/etcd-operator:" + env(t, "RELEASE_VERSION")
	push := exec.Command("go", "run", "./hack/image", "--push", filepath.Join(dir, "etcd-operator-image.oci.tar"), "--ref", ref)
	push.Dir = root
	out, err := push.Output()
	if err != nil {
		t.Fatalf("pushing the image: %v", err)
	}
	pushed := strings.TrimSpace(string(out))
	insecure := []string{"--allow-insecure-registry", "--allow-http-registry"}
	sign := exec.Command("hack/sign-release.sh", "image", pushed, dir)
	sign.Dir = root
	sign.Env = append(os.Environ(), "COSIGN_KEY="+key, "COSIGN_PASSWORD=release-check", "COSIGN_REGISTRY_FLAGS="+strings.Join(insecure, " "))
	if out, err := sign.CombinedOutput(); err != nil {
		t.Fatalf("signing %s: %v\n%s", pushed, err, out)
	}
	verify := append([]string{"verify", "--key", pub, "--insecure-ignore-tlog=true"}, append(insecure, pushed)...)
	if out, err := cosign(t, nil, verify...); err != nil {
		t.Errorf("the image's signature: %v\n%s", err, out)
	}
	for _, typ := range []string{"spdxjson", "slsaprovenance1"} {
		args := append([]string{"verify-attestation", "--key", pub, "--insecure-ignore-tlog=true", "--type", typ}, append(insecure, pushed)...)
		out, err := cosign(t, nil, args...)
		if err != nil {
			t.Errorf("the image's %s attestation: %v\n%s", typ, err, out)
			continue
		}
		if typ == "slsaprovenance1" {
			checkSubject(t, out, pushed[strings.Index(pushed, "@sha256:")+len("@sha256:"):])
		}
	}
	other := append([]string{"verify", "--key", otherKey(t), "--insecure-ignore-tlog=true"}, append(insecure, pushed)...)
	if _, err := cosign(t, nil, other...); err == nil {
		t.Error("the image verified with another key")
	}
}

// checkSubject finds, in verify-attestation's output (one envelope per
// line), a statement whose subject is the image index's digest.
func checkSubject(t *testing.T, out, digest string) {
	t.Helper()
	for _, line := range bytes.Split([]byte(out), []byte("\n")) {
		var env struct {
			Payload string `json:"payload"`
		}
		if json.Unmarshal(line, &env) != nil || env.Payload == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			continue
		}
		var st struct {
			Subject []struct {
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
		}
		if json.Unmarshal(raw, &st) == nil && len(st.Subject) > 0 && st.Subject[0].Digest["sha256"] == digest {
			return
		}
	}
	t.Errorf("no provenance statement about sha256:%s in:\n%s", digest, out)
}
