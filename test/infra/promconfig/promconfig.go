// Package promconfig turns the chart's monitoring objects (ServiceMonitor,
// PodMonitor, PrometheusRule) into a plain Prometheus configuration, the way
// the Prometheus Operator turns them, for the fields the chart uses. The
// sandbox's Prometheus (`sandbox up --with prometheus`) and the alert
// drill's run on it, so a wrong port name, selector or relabeling in the
// chart shows as a target that is never scraped.
package promconfig

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Options says where the Prometheus runs.
type Options struct {
	// KubeconfigFile is the service discovery's API server; empty for a
	// Prometheus running in a Pod (its own ServiceAccount).
	KubeconfigFile string
	// TokenFile holds the token sent where a monitor asks for the Pod's own
	// (bearerTokenFile); empty to keep the monitor's path.
	TokenFile string
	// RuleFile is where the rules file is put, read by Prometheus.
	RuleFile string
	// Interval is the global scrape and evaluation interval; the monitors'
	// own intervals win for their jobs.
	Interval string
}

// Config is a Prometheus configuration and the rules it loads.
type Config struct {
	// Prometheus is prometheus.yml.
	Prometheus []byte
	// Rules is the rule file (the PrometheusRule's spec), nil without one.
	Rules []byte
	// Jobs names the scrape jobs, in order.
	Jobs []string
}

// Translate makes the configuration from the rendered objects; objects of
// other kinds are ignored.
func Translate(objects []*unstructured.Unstructured, o Options) (*Config, error) {
	out := &Config{}
	var jobs []any
	for _, obj := range objects {
		var (
			job map[string]any
			err error
		)
		switch obj.GetKind() {
		case "ServiceMonitor":
			job, err = monitorJob(obj, "endpointslice", o)
		case "PodMonitor":
			job, err = monitorJob(obj, "pod", o)
		case "PrometheusRule":
			spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
			if out.Rules, err = yaml.Marshal(spec); err != nil {
				return nil, err
			}
			continue
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		jobs = append(jobs, job)
		out.Jobs = append(out.Jobs, job["job_name"].(string))
	}
	interval := o.Interval
	if interval == "" {
		interval = "30s"
	}
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": interval, "evaluation_interval": interval},
		"scrape_configs": jobs,
	}
	if out.Rules != nil && o.RuleFile != "" {
		cfg["rule_files"] = []string{o.RuleFile}
	}
	var err error
	out.Prometheus, err = yaml.Marshal(cfg)
	return out, err
}

// notInLabelName is what a service discovery meta label name cannot hold.
var notInLabelName = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// labelName is a Kubernetes label as a service discovery meta label names
// it.
func labelName(l string) string { return notInLabelName.ReplaceAllString(l, "_") }

// monitorJob is the scrape job of a ServiceMonitor (role endpointslice) or
// PodMonitor (role pod): its selector, namespaces and only endpoint.
func monitorJob(o *unstructured.Unstructured, role string, opts Options) (map[string]any, error) {
	meta := "__meta_kubernetes_pod_label"
	portLabel := "__meta_kubernetes_pod_container_port_name"
	endpointsField := "podMetricsEndpoints"
	if role == "endpointslice" {
		meta, portLabel, endpointsField = "__meta_kubernetes_service_label", "__meta_kubernetes_endpointslice_port_name", "endpoints"
	}
	var relabel []any
	keep := func(label, regex string) {
		relabel = append(relabel, map[string]any{"source_labels": []string{label}, "regex": regex, "action": "keep"})
	}
	matchLabels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
	keys := make([]string, 0, len(matchLabels))
	for k := range matchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		keep(meta+"_"+labelName(k), regexp.QuoteMeta(matchLabels[k]))
	}
	exprs, _, _ := unstructured.NestedSlice(o.Object, "spec", "selector", "matchExpressions")
	for _, e := range exprs {
		e, _ := e.(map[string]any)
		key, _ := e["key"].(string)
		if e["operator"] != "Exists" || key == "" {
			return nil, fmt.Errorf("selector expression %v is not translated here (only Exists)", e)
		}
		keep(strings.Replace(meta, "_label", "_labelpresent", 1)+"_"+labelName(key), "true")
	}
	endpoints, _, _ := unstructured.NestedSlice(o.Object, "spec", endpointsField)
	if len(endpoints) != 1 {
		return nil, fmt.Errorf("%d endpoints, want 1", len(endpoints))
	}
	ep, _ := endpoints[0].(map[string]any)
	port, _ := ep["port"].(string)
	if port == "" {
		return nil, fmt.Errorf("its endpoint names no port")
	}
	keep(portLabel, regexp.QuoteMeta(port))
	for _, r := range asSlice(ep["relabelings"]) {
		r, _ := r.(map[string]any)
		relabel = append(relabel, map[string]any{"source_labels": r["sourceLabels"], "target_label": r["targetLabel"]})
	}
	sd := map[string]any{"role": role}
	if opts.KubeconfigFile != "" {
		sd["kubeconfig_file"] = opts.KubeconfigFile
	}
	if names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "namespaceSelector", "matchNames"); len(names) > 0 {
		sd["namespaces"] = map[string]any{"names": names}
	} else if anyNS, _, _ := unstructured.NestedBool(o.Object, "spec", "namespaceSelector", "any"); !anyNS {
		// The Prometheus Operator's default: the monitor's own namespace.
		sd["namespaces"] = map[string]any{"names": []string{o.GetNamespace()}}
	}
	job := map[string]any{
		"job_name":              strings.ToLower(o.GetKind()) + "/" + o.GetNamespace() + "/" + o.GetName(),
		"metrics_path":          orDefault(ep["path"], "/metrics"),
		"scheme":                orDefault(ep["scheme"], "http"),
		"kubernetes_sd_configs": []any{sd},
		"relabel_configs":       relabel,
	}
	if ep["interval"] != nil {
		job["scrape_interval"] = ep["interval"]
	}
	if file, ok := ep["bearerTokenFile"].(string); ok {
		if opts.TokenFile != "" {
			file = opts.TokenFile
		}
		job["authorization"] = map[string]any{"credentials_file": file}
	}
	if skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify"); skip {
		job["tls_config"] = map[string]any{"insecure_skip_verify": true}
	}
	return job, nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func orDefault(v any, d string) any {
	if v == nil {
		return d
	}
	return v
}
