package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// A hollow member is a member of a fake Cluster served over etcd's own
// wire protocol: gRPC (Cluster, Maintenance, Auth) and the /version
// document on its client address, /health on its metrics address, so a
// real client (the operator's, clientv3, etcdctl) talks to it as to etcd.
// Thousands fit in one process: a member costs two listeners and no disk.
// Every rule is the fake's (the contract test holds it to etcd's), and
// every refusal is the gRPC error etcd gives.

// HollowMember says where a hollow member listens and how the cluster
// knows it. ClientURL and PeerURL are what etcd lists and what clients are
// told (a Pod's DNS name, say); Addr is the IP it listens on, with the
// client port of ClientURL and MetricsPort.
type HollowMember struct {
	Name, PeerURL, ClientURL string
	Addr                     string
	MetricsPort              int
	// Version is the etcd version it runs (DefaultVersion when empty).
	Version string
}

// Hollow serves members of one fake Cluster.
type Hollow struct {
	c  *Cluster
	mu sync.Mutex
	// up are the members whose listeners are open, by name.
	up map[string]*hollowServer
	// users are the users etcd was asked to add before auth is enabled
	// (only root matters to the fake), with their password.
	users map[string]string
	// calls counts the requests the members answered (gRPC, /version,
	// /health).
	calls atomic.Int64
	// RequestTimeout is how long a request that cannot be served through
	// raft waits before etcd says so, when the client set no deadline
	// (etcd's own is about 7 s).
	RequestTimeout time.Duration
}

// NewHollow returns a server for c's members; none listens yet.
func NewHollow(c *Cluster) *Hollow {
	return &Hollow{c: c, up: map[string]*hollowServer{}, users: map[string]string{}, RequestTimeout: 7 * time.Second}
}

type hollowServer struct {
	m              HollowMember
	client, health *http.Server
	grpc           *grpc.Server
}

// Bootstrap starts m as the seed of a new cluster.
func (h *Hollow) Bootstrap(m HollowMember) error {
	return h.open(m, func() error {
		h.c.BootstrapVersion(m.Name, m.PeerURL, m.ClientURL, versionOr(m.Version))
		return nil
	})
}

// Start starts m, which the membership must list (added through a
// client), as etcd does when its process starts.
func (h *Hollow) Start(m HollowMember) error {
	return h.open(m, func() error { return h.c.StartVersion(m.PeerURL, m.Name, m.ClientURL, versionOr(m.Version)) })
}

// Stop stops the member: its process is gone and its ports refuse.
func (h *Hollow) Stop(name string) {
	h.mu.Lock()
	s := h.up[name]
	delete(h.up, name)
	h.mu.Unlock()
	if s == nil {
		return
	}
	h.c.Stop(s.m.PeerURL)
	s.close()
}

// Close stops every member.
func (h *Hollow) Close() {
	h.mu.Lock()
	names := make([]string, 0, len(h.up))
	for n := range h.up {
		names = append(names, n)
	}
	h.mu.Unlock()
	for _, n := range names {
		h.Stop(n)
	}
}

func versionOr(v string) string {
	if v == "" {
		return DefaultVersion
	}
	return v
}

// open binds the member's ports before the fake starts it, so that a
// member the fake runs always answers.
func (h *Hollow) open(m HollowMember, start func() error) error {
	u, err := url.Parse(m.ClientURL)
	if err != nil || u.Port() == "" {
		return fmt.Errorf("hollow %s: client URL %q has no port", m.Name, m.ClientURL)
	}
	cl, err := net.Listen("tcp", net.JoinHostPort(m.Addr, u.Port()))
	if err != nil {
		return fmt.Errorf("hollow %s: %w", m.Name, err)
	}
	ml, err := net.Listen("tcp", net.JoinHostPort(m.Addr, fmt.Sprint(m.MetricsPort)))
	if err != nil {
		_ = cl.Close()
		return fmt.Errorf("hollow %s: %w", m.Name, err)
	}
	if err := start(); err != nil {
		_ = cl.Close()
		_ = ml.Close()
		return err
	}
	member := &hollowMember{h: h, m: m}
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		h.calls.Add(1)
		if member.cut() {
			// Its client port drops packets: the call waits for its end.
			return nil, member.wireError(ctx, context.DeadlineExceeded)
		}
		return next(ctx, req)
	}
	s := &hollowServer{m: m, grpc: grpc.NewServer(grpc.UnaryInterceptor(count))}
	pb.RegisterClusterServer(s.grpc, member)
	pb.RegisterMaintenanceServer(s.grpc, member)
	pb.RegisterAuthServer(s.grpc, member)
	// etcd serves gRPC and HTTP on its client port alike.
	mux := http.NewServeMux()
	mux.HandleFunc("/version", member.version)
	both := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.grpc.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	// gRPC comes as HTTP/2 without TLS, /version as HTTP/1.1.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	s.client = &http.Server{Handler: both, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
	hm := http.NewServeMux()
	hm.HandleFunc("/health", member.healthz)
	s.health = &http.Server{Handler: hm, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.client.Serve(cl) }()
	go func() { _ = s.health.Serve(ml) }()
	h.mu.Lock()
	h.up[m.Name] = s
	h.mu.Unlock()
	return nil
}

