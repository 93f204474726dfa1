package etcd

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestLoginTriesVotersFirstAndStopsOnRejectedCredentials(t *testing.T) {
	refusals := map[string]error{
		"learner": errors.New("etcdserver: rpc not supported for learner"),
		"down":    errors.New("dial tcp: connection refused"),
		"wrong":   errors.New("etcdserver: authentication failed, invalid user ID or password"),
	}
	for _, tc := range []struct {
		name      string
		via, eps  []string
		wantToken string
		wantErr   error
		wantTried []string
	}{
		{"learner alone: through a voter", []string{"down", "voter"}, []string{"learner"}, "token of voter", nil, []string{"down", "voter"}},
		{"no voter known", nil, []string{"learner", "voter"}, "token of voter", nil, []string{"learner", "voter"}},
		{"each member once", []string{"voter"}, []string{"voter"}, "token of voter", nil, []string{"voter"}},
		{"rejected credentials end the search", []string{"wrong", "voter"}, []string{"voter"}, "", ErrAuthFailed, []string{"wrong"}},
		{"nobody logs in", []string{"down"}, []string{"learner"}, "", ErrLearnerRefused, []string{"down", "learner"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tried []string
			token, err := Login(context.Background(), Config{Username: "root", LoginVia: tc.via, Endpoints: tc.eps},
				func(_ context.Context, ep string) (string, error) {
					tried = append(tried, ep)
					if err := refusals[ep]; err != nil {
						return "", err
					}
					return "token of " + ep, nil
				})
			if token != tc.wantToken || !slices.Equal(tried, tc.wantTried) {
				t.Errorf("token %q after %v, want %q after %v", token, tried, tc.wantToken, tc.wantTried)
			}
			if (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
		})
	}
}
