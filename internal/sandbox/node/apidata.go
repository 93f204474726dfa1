package node

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

const defaultFileMode = 0o644

// apiFiles computes the files of a secret, configMap, projected or
// downwardAPI volume.
func (v *volumes) apiFiles(ctx context.Context, pod *corev1.Pod, vol *corev1.Volume) (map[string]fileContent, error) {
	files := map[string]fileContent{}
	var err error
	switch {
	case vol.Secret != nil:
		s := vol.Secret
		err = v.secretFiles(pod.Namespace, s.SecretName, s.Items, s.Optional, mode(s.DefaultMode, nil), files)
	case vol.ConfigMap != nil:
		c := vol.ConfigMap
		err = v.configMapFiles(pod.Namespace, c.Name, c.Items, c.Optional, mode(c.DefaultMode, nil), files)
	case vol.DownwardAPI != nil:
		err = downwardFiles(pod, vol.DownwardAPI.Items, mode(vol.DownwardAPI.DefaultMode, nil), files)
	case vol.Projected != nil:
		err = v.projectedFiles(ctx, pod, vol.Projected, files)
	}
	return files, err
}

func (v *volumes) projectedFiles(ctx context.Context, pod *corev1.Pod, p *corev1.ProjectedVolumeSource, files map[string]fileContent) error {
	def := mode(p.DefaultMode, nil)
	for _, src := range p.Sources {
		var err error
		switch {
		case src.Secret != nil:
			err = v.secretFiles(pod.Namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional, def, files)
		case src.ConfigMap != nil:
			err = v.configMapFiles(pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, def, files)
		case src.DownwardAPI != nil:
			err = downwardFiles(pod, src.DownwardAPI.Items, def, files)
		case src.ServiceAccountToken != nil:
			err = v.tokenFile(ctx, pod, src.ServiceAccountToken, def, files)
		default:
			err = fmt.Errorf("projected source not supported by the sandbox (clusterTrustBundle, podCertificate)")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (v *volumes) tokenFile(ctx context.Context, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection, def os.FileMode, files map[string]fileContent) error {
	tok, err := v.token(ctx, pod, src)
	if err != nil {
		return err
	}
	p, err := cleanRel(src.Path)
	if err != nil {
		return err
	}
	files[p] = fileContent{Data: []byte(tok), Mode: def}
	return nil
}

func (v *volumes) secretFiles(ns, name string, items []corev1.KeyToPath, opt *bool, def os.FileMode, files map[string]fileContent) error {
	s, err := v.n.cfg.Secrets.Secrets(ns).Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) && optional(opt) {
			return nil
		}
		return fmt.Errorf("secret %q: %w", name, err)
	}
	return keyFiles(s.Data, items, opt, def, files, "secret "+name)
}

func (v *volumes) configMapFiles(ns, name string, items []corev1.KeyToPath, opt *bool, def os.FileMode, files map[string]fileContent) error {
	cm, err := v.n.cfg.ConfigMaps.ConfigMaps(ns).Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) && optional(opt) {
			return nil
		}
		return fmt.Errorf("configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, val := range cm.Data {
		data[k] = []byte(val)
	}
	for k, val := range cm.BinaryData {
		data[k] = val
	}
	return keyFiles(data, items, opt, def, files, "configmap "+name)
}

// keyFiles maps keys to files: every key by its name, or only the listed
// items at their paths and modes.
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, opt *bool, def os.FileMode, files map[string]fileContent, what string) error {
	if len(items) == 0 {
		for k, val := range data {
			files[k] = fileContent{Data: val, Mode: def}
		}
		return nil
	}
	for _, it := range items {
		val, ok := data[it.Key]
		if !ok {
			if optional(opt) {
				continue
			}
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		p, err := cleanRel(it.Path)
		if err != nil {
			return err
		}
		files[p] = fileContent{Data: val, Mode: mode(it.Mode, &def)}
	}
	return nil
}

// downwardFiles renders downwardAPI items (fieldRef on metadata, and
// resourceFieldRef against the named container).
func downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, def os.FileMode, files map[string]fileContent) error {
	for _, it := range items {
		p, err := cleanRel(it.Path)
		if err != nil {
			return err
		}
		var val string
		switch {
		case it.FieldRef != nil:
			val, err = fieldValue(pod, it.FieldRef.FieldPath, podFacts{NodeName: pod.Spec.NodeName, PodIP: pod.Status.PodIP, HostIP: pod.Status.HostIP})
		case it.ResourceFieldRef != nil:
			val, err = downwardResource(pod, it.ResourceFieldRef)
		}
		if err != nil {
			return err
		}
		files[p] = fileContent{Data: []byte(val), Mode: mode(it.Mode, &def)}
	}
	return nil
}

func downwardResource(pod *corev1.Pod, ref *corev1.ResourceFieldSelector) (string, error) {
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; c.Name == ref.ContainerName {
			return resourceValue(c, ref, podFacts{})
		}
	}
	return "", fmt.Errorf("resourceFieldRef: no container %q", ref.ContainerName)
}

// mode picks an explicit mode, else the fallback, else 0644.
func mode(m *int32, fallback *os.FileMode) os.FileMode {
	if m != nil {
		return os.FileMode(*m) & os.ModePerm
	}
	if fallback != nil {
		return *fallback
	}
	return defaultFileMode
}