func (s *hollowServer) close() {
	_ = s.client.Close()
	_ = s.health.Close()
	s.grpc.Stop()
}

// hollowMember answers the requests that reach one member.
type hollowMember struct {
	pb.UnimplementedClusterServer
	pb.UnimplementedMaintenanceServer
	pb.UnimplementedAuthServer
	h *Hollow
	m HollowMember
}

// client is the fake client of a request: served by this member, with the
// request's token.
func (s *hollowMember) client(ctx context.Context) *client {
	f := &client{c: s.h.c, cfg: etcd.Config{Endpoints: []string{s.m.ClientURL}}}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if t := md.Get(rpctypes.TokenFieldNameGRPC); len(t) > 0 {
			f.token = t[0]
		}
	}
	return f
}

func (s *hollowMember) header() *pb.ResponseHeader {
	s.h.c.mu.Lock()
	defer s.h.c.mu.Unlock()
	h := &pb.ResponseHeader{ClusterId: s.h.c.clusterID}
	if m := s.h.c.byClient(s.m.ClientURL); m != nil {
		h.MemberId, h.RaftTerm = m.ID, m.term
	}
	return h
}

// cut reports whether the member's client port drops every packet
// (Cluster.CutClients).
func (s *hollowMember) cut() bool {
	s.h.c.mu.Lock()
	defer s.h.c.mu.Unlock()
	return s.h.c.cutAt(s.m.ClientURL) != nil
}

// wireError turns the fake's refusal into etcd's gRPC error. A request
// etcd would hold (no quorum, a port that drops packets) waits for the
// client's deadline, or etcd's own request timeout, as etcd does.
func (s *hollowMember) wireError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		wait := s.h.RequestTimeout
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			wait = time.Until(d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
			return rpctypes.ErrGRPCTimeout
		}
	}
	for _, e := range []struct {
		is   error
		wire error
	}{
		{etcd.ErrUnhealthy, rpctypes.ErrGRPCUnhealthy},
		{etcd.ErrLearnerNotReady, rpctypes.ErrGRPCLearnerNotReady},
		{etcd.ErrMemberNotFound, rpctypes.ErrGRPCMemberNotFound},
		{etcd.ErrTooManyLearners, rpctypes.ErrGRPCTooManyLearners},
		{etcd.ErrPeerURLExists, rpctypes.ErrGRPCPeerURLExist},
		{etcd.ErrMemberNotLearner, rpctypes.ErrGRPCMemberNotLearner},
		{etcd.ErrNotLeader, rpctypes.ErrGRPCNotLeader},
		{etcd.ErrBadTransferee, rpctypes.ErrGRPCBadLeaderTransferee},
		{etcd.ErrAuthTokenInvalid, rpctypes.ErrGRPCInvalidAuthToken},
		{etcd.ErrAuthFailed, rpctypes.ErrGRPCAuthFailed},
		{etcd.ErrAuthRequired, rpctypes.ErrGRPCUserEmpty},
		{etcd.ErrLearnerRefused, rpctypes.ErrGRPCNotSupportedForLearner},
		{syscall.ECONNREFUSED, rpctypes.ErrGRPCStopped},
	} {
		if errors.Is(err, e.is) {
			return e.wire
		}
	}
	// The fake's messages for the rest are etcd's own.
	for _, wire := range []error{rpctypes.ErrGRPCNotSupportedForLearner, rpctypes.ErrGRPCMemberNotLearner} {
		if strings.Contains(err.Error(), rpctypes.ErrorDesc(wire)) {
			return wire
		}
	}
	return err
}

func (s *hollowMember) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	l, err := s.client(ctx).MemberList(ctx)
	if err != nil {
		return nil, s.wireError(ctx, err)
	}
	resp := &pb.MemberListResponse{Header: s.header()}
	for _, m := range l.Members {
		resp.Members = append(resp.Members, wireMember(m))
	}
	return resp, nil
}

func wireMember(m etcd.Member) *pb.Member {
	return &pb.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
}

