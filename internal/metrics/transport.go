package metrics

import (
	"net/http"
	"strings"
)

// Transport wraps the transport of the operator's API client configuration,
// so that every request the process sends to the API server is counted by
// verb and resource: the controllers' own, the caches' lists and watches,
// leader election, discovery, and the metrics endpoint's token and access
// reviews. client-go's rest_client_requests_total counts the same requests
// by method and host only, which cannot tell a Lease renewal from a read.
func (r *Requests) Transport(rt http.RoundTripper) http.RoundTripper {
	if r == nil {
		return rt
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		verb, resource := requestOf(req)
		r.all.WithLabelValues(verb, resource).Inc()
		return rt.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// requestOf names a request to the API server the way its audit log does:
// get, list, watch, create, update, patch, delete or deletecollection, of
// a resource (plural, with its subresource after a slash). Discovery and
// other paths outside the resource APIs are "discovery" and "other".
func requestOf(req *http.Request) (verb, resource string) {
	path := strings.Trim(req.URL.Path, "/")
	parts := strings.Split(path, "/")
	var rest []string
	switch {
	case parts[0] == "api" && len(parts) > 2:
		rest = parts[2:] // api/v1/...
	case parts[0] == "apis" && len(parts) > 3:
		rest = parts[3:] // apis/group/version/...
	case parts[0] == "api" || parts[0] == "apis" || parts[0] == "openapi" || parts[0] == "version":
		return strings.ToLower(req.Method), "discovery"
	default:
		return strings.ToLower(req.Method), "other"
	}
	if rest[0] == "namespaces" && len(rest) > 2 && rest[2] != "status" && rest[2] != "finalize" {
		rest = rest[2:] // a namespaced resource, not a namespace's subresource
	}
	resource = rest[0]
	named := len(rest) > 1
	if len(rest) > 2 {
		resource += "/" + rest[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(req.Method)
	}
	return verb, resource
}
