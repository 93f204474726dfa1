package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/control"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/network"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/node"
)

// serveControl listens on D/control.sock (root only) before setup starts,
// so `up` can follow the progress and `down` can stop a failed setup.
func (d *Daemon) serveControl() (*http.Server, error) {
	sock := d.in.Socket()
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+control.PathStatus, func(w http.ResponseWriter, _ *http.Request) { reply(w, d.status(), nil) })
	d.handle(mux, control.PathShutdown, func(_ context.Context, _ control.Target) (any, error) {
		d.Shutdown()
		return struct{}{}, nil
	})
	d.handle(mux, control.PathKill, d.kill)
	d.handle(mux, control.PathStopNode, d.stopNode)
	d.handle(mux, control.PathStartNode, d.startNode)
	d.handle(mux, control.PathPartition, d.partition)
	d.handle(mux, control.PathPartitionPorts, d.partitionPorts)
	d.handle(mux, control.PathHeal, d.heal)
	d.handle(mux, control.PathWipe, func(ctx context.Context, t control.Target) (any, error) {
		return nil, d.storage.Wipe(ctx, t.Namespace, t.Name)
	})
	d.handle(mux, control.PathImageAdd, d.addImage)
	d.handle(mux, control.PathImageLoad, d.loadImage)
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("Control socket stopped", "err", err)
		}
	}()
	return srv, nil
}

// handle registers a POST endpoint taking a Target; every one but status
// and shutdown needs a ready sandbox.
func (d *Daemon) handle(mux *http.ServeMux, path string, fn func(context.Context, control.Target) (any, error)) {
	mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
		var t control.Target
		if err := json.NewDecoder(r.Body).Decode(&t); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if path != control.PathShutdown && !d.ready.Load() {
			http.Error(w, "the sandbox is not ready", http.StatusServiceUnavailable)
			return
		}
		out, err := fn(r.Context(), t)
		if out == nil {
			out = struct{}{}
		}
		reply(w, out, err)
	})
}

