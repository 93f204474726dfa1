// Package certmanager installs cert-manager into the sandbox: the CRDs of the
// pinned release and cert-manager's real controllers (hack/cert-manager, the
// image of images.CertManagerImage) as a Deployment with the RBAC they need.
// Only the CA and SelfSigned issuers work; there is no webhook, so nothing
// validates or defaults cert-manager objects beyond their CRD schemas.
package certmanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Install creates (or updates, for the CRDs) everything cert-manager needs,
// from the toolchain's directory crdDir and the loaded image ref. It does not
// wait; Ready says when the controllers serve.
func Install(ctx context.Context, cfg *rest.Config, crdDir, image string) error {
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	crds, err := ReadCRDs(crdDir)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := applyCRD(ctx, c, crd); err != nil {
			return err
		}
	}
	for _, obj := range Objects(image) {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// Ready reports whether every cert-manager CRD is Established and the
// controller's Deployment has a ready Pod (it leads and its informers have
// synced), with what is missing when not.
func Ready(ctx context.Context, cfg *rest.Config, crdDir string) (bool, string, error) {
	if ok, why, err := CRDsEstablished(ctx, cfg, crdDir); !ok || err != nil {
		return ok, why, err
	}
	c, err := newClient(cfg)
	if err != nil {
		return false, "", err
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: Name}, &d); err != nil {
		return false, "", err
	}
	if d.Status.ObservedGeneration < d.Generation || d.Status.ReadyReplicas < 1 {
		return false, fmt.Sprintf("Deployment %s/%s has %d ready Pods", Namespace, Name, d.Status.ReadyReplicas), nil
	}
	return true, "", nil
}

// CRDsEstablished reports whether the API server serves every CRD in crdDir.
func CRDsEstablished(ctx context.Context, cfg *rest.Config, crdDir string) (bool, string, error) {
	c, err := newClient(cfg)
	if err != nil {
		return false, "", err
	}
	crds, err := ReadCRDs(crdDir)
	if err != nil {
		return false, "", err
	}
	for _, want := range crds {
		var got apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: want.Name}, &got); err != nil {
			return false, "", err
		}
		if !established(&got) {
			return false, "CRD " + want.Name + " not Established", nil
		}
	}
	return true, "", nil
}

func newClient(cfg *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// ReadCRDs parses every *.yaml in dir (one CRD per file, as cert-manager's
// deploy/crds ships them).
func ReadCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no cert-manager CRDs in %s (run `make tools`)", dir)
	}
	slices.Sort(files)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", f, err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Name == "" {
			return nil, fmt.Errorf("%s is not a CustomResourceDefinition", f)
		}
		out = append(out, crd)
	}
	return out, nil
}

// applyCRD creates the CRD or replaces the spec of the one in place, so a
// sandbox that ran an older release gets the pinned one.
func applyCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	err := c.Create(ctx, crd.DeepCopy())
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	var cur apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, &cur); err != nil {
		return err
	}
	cur.Spec = crd.Spec
	cur.Labels, cur.Annotations = crd.Labels, crd.Annotations
	return c.Update(ctx, &cur)
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}
