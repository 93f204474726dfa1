package main

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push uploads the image index of an OCI layout tarball (as buildIndex
// writes it) to ref: the multi-platform index itself, not the layout's
// index.json that only points at it, so that a pull picks its platform.
// Credentials come from the Docker config (docker, crane or helm login).
// It returns the pushed index as <repository>@<digest>, what signatures and
// attestations are attached to.
func push(tarball, ref string, opts ...remote.Option) (string, error) {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("bad reference %q: %w", ref, err)
	}
	idx, cleanup, err := readIndex(tarball)
	if err != nil {
		return "", err
	}
	defer cleanup()
	if len(opts) == 0 {
		opts = []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	}
	if err := remote.WriteIndex(tag, idx, opts...); err != nil {
		return "", err
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Digest(digest.String()).String(), nil
}

// readIndex unpacks an OCI layout tarball and returns the one image index
// its index.json names.
func readIndex(tarball string) (v1.ImageIndex, func(), error) {
	dir, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if err := untar(tarball, dir); err != nil {
		cleanup()
		return nil, nil, err
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	outer, err := lp.ImageIndex()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	m, err := outer.IndexManifest()
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%s: reading index.json: %w", tarball, err)
	}
	if len(m.Manifests) != 1 {
		cleanup()
		return nil, nil, fmt.Errorf("%s: want one image index in index.json, got %d", tarball, len(m.Manifests))
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return idx, cleanup, nil
}
