// Package lifecycle holds tests that run the cluster and member controllers
// together against a fake API server, a fake etcd and a simulated kubelet, to
// check the membership state machine as a whole: bootstrap, scaling, pausing,
// repair, and recovery from a crash between any two API calls.
package lifecycle
