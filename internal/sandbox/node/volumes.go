package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// volumes prepares a Pod's volumes on the host under its directory and
// keeps the API-data ones current.
type volumes struct {
	n   *Node
	dir string // D/pods/<uid>/volumes
	// tmpfs lists the emptyDir mounts made on the host, for teardown.
	tmpfs  sets.Set[string]
	tokens map[string]cachedToken
}

type cachedToken struct {
	token   string
	refresh time.Time
}

func newVolumes(n *Node, podDir string) *volumes {
	return &volumes{n: n, dir: filepath.Join(podDir, "volumes"), tmpfs: sets.New[string](), tokens: map[string]cachedToken{}}
}

// prepare makes every volume of the Pod ready and returns where each is.
func (v *volumes) prepare(ctx context.Context, pod *corev1.Pod) (map[string]volumeInfo, error) {
	out := map[string]volumeInfo{}
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		info, err := v.prepareOne(ctx, pod, vol)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", vol.Name, err)
		}
		out[vol.Name] = info
	}
	return out, nil
}

// refresh rewrites the API-data volumes when their sources changed (and
// renews service-account tokens), like the kubelet's periodic sync.
func (v *volumes) refresh(ctx context.Context, pod *corev1.Pod) error {
	var errs []error
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if apiData(vol) {
			if _, err := v.prepareOne(ctx, pod, vol); err != nil {
				errs = append(errs, fmt.Errorf("volume %q: %w", vol.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func apiData(vol *corev1.Volume) bool {
	return vol.Secret != nil || vol.ConfigMap != nil || vol.Projected != nil || vol.DownwardAPI != nil
}

func (v *volumes) prepareOne(ctx context.Context, pod *corev1.Pod, vol *corev1.Volume) (volumeInfo, error) {
	path := filepath.Join(v.dir, vol.Name)
	gid := fsGroup(pod)
	switch {
	case vol.EmptyDir != nil:
		return volumeInfo{Path: path}, v.emptyDir(path, vol.EmptyDir, gid, pod)
	case vol.PersistentVolumeClaim != nil:
		return v.claim(pod, vol.PersistentVolumeClaim.ClaimName, vol.PersistentVolumeClaim.ReadOnly)
	case vol.Ephemeral != nil:
		return v.claim(pod, pod.Name+"-"+vol.Name, false)
	case vol.HostPath != nil:
		return hostPath(vol.HostPath)
	case apiData(vol):
		files, err := v.apiFiles(ctx, pod, vol)
		if err != nil {
			return volumeInfo{}, err
		}
		_, err = writeAtomic(path, files, gid)
		return volumeInfo{Path: path, ReadOnly: true}, err
	}
	return volumeInfo{}, errors.New("this volume type is not supported by the sandbox (use emptyDir, persistentVolumeClaim, ephemeral, hostPath, secret, configMap, projected or downwardAPI)")
}

// emptyDir is a world-writable directory like the kubelet's; medium Memory
// is a real tmpfs on the host (so every container of the Pod shares it and
// it survives container restarts) limited to sizeLimit.
func (v *volumes) emptyDir(path string, src *corev1.EmptyDirVolumeSource, gid int, pod *corev1.Pod) error {
	if err := os.MkdirAll(path, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(path, 0o777); err != nil {
		return err
	}
	if src.Medium == corev1.StorageMediumMemory && !v.tmpfs.Has(path) {
		opts := "mode=0777"
		if src.SizeLimit != nil && !src.SizeLimit.IsZero() {
			opts += ",size=" + strconv.FormatInt(src.SizeLimit.Value(), 10)
		}
		if err := unix.Mount("tmpfs", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mounting tmpfs: %w", err)
		}
		v.tmpfs.Insert(path)
	}
	return setOwnership(path, gid, pod)
}

// claim finds the directory of a bound PersistentVolumeClaim, refusing a
// local volume pinned to another node.
func (v *volumes) claim(pod *corev1.Pod, name string, readOnly bool) (volumeInfo, error) {
	pvc, err := v.n.cfg.PVCs.PersistentVolumeClaims(pod.Namespace).Get(name)
	if err != nil {
		return volumeInfo{}, fmt.Errorf("persistentvolumeclaim %q: %w", name, err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return volumeInfo{}, fmt.Errorf("persistentvolumeclaim %q is not bound yet", name)
	}
	pv, err := v.n.cfg.PVs.Get(pvc.Spec.VolumeName)
	if err != nil {
		return volumeInfo{}, fmt.Errorf("persistentvolume %q: %w", pvc.Spec.VolumeName, err)
	}
	if node := pinnedNode(pv); node != "" && node != v.n.name {
		return volumeInfo{}, fmt.Errorf("persistentvolume %q is local to %s, not reachable from %s", pv.Name, node, v.n.name)
	}
	var path string
	switch {
	case pv.Spec.HostPath != nil:
		path = pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		path = pv.Spec.Local.Path
	default:
		return volumeInfo{}, fmt.Errorf("persistentvolume %q has no hostPath or local source", pv.Name)
	}
	if _, err := os.Stat(path); err != nil {
		return volumeInfo{}, fmt.Errorf("persistentvolume %q: %w", pv.Name, err)
	}
	return volumeInfo{Path: path, ReadOnly: readOnly}, setOwnership(path, fsGroup(pod), pod)
}

// pinnedNode returns the hostname a PV's node affinity requires, if any.
func pinnedNode(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

func hostPath(src *corev1.HostPathVolumeSource) (volumeInfo, error) {
	t := corev1.HostPathUnset
	if src.Type != nil {
		t = *src.Type
	}
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		if err := os.MkdirAll(src.Path, 0o755); err != nil {
			return volumeInfo{}, err
		}
	case corev1.HostPathFileOrCreate:
		f, err := os.OpenFile(src.Path, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return volumeInfo{}, err
		}
		_ = f.Close()
	}
	if _, err := os.Stat(src.Path); err != nil {
		return volumeInfo{}, err
	}
	return volumeInfo{Path: src.Path}, nil
}

func fsGroup(pod *corev1.Pod) int {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		return int(*sc.FSGroup)
	}
	return -1
}

// setOwnership gives a writable volume to fsGroup like the kubelet: group
// ownership, group read-write, setgid directories. OnRootMismatch skips the
// walk when the root already belongs to the group.
func setOwnership(path string, gid int, pod *corev1.Pod) error {
	if gid < 0 {
		return nil
	}
	sc := pod.Spec.SecurityContext
	if sc.FSGroupChangePolicy != nil && *sc.FSGroupChangePolicy == corev1.FSGroupChangeOnRootMismatch {
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil && int(st.Gid) == gid && st.Mode&unix.S_ISGID != 0 {
			return nil
		}
	}
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, gid); err != nil {
			return err
		}
		mode := info.Mode() | 0o060
		if d.IsDir() {
			mode |= 0o010 | os.ModeSetgid
		}
		return os.Chmod(p, mode)
	})
}

// teardown unmounts the tmpfs volumes.
func (v *volumes) teardown() error {
	var errs []error
	for path := range v.tmpfs {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
			continue
		}
		v.tmpfs.Delete(path)
	}
	return errors.Join(errs...)
}

// token returns a service-account token bound to the Pod, renewed once 80%
// of its lifetime has passed, as the kubelet does.
func (v *volumes) token(ctx context.Context, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection) (string, error) {
	expiry := int64(3600)
	if src.ExpirationSeconds != nil {
		expiry = *src.ExpirationSeconds
	}
	key := src.Audience + "/" + strconv.FormatInt(expiry, 10)
	if c, ok := v.tokens[key]; ok && time.Now().Before(c.refresh) {
		return c.token, nil
	}
	req := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &expiry,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	resp, err := v.n.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for service account %q: %w", sa, err)
	}
	lifetime := time.Duration(expiry) * time.Second
	if resp.Status.ExpirationTimestamp.After(time.Now()) {
		lifetime = time.Until(resp.Status.ExpirationTimestamp.Time)
	}
	v.tokens[key] = cachedToken{token: resp.Status.Token, refresh: time.Now().Add(lifetime * 8 / 10)}
	return resp.Status.Token, nil
}

// cleanRel rejects item paths that would leave the volume.
func cleanRel(p string) (string, error) {
	c := filepath.Clean(p)
	if filepath.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") || strings.HasPrefix(c, "..") {
		return "", fmt.Errorf("path %q must be relative and must not start with '..'", p)
	}
	return c, nil
}