func (s *hollowMember) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	if !r.IsLearner {
		// The operator adds learners only; the fake models no other add.
		return nil, status.Error(codes.Unimplemented, "hollow: only learners are added")
	}
	f := s.client(ctx)
	m, err := f.MemberAddAsLearner(ctx, r.PeerURLs)
	if err != nil {
		return nil, s.wireError(ctx, err)
	}
	l, err := f.MemberList(ctx)
	if err != nil {
		return nil, s.wireError(ctx, err)
	}
	resp := &pb.MemberAddResponse{Header: s.header(), Member: wireMember(*m)}
	for _, x := range l.Members {
		resp.Members = append(resp.Members, wireMember(x))
	}
	return resp, nil
}

func (s *hollowMember) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	if err := s.client(ctx).MemberPromote(ctx, r.ID); err != nil {
		return nil, s.wireError(ctx, err)
	}
	return &pb.MemberPromoteResponse{Header: s.header()}, nil
}

func (s *hollowMember) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	if err := s.client(ctx).MemberRemove(ctx, r.ID); err != nil {
		return nil, s.wireError(ctx, err)
	}
	return &pb.MemberRemoveResponse{Header: s.header()}, nil
}

func (s *hollowMember) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	st, err := s.client(ctx).Status(ctx, s.m.ClientURL)
	if err != nil {
		return nil, s.wireError(ctx, err)
	}
	resp := &pb.StatusResponse{
		Header:  &pb.ResponseHeader{ClusterId: st.ClusterID, MemberId: st.MemberID, RaftTerm: st.RaftTerm},
		Version: st.Version, DbSize: st.DBSize, DbSizeInUse: st.DBSizeInUse, Leader: st.Leader,
		RaftIndex: st.RaftIndex, RaftTerm: st.RaftTerm, RaftAppliedIndex: st.RaftAppliedIndex,
		Errors: st.Errors, IsLearner: st.IsLearner,
	}
	if st.DowngradeTarget != "" {
		resp.DowngradeInfo = &pb.DowngradeInfo{Enabled: true, TargetVersion: st.DowngradeTarget}
	}
	return resp, nil
}

func (s *hollowMember) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	if err := s.client(ctx).MoveLeader(ctx, r.TargetID); err != nil {
		return nil, s.wireError(ctx, err)
	}
	return &pb.MoveLeaderResponse{Header: s.header()}, nil
}

func (s *hollowMember) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := s.client(ctx).Defragment(ctx, s.m.ClientURL); err != nil {
		return nil, s.wireError(ctx, err)
	}
	return &pb.DefragmentResponse{Header: s.header()}, nil
}

func (s *hollowMember) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	f := s.client(ctx)
	var alarms []etcd.Alarm
	var err error
	switch r.Action {
	case pb.AlarmRequest_GET:
		alarms, err = f.AlarmList(ctx)
	case pb.AlarmRequest_DEACTIVATE:
		a := etcd.Alarm{MemberID: r.MemberID}
		if r.Alarm != pb.AlarmType_NONE {
			a.Type = r.Alarm.String()
		}
		alarms, err = f.AlarmDisarm(ctx, a)
	default:
		return nil, fmt.Errorf("hollow: alarm action %s is not served", r.Action)
	}
	if err != nil {
		return nil, s.wireError(ctx, err)
	}
	resp := &pb.AlarmResponse{Header: s.header()}
	for _, a := range alarms {
		resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: a.MemberID, Alarm: pb.AlarmType(pb.AlarmType_value[a.Type])})
	}
	return resp, nil
}

func (s *hollowMember) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	action := map[pb.DowngradeRequest_DowngradeAction]etcd.DowngradeAction{
		pb.DowngradeRequest_VALIDATE: etcd.DowngradeValidate,
		pb.DowngradeRequest_ENABLE:   etcd.DowngradeEnable,
		pb.DowngradeRequest_CANCEL:   etcd.DowngradeCancel,
	}[r.Action]
	v, err := s.client(ctx).Downgrade(ctx, action, r.Version)
	if err != nil {
		return nil, s.wireError(ctx, err)
	}
	return &pb.DowngradeResponse{Header: s.header(), Version: v + ".0"}, nil
}

func (s *hollowMember) AuthStatus(ctx context.Context, _ *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	f := s.client(ctx)
	on, err := f.AuthEnabled(ctx)
	if err == nil && on {
		s.h.c.mu.Lock()
		err = f.authInfo()
		s.h.c.mu.Unlock()
	}
	if err != nil {
		return nil, s.wireError(ctx, err)
	}
	return &pb.AuthStatusResponse{Header: s.header(), Enabled: on}, nil
}

