package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// healthServer answers /livez while the process runs and /readyz once the
// controllers' informer caches have synced, which is what a Deployment's
// probes and `bin/sandbox up` wait for.
type healthServer struct {
	address string
	ready   atomic.Bool
}

func newHealthServer(address string) *healthServer {
	return &healthServer{address: address}
}

func (h *healthServer) setReady() { h.ready.Store(true) }

func (h *healthServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.ready.Load() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// serve listens until ctx ends.
func (h *healthServer) serve(ctx context.Context) error {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", h.address)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
