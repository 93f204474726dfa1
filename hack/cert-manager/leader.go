package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
)

// leaseName is upstream's lock name, so this binary and a real cert-manager
// installation never lead at the same time in one cluster.
const leaseName = "cert-manager-controller"

// startLeaderElection campaigns for the Lease in the errgroup and returns a
// channel closed once this process leads. Losing the Lease ends the group
// with an error, so the process exits and its Pod restarts as a follower.
func startLeaderElection(ctx context.Context, g *errgroup.Group, factory *controllerpkg.ContextFactory, o options) (<-chan struct{}, error) {
	id, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("reading the hostname for the leader-election identity: %w", err)
	}
	c, err := factory.Build("leader-election")
	if err != nil {
		return nil, err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.leaderElectionNamespace, leaseName,
		c.Client.CoreV1(), c.Client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id, EventRecorder: c.Recorder})
	if err != nil {
		return nil, fmt.Errorf("creating the leader-election lock: %w", err)
	}
	leading := make(chan struct{})
	lost := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   leaseTimings.lease,
		RenewDeadline:   leaseTimings.renew,
		RetryPeriod:     leaseTimings.retry,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(leading) },
			OnStoppedLeading: func() { close(lost) },
		},
	})
	if err != nil {
		return nil, err
	}
	g.Go(func() error {
		elector.Run(ctx)
		select {
		case <-lost:
			if ctx.Err() == nil {
				return errors.New("lost the leader-election Lease")
			}
		default:
		}
		return nil
	})
	return leading, nil
}
