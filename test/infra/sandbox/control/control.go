// Package control is the protocol between the sandbox daemon and its
// clients (the CLI and the Go package): JSON over HTTP on the daemon's unix
// socket D/control.sock.
package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Paths served by the daemon.
const (
	PathStatus    = "/status"
	PathKill      = "/fault/kill"
	PathStopNode  = "/fault/stop-node"
	PathStartNode = "/fault/start-node"
	PathPartition = "/fault/partition"
	// PathPartitionPorts is a path of its own, not a field of the full
	// partition's request, so that a daemon built before it answers 404
	// instead of ignoring the ports and cutting everything.
	PathPartitionPorts = "/fault/partition-ports"
	PathHeal           = "/fault/heal"
	PathWipe           = "/fault/wipe"
	PathImageAdd       = "/images/add"
	PathImageLoad      = "/images/load"
	PathShutdown       = "/shutdown"
)

// Status is the daemon's report.
type Status struct {
	Name       string       `json:"name"`
	Dir        string       `json:"dir"`
	PID        int          `json:"pid"`
	Ready      bool         `json:"ready"`
	Error      string       `json:"error,omitempty"`
	Kubeconfig string       `json:"kubeconfig"`
	APIServer  string       `json:"apiServer"`
	PodCIDR    string       `json:"podCIDR"`
	Nodes      []NodeStatus `json:"nodes"`
	Images     []string     `json:"images"`
}

// NodeStatus is one node's state.
type NodeStatus struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
	Port    int    `json:"kubeletPort"`
	Address string `json:"kubeletAddress"`
}

// Target names what a fault or image call acts on.
type Target struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Container string `json:"container,omitempty"`
	Node      string `json:"node,omitempty"`
	Ref       string `json:"ref,omitempty"`
	Dir       string `json:"dir,omitempty"`
	File      string `json:"file,omitempty"`
	// Ports are the TCP ports a port partition cuts.
	Ports []int `json:"ports,omitempty"`
}

// Refs is the answer of an image load.
type Refs struct {
	Refs []string `json:"refs"`
}

// StatusError is the daemon's refusal of a call: its HTTP status and what
// it said.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return e.Message }

// Client calls the daemon.
type Client struct {
	http *http.Client
}

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}
	return &Client{http: &http.Client{Transport: tr, Timeout: 10 * time.Minute}}
}

// Call posts in (GET when nil) to path and decodes the answer into out.
func (c *Client) Call(ctx context.Context, path string, in, out any) error {
	method, body := http.MethodGet, io.Reader(nil)
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		method, body = http.MethodPost, bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://sandbox"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &StatusError{Code: resp.StatusCode, Message: string(bytes.TrimSpace(data))}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding the daemon's answer: %w", err)
	}
	return nil
}
