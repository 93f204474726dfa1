package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/seed74754924/etcd-operator/internal/sandbox/control"
	"github.com/seed74754924/etcd-operator/internal/sandbox/images"
	"github.com/seed74754924/etcd-operator/internal/sandbox/instance"
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
	d.handle(mux, control.PathPartition, func(ctx context.Context, t control.Target) (any, error) { return nil, d.setLink(ctx, t, false) })
	d.handle(mux, control.PathHeal, func(ctx context.Context, t control.Target) (any, error) { return nil, d.setLink(ctx, t, true) })
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
		APIServer: "https://" + net.JoinHostPort(in.BridgeIP().String(), strconv.Itoa(instance.APIServerPort)),
		PodCIDR:   in.PodCIDR.String(),
	}
	if v, ok := d.setupErr.Load().(string); ok {
		st.Error = v
	}
	for i, n := range d.nodes {
		st.Nodes = append(st.Nodes, control.NodeStatus{Name: n.Name(), Running: n.Running(), Port: instance.KubeletPort(i)})
	}
	if d.images != nil {
		for _, img := range d.images.List() {
			st.Images = append(st.Images, img.Ref)
		}
	}
	return st
}

func (d *Daemon) kill(_ context.Context, t control.Target) (any, error) {
	for _, n := range d.nodes {
		if n.HasPod(t.Namespace, t.Name) {
			return nil, n.KillContainer(t.Namespace, t.Name, t.Container)
		}
	}
	return nil, fmt.Errorf("pod %s/%s is not running on any running node", t.Namespace, t.Name)
}

func (d *Daemon) setLink(ctx context.Context, t control.Target, up bool) error {
	for _, n := range d.nodes {
		if n.HasPod(t.Namespace, t.Name) {
			return n.SetPodLink(ctx, t.Namespace, t.Name, up)
		}
	}
	return fmt.Errorf("pod %s/%s is not running on any running node", t.Namespace, t.Name)
}

func (d *Daemon) stopNode(_ context.Context, t control.Target) (any, error) {
	n, err := d.nodeByName(t.Node)
	if err != nil {
		return nil, err
	}
	n.Stop()
	slog.Info("Node stopped", "node", t.Node)
	return nil, nil
}

func (d *Daemon) startNode(_ context.Context, t control.Target) (any, error) {
	n, err := d.nodeByName(t.Node)
	if err != nil {
		return nil, err
	}
	slog.Info("Node starting", "node", t.Node)
	// Not the request's context: the node outlives the request.
	return nil, n.Start(context.Background())
}

func (d *Daemon) addImage(_ context.Context, t control.Target) (any, error) {
	info, err := os.Stat(t.Dir)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", t.Dir)
	}
	return nil, d.images.Add(images.Image{Ref: t.Ref, Root: t.Dir, Env: []string{images.DefaultPath}, Source: "directory"})
}

func (d *Daemon) loadImage(_ context.Context, t control.Target) (any, error) {
	loaded, err := images.Load(t.File, d.in.Path("images"))
	if err != nil {
		return nil, err
	}
	if err := d.images.Add(loaded...); err != nil {
		return nil, err
	}
	out := control.Refs{}
	for _, img := range loaded {
		ref, _ := images.Normalize(img.Ref)
		out.Refs = append(out.Refs, ref)
	}
	return out, nil
}