func reply(w http.ResponseWriter, out any, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (d *Daemon) status() control.Status {
	in := d.in
	st := control.Status{
		Name: in.Name, Dir: in.Dir, PID: os.Getpid(), Ready: d.ready.Load(), Kubeconfig: in.Kubeconfig(),
		APIServer: "https://" + net.JoinHostPort(in.APIServerIP().String(), strconv.Itoa(instance.APIServerPort)),
		PodCIDR:   in.PodCIDR.String(),
	}
	if v, ok := d.setupErr.Load().(string); ok {
		st.Error = v
	}
	for _, n := range d.nodes {
		st.Nodes = append(st.Nodes, control.NodeStatus{Name: n.Name(), Running: n.Running(), Port: instance.KubeletPort, Address: n.KubeletAddress()})
	}
	d.imagesMu.Lock()
	st.Images = slices.Sorted(slices.Values(d.images))
	d.imagesMu.Unlock()
	return st
}

// kill SIGKILLs the named container of a Pod (every running one when none
// is named) through its node's containerd.
func (d *Daemon) kill(ctx context.Context, t control.Target) (any, error) {
	pod, n, err := d.podNode(ctx, t)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if (t.Container == "" || cs.Name == t.Container) && cs.State.Running != nil {
			_, id, _ := strings.Cut(cs.ContainerID, "://")
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("pod %s/%s has no running container %q", t.Namespace, t.Name, t.Container)
	}
	return nil, n.KillContainers(ctx, ids)
}

// podNode finds a Pod and the running node it is bound to.
func (d *Daemon) podNode(ctx context.Context, t control.Target) (*corev1.Pod, *node.Node, error) {
	pod, err := d.client.CoreV1().Pods(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	n, err := d.nodeByName(pod.Spec.NodeName)
	if err != nil {
		return nil, nil, fmt.Errorf("pod %s/%s is not on a node of the sandbox: %w", t.Namespace, t.Name, err)
	}
	if !n.Running() {
		return nil, nil, fmt.Errorf("pod %s/%s is on node %s, which is stopped", t.Namespace, t.Name, n.Name())
	}
	return pod, n, nil
}

// podIP is the address of a Pod that has one.
func (d *Daemon) podIP(ctx context.Context, t control.Target) (netip.Addr, error) {
	pod, err := d.client.CoreV1().Pods(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	if err != nil {
		return netip.Addr{}, err
	}
	addr, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("pod %s/%s has no IP yet", t.Namespace, t.Name)
	}
	return addr, nil
}

// partition cuts a Pod off the network.
func (d *Daemon) partition(ctx context.Context, t control.Target) (any, error) {
	addr, err := d.podIP(ctx, t)
	if err != nil {
		return nil, err
	}
	d.recordCut(t, addr)
	if err := network.Cut(ctx, netip.PrefixFrom(addr, 32)); err != nil {
		return nil, err
	}
	slog.Info("Pod cut off the network", "pod", t.Namespace+"/"+t.Name, "ip", addr)
	return nil, nil
}

// partitionPorts cuts a Pod's TCP traffic on the given ports only.
func (d *Daemon) partitionPorts(ctx context.Context, t control.Target) (any, error) {
	if len(t.Ports) == 0 {
		return nil, fmt.Errorf("a port partition of %s/%s needs at least one port", t.Namespace, t.Name)
	}
	addr, err := d.podIP(ctx, t)
	if err != nil {
		return nil, err
	}
	d.recordCut(t, addr)
	if err := network.CutPorts(ctx, addr, t.Ports); err != nil {
		return nil, err
	}
	slog.Info("Pod's TCP traffic on some ports cut", "pod", t.Namespace+"/"+t.Name, "ip", addr, "ports", t.Ports)
	return nil, nil
}

// recordCut remembers an address cut off for a Pod, before the cut, so that
// a heal finds it whatever happens to the Pod.
func (d *Daemon) recordCut(t control.Target, addr netip.Addr) {
	d.cutsMu.Lock()
	defer d.cutsMu.Unlock()
	if d.cuts == nil {
		d.cuts = map[string][]netip.Addr{}
	}
	key := t.Namespace + "/" + t.Name
	if !slices.Contains(d.cuts[key], addr) {
		d.cuts[key] = append(d.cuts[key], addr)
	}
}

// heal lifts every cut of a Pod: the whole Pod's and each of its ports'. The
// cuts are of addresses, so it lifts those recorded for the Pod's name as
// well as its current address: a Pod replaced while cut (a new address) or
// deleted (none) is healed too, and its old address cannot cut off a Pod
// that is given it later.
func (d *Daemon) heal(ctx context.Context, t control.Target) (any, error) {
	key := t.Namespace + "/" + t.Name
	d.cutsMu.Lock()
	addrs := slices.Clone(d.cuts[key])
	d.cutsMu.Unlock()
	addr, err := d.podIP(ctx, t)
	switch {
	case err == nil && !slices.Contains(addrs, addr):
		addrs = append(addrs, addr)
	case err != nil && len(addrs) == 0:
		return nil, err
	}
	for _, a := range addrs {
		if err := network.Restore(ctx, netip.PrefixFrom(a, 32)); err != nil {
			return nil, err
		}
		if err := network.RestorePorts(ctx, a); err != nil {
			return nil, err
		}
	}
	d.cutsMu.Lock()
	delete(d.cuts, key)
	d.cutsMu.Unlock()
	slog.Info("Pod healed: every cut of it lifted", "pod", key, "addresses", addrs)
	return nil, nil
}

// nodePrefixes are what a stopped node loses: its Pods' subnet and its own
// address.
func (d *Daemon) nodePrefixes(n *node.Node) []netip.Prefix {
	return []netip.Prefix{d.in.NodeCIDR(n.Index()), netip.PrefixFrom(d.in.NodeIP(n.Index()), 32)}
}

func (d *Daemon) stopNode(ctx context.Context, t control.Target) (any, error) {
	n, err := d.nodeByName(t.Node)
	if err != nil {
		return nil, err
	}
	err = n.Stop(ctx, func(ctx context.Context) error {
		for _, p := range d.nodePrefixes(n) {
			if err := network.Cut(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		slog.Info("Node stopped", "node", t.Node)
	}
	return nil, err
}

func (d *Daemon) startNode(ctx context.Context, t control.Target) (any, error) {
	n, err := d.nodeByName(t.Node)
	if err != nil {
		return nil, err
	}
	return nil, n.Start(ctx, func(ctx context.Context) error {
		for _, p := range d.nodePrefixes(n) {
			if err := network.Restore(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// addImage packs a directory into an image and imports it into every node.
func (d *Daemon) addImage(ctx context.Context, t control.Target) (any, error) {
	info, err := os.Stat(t.Dir)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", t.Dir)
	}
	ref, err := images.Normalize(t.Ref)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(d.in.Path("images"), fmt.Sprintf("%x.tar", sha256.Sum256([]byte(ref))))
	if err := images.Write(images.Spec{Refs: []string{ref}, Root: t.Dir}, file); err != nil {
		return nil, err
	}
	return nil, d.importAll(ctx, file, []string{ref})
}

// loadImage imports an image tarball as it is into every node.
func (d *Daemon) loadImage(ctx context.Context, t control.Target) (any, error) {
	refs, err := images.Refs(t.File)
	if err != nil {
		return nil, err
	}
	if err := d.importAll(ctx, t.File, refs); err != nil {
		return nil, err
	}
	return control.Refs{Refs: refs}, nil
}

func (d *Daemon) importAll(ctx context.Context, file string, refs []string) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range d.nodes {
		g.Go(func() error { return n.Import(gctx, file) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	d.addImages(refs...)
	slog.Info("Imported images into every node", "refs", refs)
	return nil
}
