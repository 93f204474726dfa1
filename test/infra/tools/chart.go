package tools

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// RenderChart renders the operator's Helm chart with the toolchain's helm
// (`helm template`), as an install of release into namespace would on the
// pinned Kubernetes release, with values laid over the chart's own (as a
// values file would be), and returns the objects it makes.
func RenderChart(release, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	kube, err := Pinned("KUBERNETES_VERSION")
	if err != nil {
		return nil, err
	}
	return RenderChartFor(kube, release, namespace, values)
}

// RenderChartFor renders the chart as Helm would install it on a cluster of
// the given Kubernetes version.
func RenderChartFor(kube, release, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	overrides, err := yaml.Marshal(values)
	if err != nil {
		return nil, err
	}
	// helm template has no cluster to ask and assumes an old Kubernetes,
	// which the chart's kubeVersion refuses.
	cmd := exec.Command(filepath.Join(bin, "helm"), "template", release, filepath.Join(RepoRoot(), "charts", "etcd-operator"),
		"--namespace", namespace, "--kube-version", kube, "--values", "-")
	cmd.Stdin = bytes.NewReader(overrides)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return decodeManifests(out)
}

// decodeManifests splits a YAML stream into objects, skipping empty
// documents.
func decodeManifests(stream []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding the rendered chart: %w", err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}
