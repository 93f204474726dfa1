package node

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/internal/sandbox/images"
)

// containerArgs combines the container's command and args with the image's
// entrypoint and cmd the way Kubernetes documents it, expanding $(VAR).
func containerArgs(c *corev1.Container, img images.Image, env []string) []string {
	var argv []string
	switch {
	case len(c.Command) > 0:
		argv = append(append(argv, c.Command...), c.Args...)
	case len(c.Args) > 0:
		argv = append(append(argv, img.Entrypoint...), c.Args...)
	default:
		argv = append(append(argv, img.Entrypoint...), img.Cmd...)
	}
	lookup := envLookup(env)
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = expand(a, lookup)
	}
	return out
}

func envLookup(env []string) func(string) (string, bool) {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// identity is who a container runs as.
type identity struct {
	UID    uint32
	GID    uint32
	Groups []uint32
}

// containerIdentity applies the Pod's and the container's securityContext
// over the image's user; fsGroup and supplementalGroups become
// supplementary groups.
func containerIdentity(pod *corev1.Pod, c *corev1.Container, img images.Image) (identity, error) {
	uid, gid, err := imageUser(img)
	if err != nil {
		return identity{}, err
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	runAsUser := firstInt64(csc.RunAsUser, psc.RunAsUser)
	if runAsUser != nil {
		uid = uint32(*runAsUser)
		if gid == 0 && img.User == "" {
			gid = passwdGID(img.Root, uid)
		}
	}
	if g := firstInt64(csc.RunAsGroup, psc.RunAsGroup); g != nil {
		gid = uint32(*g)
	}
	if nonRoot := firstBool(csc.RunAsNonRoot, psc.RunAsNonRoot); nonRoot && uid == 0 {
		return identity{}, fmt.Errorf("container has runAsNonRoot and image will run as root")
	}
	id := identity{UID: uid, GID: gid}
	for _, g := range psc.SupplementalGroups {
		id.Groups = append(id.Groups, uint32(g))
	}
	if psc.FSGroup != nil {
		id.Groups = append(id.Groups, uint32(*psc.FSGroup))
	}
	return id, nil
}

// imageUser parses the image's USER: uid, uid:gid, or a name found in the
// image's /etc/passwd.
func imageUser(img images.Image) (uint32, uint32, error) {
	if img.User == "" {
		return 0, 0, nil
	}
	user, group, hasGroup := strings.Cut(img.User, ":")
	uid, err := strconv.ParseUint(user, 10, 32)
	if err != nil {
		u, g, ok := passwdLookup(img.Root, func(f []string) bool { return f[0] == user })
		if !ok {
			return 0, 0, fmt.Errorf("image user %q is not numeric and not in the image's /etc/passwd", img.User)
		}
		uid, gid := u, g
		if hasGroup {
			return uid, groupID(img.Root, group, gid), nil
		}
		return uid, gid, nil
	}
	gid := passwdGID(img.Root, uint32(uid))
	if hasGroup {
		gid = groupID(img.Root, group, gid)
	}
	return uint32(uid), gid, nil
}

func groupID(root, group string, fallback uint32) uint32 {
	if g, err := strconv.ParseUint(group, 10, 32); err == nil {
		return uint32(g)
	}
	f, err := os.Open(filepath.Join(root, "etc", "group"))
	if err != nil {
		return fallback
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 3 && fields[0] == group {
			if g, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
				return uint32(g)
			}
		}
	}
	return fallback
}

// passwdGID is the primary group of uid in the image, or 0.
func passwdGID(root string, uid uint32) uint32 {
	want := strconv.FormatUint(uint64(uid), 10)
	_, g, _ := passwdLookup(root, func(f []string) bool { return f[2] == want })
	return g
}

func passwdLookup(root string, match func([]string) bool) (uint32, uint32, bool) {
	f, err := os.Open(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 4 || !match(fields) {
			continue
		}
		u, err1 := strconv.ParseUint(fields[2], 10, 32)
		g, err2 := strconv.ParseUint(fields[3], 10, 32)
		if err1 == nil && err2 == nil {
			return uint32(u), uint32(g), true
		}
	}
	return 0, 0, false
}

func firstInt64(ps ...*int64) *int64 {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func firstBool(ps ...*bool) bool {
	for _, p := range ps {
		if p != nil {
			return *p
		}
	}
	return false
}