func (s *hollowMember) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	s.h.c.mu.Lock()
	on := s.h.c.AuthOn
	s.h.c.mu.Unlock()
	token, err := s.h.c.authenticate(etcd.Config{Username: r.Name, Password: r.Password}, s.m.ClientURL)
	if err != nil {
		return nil, s.wireError(ctx, err)
	}
	if !on {
		return nil, rpctypes.ErrGRPCAuthNotEnabled
	}
	return &pb.AuthenticateResponse{Header: s.header(), Token: token}, nil
}

// UserAdd, UserGrantRole and AuthEnable are the steps of
// etcd.Client.EnableRootAuth; the fake knows only root, so they are kept
// until AuthEnable turns authentication on with root's password.
func (s *hollowMember) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	if err := s.raft(ctx); err != nil {
		return nil, err
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if _, ok := s.h.users[r.Name]; ok {
		return nil, rpctypes.ErrGRPCUserAlreadyExist
	}
	s.h.users[r.Name] = r.Password
	return &pb.AuthUserAddResponse{Header: s.header()}, nil
}

func (s *hollowMember) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	if err := s.raft(ctx); err != nil {
		return nil, err
	}
	s.h.mu.Lock()
	_, ok := s.h.users[r.User]
	s.h.mu.Unlock()
	if !ok {
		return nil, rpctypes.ErrGRPCUserNotFound
	}
	return &pb.AuthUserGrantRoleResponse{Header: s.header()}, nil
}

func (s *hollowMember) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	s.h.c.mu.Lock()
	on := s.h.c.AuthOn
	s.h.c.mu.Unlock()
	if on {
		if err := s.client(ctx).ChangeRootPassword(ctx, r.Password); err != nil {
			return nil, s.wireError(ctx, err)
		}
	} else if err := s.raft(ctx); err != nil {
		return nil, err
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if _, ok := s.h.users[r.Name]; !ok && !on {
		return nil, rpctypes.ErrGRPCUserNotFound
	}
	s.h.users[r.Name] = r.Password
	return &pb.AuthUserChangePasswordResponse{Header: s.header()}, nil
}

func (s *hollowMember) AuthEnable(ctx context.Context, _ *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	s.h.mu.Lock()
	pw, ok := s.h.users["root"]
	s.h.mu.Unlock()
	if !ok {
		return nil, rpctypes.ErrGRPCRootUserNotExist
	}
	if err := s.client(ctx).EnableRootAuth(ctx, pw); err != nil {
		return nil, s.wireError(ctx, err)
	}
	return &pb.AuthEnableResponse{Header: s.header()}, nil
}

// raft is what a write through raft needs: a member that reaches a
// quorum, and valid credentials while auth is on.
func (s *hollowMember) raft(ctx context.Context) error {
	f := s.client(ctx)
	s.h.c.mu.Lock()
	_, err := f.consensus()
	s.h.c.mu.Unlock()
	return s.wireError(ctx, err)
}

// version serves etcd's /version document.
func (s *hollowMember) version(w http.ResponseWriter, r *http.Request) {
	s.h.calls.Add(1)
	if s.cut() {
		<-r.Context().Done()
		return
	}
	f := s.client(r.Context())
	cv, err := f.ClusterVersion(r.Context(), s.m.ClientURL)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.h.c.mu.Lock()
	v := DefaultVersion
	if m := s.h.c.byClient(s.m.ClientURL); m != nil {
		v = m.version
	}
	s.h.c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"etcdserver": v, "etcdcluster": cv + ".0"})
}

// healthz serves etcd's /health document on the metrics listener.
func (s *hollowMember) healthz(w http.ResponseWriter, r *http.Request) {
	s.h.calls.Add(1)
	pu, err := url.Parse(s.m.PeerURL)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	err = s.client(r.Context()).Health(r.Context(), "http://"+pu.Hostname()+"/health")
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"health": "false", "reason": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"health": "true", "reason": ""})
}

// Healthy reports what the member's /health would say.
func (h *Hollow) Healthy(name string) bool {
	h.mu.Lock()
	s := h.up[name]
	h.mu.Unlock()
	if s == nil {
		return false
	}
	pu, err := url.Parse(s.m.PeerURL)
	if err != nil {
		return false
	}
	f := &client{c: h.c, cfg: etcd.Config{Endpoints: []string{s.m.ClientURL}}}
	return f.Health(context.Background(), "http://"+pu.Hostname()+"/health") == nil
}

// Up reports whether the member's listeners are open.
func (h *Hollow) Up(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up[name] != nil
}

// Listed reports whether etcd's membership lists the peer URL.
func (h *Hollow) Listed(peerURL string) bool {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.c.byPeer(peerURL) != nil
}

// Calls counts the requests the members answered so far.
func (h *Hollow) Calls() int64 { return h.calls.Load() }

// Cluster is the fake cluster the members belong to.
func (h *Hollow) Cluster() *Cluster { return h.c }
