// Command provenance writes the SLSA v1 provenance predicate of a release
// build: what was built (the source repository and commit, the version),
// how (make release), by which builder, and the digest of every artifact
// it produced. make release writes it into dist/provenance.json; the
// release's image carries it as an in-toto attestation (cosign attest
// --type slsaprovenance1), and its blobs are signed beside it.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// buildType names how a release is built: make release, from a checkout.
const buildType = "https://github.com/seed74754924/etcd-operator/blob/main/docs/installation.md#verifying-a-release"

type resource struct {
	Name   string            `json:"name,omitempty"`
	URI    string            `json:"uri,omitempty"`
	Digest map[string]string `json:"digest"`
}

type predicate struct {
	BuildDefinition struct {
		BuildType            string            `json:"buildType"`
		ExternalParameters   map[string]string `json:"externalParameters"`
		ResolvedDependencies []resource        `json:"resolvedDependencies"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Builder struct {
			ID string `json:"id"`
		} `json:"builder"`
		Metadata struct {
			InvocationID string `json:"invocationId,omitempty"`
			StartedOn    string `json:"startedOn,omitempty"`
			FinishedOn   string `json:"finishedOn"`
		} `json:"metadata"`
		Byproducts []resource `json:"byproducts"`
	} `json:"runDetails"`
}

func main() {
	version := flag.String("version", "", "the release's version")
	repo := flag.String("repo", "https://github.com/seed74754924/etcd-operator", "the source repository")
	commit := flag.String("commit", "", "the source commit (40 hex digits)")
	builder := flag.String("builder", "local", "who built it: the workflow run's URL in CI")
	invocation := flag.String("invocation", "", "the build's own ID (the workflow run), if any")
	started := flag.String("started", "", "when the build started (RFC 3339)")
	flag.Parse()
	if *version == "" || len(*commit) != 40 || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: provenance --version V --commit SHA [flags] ARTIFACT...")
		os.Exit(2)
	}
	var p predicate
	p.BuildDefinition.BuildType = buildType
	p.BuildDefinition.ExternalParameters = map[string]string{"version": *version, "source": *repo + "@" + *commit, "target": "make release"}
	p.BuildDefinition.ResolvedDependencies = []resource{{URI: "git+" + *repo, Digest: map[string]string{"gitCommit": *commit}}}
	p.RunDetails.Builder.ID = *builder
	p.RunDetails.Metadata.InvocationID = *invocation
	p.RunDetails.Metadata.StartedOn = *started
	p.RunDetails.Metadata.FinishedOn = time.Now().UTC().Format(time.RFC3339)
	files := slices.Clone(flag.Args())
	slices.Sort(files)
	for _, f := range files {
		sum, err := sha256Of(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "provenance:", err)
			os.Exit(1)
		}
		p.RunDetails.Byproducts = append(p.RunDetails.Byproducts, resource{Name: filepath.Base(f), Digest: map[string]string{"sha256": sum}})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		fmt.Fprintln(os.Stderr, "provenance:", err)
		os.Exit(1)
	}
}

func sha256Of(path string) (string, error) {
	f, err := os.Open(path) //nolint:gosec // the build's own artifacts
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
