//go:build linux

package procnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/storage"
)

// makeVolumes gives every volume of the Pod its directory: a claim's
// bound volume, an empty directory, or the files of a Secret, ConfigMap,
// downward API or projected volume. Files are kept fresh while the Pod
// runs, as the kubelet refreshes them.
func (r *podRunner) makeVolumes() error {
	pod := r.current()
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	for _, v := range pod.Spec.Volumes {
		dir, err := r.volumeDir(ctx, pod, v)
		if err != nil {
			return fmt.Errorf("volume %q: %w", v.Name, err)
		}
		r.mu.Lock()
		r.volumes[v.Name] = dir
		r.mu.Unlock()
	}
	go r.refreshFiles()
	return nil
}

func (r *podRunner) volumeDir(ctx context.Context, pod *corev1.Pod, v corev1.Volume) (string, error) {
	own := filepath.Join(r.dir, "volumes", v.Name)
	switch {
	case v.PersistentVolumeClaim != nil:
		return r.claimDir(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
	case v.EmptyDir != nil:
		if err := os.MkdirAll(own, 0o777); err != nil {
			return "", err
		}
		return own, os.Chmod(own, 0o777)
	case v.Secret != nil, v.ConfigMap != nil, v.Projected != nil, v.DownwardAPI != nil:
		files, err := r.volumeFiles(ctx, pod, v)
		if err != nil {
			return "", err
		}
		return own, writeFiles(own, files)
	case v.HostPath != nil:
		return v.HostPath.Path, nil
	}
	return "", fmt.Errorf("procnode does not support this kind of volume")
}

// claimDir is the directory of the volume a claim is bound to; an unbound
// claim keeps the Pod waiting, as on a node.
func (r *podRunner) claimDir(ctx context.Context, ns, name string) (string, error) {
	c, err := r.k.cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if c.Status.Phase != corev1.ClaimBound || c.Spec.VolumeName == "" {
		return "", fmt.Errorf("persistentvolumeclaim %q is not bound", name)
	}
	pv, err := r.k.cs.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	dir := storage.VolumePath(pv)
	if dir == "" {
		return "", fmt.Errorf("persistentvolume %q is not a directory of this machine", pv.Name)
	}
	return dir, nil
}

// file is one file of a Secret-like volume.
type file struct {
	data []byte
	mode os.FileMode
}

func (r *podRunner) volumeFiles(ctx context.Context, pod *corev1.Pod, v corev1.Volume) (map[string]file, error) {
	out := map[string]file{}
	switch {
	case v.Secret != nil:
		mode := os.FileMode(ptr.Deref(v.Secret.DefaultMode, 0o644))
		return out, r.secretFiles(ctx, pod.Namespace, v.Secret.SecretName, v.Secret.Items, mode, ptr.Deref(v.Secret.Optional, false), out)
	case v.ConfigMap != nil:
		mode := os.FileMode(ptr.Deref(v.ConfigMap.DefaultMode, 0o644))
		return out, r.configMapFiles(ctx, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, mode, ptr.Deref(v.ConfigMap.Optional, false), out)
	case v.DownwardAPI != nil:
		return out, r.downwardFiles(pod, v.DownwardAPI.Items, 0o644, out)
	}
	return out, r.projectedFiles(ctx, pod, v.Projected, out)
}

// projectedFiles writes a projected volume's sources into out.
func (r *podRunner) projectedFiles(ctx context.Context, pod *corev1.Pod, v *corev1.ProjectedVolumeSource, out map[string]file) error {
	mode := os.FileMode(ptr.Deref(v.DefaultMode, 0o644))
	for _, src := range v.Sources {
		var err error
		switch {
		case src.Secret != nil:
			err = r.secretFiles(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items, mode, ptr.Deref(src.Secret.Optional, false), out)
		case src.ConfigMap != nil:
			err = r.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, mode, ptr.Deref(src.ConfigMap.Optional, false), out)
		case src.ServiceAccountToken != nil:
			var token string
			token, err = r.token(ctx, pod, src.ServiceAccountToken)
			out[src.ServiceAccountToken.Path] = file{[]byte(token), mode}
		case src.DownwardAPI != nil:
			err = r.downwardFiles(pod, src.DownwardAPI.Items, mode, out)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// downwardFiles writes downward API fields into out.
func (r *podRunner) downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode os.FileMode, out map[string]file) error {
	for _, item := range items {
		if item.FieldRef == nil {
			continue
		}
		val, err := r.fieldValue(pod, item.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		out[item.Path] = file{[]byte(val), mode}
	}
	return nil
}

func (r *podRunner) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, mode os.FileMode, optional bool, out map[string]file) error {
	s, err := r.k.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional {
			return nil
		}
		return fmt.Errorf("secret %q: %w", name, err)
	}
	return keyFiles(s.Data, items, mode, out, "secret "+name)
}

func (r *podRunner) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, mode os.FileMode, optional bool, out map[string]file) error {
	cm, err := r.k.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional {
			return nil
		}
		return fmt.Errorf("configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(data, items, mode, out, "configmap "+name)
}

func keyFiles(data map[string][]byte, items []corev1.KeyToPath, mode os.FileMode, out map[string]file, what string) error {
	if len(items) == 0 {
		for k, v := range data {
			out[k] = file{v, mode}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		out[it.Path] = file{v, m}
	}
	return nil
}

// token asks for the Pod's service account token, bound to the Pod.
func (r *podRunner) token(ctx context.Context, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	out, err := r.k.cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of service account %q: %w", sa, err)
	}
	return out.Status.Token, nil
}

// writeFiles writes the files under dir, replacing only what changed.
func writeFiles(dir string, files map[string]file) error {
	for name, f := range files {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(tmp, f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	return nil
}

// refreshFiles rewrites Secret and ConfigMap volumes as they change; the
// service account token is left as issued (it outlives any test).
func (r *podRunner) refreshFiles() {
	for {
		select {
		case <-r.stopping:
			return
		case <-r.ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
		pod := r.current()
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		for _, v := range pod.Spec.Volumes {
			if v.Secret == nil && v.ConfigMap == nil {
				continue
			}
			if files, err := r.volumeFiles(ctx, pod, v); err == nil {
				_ = writeFiles(filepath.Join(r.dir, "volumes", v.Name), files)
			}
		}
		cancel()
	}
}
