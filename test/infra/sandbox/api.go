package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/control"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
)

// Dir is the sandbox's directory.
func (s *Sandbox) Dir() string { return s.in.Dir }

// Name is the sandbox's instance id.
func (s *Sandbox) Name() string { return s.in.Name }

// Instance describes the sandbox's names and addresses.
func (s *Sandbox) Instance() instance.Instance { return *s.in }

// Kubeconfig is the path of the admin kubeconfig.
func (s *Sandbox) Kubeconfig() string { return s.in.Kubeconfig() }

// LogDir holds the daemon's and the control plane's logs.
func (s *Sandbox) LogDir() string { return s.in.LogDir() }

// PodLogDir holds the containers' logs, one directory per Pod.
func (s *Sandbox) PodLogDir() string { return filepath.Join(s.in.LogDir(), "pods") }

// RESTConfig is a client configuration with admin rights.
func (s *Sandbox) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// Status asks the daemon how it is.
func (s *Sandbox) Status(ctx context.Context) (control.Status, error) {
	var st control.Status
	err := s.client.Call(ctx, control.PathStatus, nil, &st)
	return st, err
}

// Down stops the sandbox and removes everything it made.
func (s *Sandbox) Down(ctx context.Context) error { return Down(ctx, s.in.Dir, s.in.Name) }

// Kill SIGKILLs a container (every container of the Pod when container is
// empty); its node restarts it by the Pod's restart policy.
func (s *Sandbox) Kill(ctx context.Context, ns, pod, container string) error {
	return s.client.Call(ctx, control.PathKill, control.Target{Namespace: ns, Name: pod, Container: container}, nil)
}

// StopNode is a power cut of one node: its Pods' processes die and it stops
// heartbeating and serving.
func (s *Sandbox) StopNode(ctx context.Context, node string) error {
	return s.client.Call(ctx, control.PathStopNode, control.Target{Node: node}, nil)
}

// StartNode brings a stopped node back: it finalises Pods deleted
// meanwhile and restarts those still bound to it.
func (s *Sandbox) StartNode(ctx context.Context, node string) error {
	return s.client.Call(ctx, control.PathStartNode, control.Target{Node: node}, nil)
}

// Partition cuts a Pod off the network (from every other Pod and the host).
func (s *Sandbox) Partition(ctx context.Context, ns, pod string) error {
	return s.client.Call(ctx, control.PathPartition, control.Target{Namespace: ns, Name: pod}, nil)
}

// PartitionPorts cuts a Pod's TCP traffic on the given ports only, both
// ways: nothing reaches the Pod on those ports and the Pod reaches no one's
// ports of those numbers, while its other traffic flows. PartitionPorts(ctx,
// ns, member, 2380) cuts an etcd member off from its peers but not from its
// clients. Cuts add up; Heal lifts them all.
func (s *Sandbox) PartitionPorts(ctx context.Context, ns, pod string, ports ...int) error {
	err := s.client.Call(ctx, control.PathPartitionPorts, control.Target{Namespace: ns, Name: pod, Ports: ports}, nil)
	if se := (*control.StatusError)(nil); errors.As(err, &se) && se.Code == http.StatusNotFound {
		return fmt.Errorf("the daemon of sandbox %s cannot cut single ports (it was started by an older build; restart the sandbox): %w", s.in.Name, err)
	}
	return err
}

// Heal reconnects a partitioned Pod: it lifts both Partition and every
// PartitionPorts of the Pod.
func (s *Sandbox) Heal(ctx context.Context, ns, pod string) error {
	return s.client.Call(ctx, control.PathHeal, control.Target{Namespace: ns, Name: pod}, nil)
}

// Wipe empties the volume of a PersistentVolumeClaim, live or not.
func (s *Sandbox) Wipe(ctx context.Context, ns, pvc string) error {
	return s.client.Call(ctx, control.PathWipe, control.Target{Namespace: ns, Name: pvc}, nil)
}

// AddImage registers a directory as the root filesystem of ref.
func (s *Sandbox) AddImage(ctx context.Context, ref, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return s.client.Call(ctx, control.PathImageAdd, control.Target{Ref: ref, Dir: abs}, nil)
}

// LoadImage unpacks an OCI or docker image tarball and returns the
// references it registered.
func (s *Sandbox) LoadImage(ctx context.Context, tarball string) ([]string, error) {
	abs, err := filepath.Abs(tarball)
	if err != nil {
		return nil, err
	}
	var refs control.Refs
	err = s.client.Call(ctx, control.PathImageLoad, control.Target{File: abs}, &refs)
	return refs.Refs, err
}
