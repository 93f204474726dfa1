package kubectletcd

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Report is a diagnostics bundle of one cluster: its objects (Secrets
// redacted), its events, its members' and the operator's logs over a
// window, and what each member's etcd says. -o json prints it whole; by
// default its files go into a .tar.gz.
type Report struct {
	Kind      string    `json:"kind"`
	Cluster   string    `json:"cluster"`
	Namespace string    `json:"namespace"`
	Collected time.Time `json:"collected"`
	Since     string    `json:"since"`
	Plugin    string    `json:"pluginVersion"`
	// Files are the bundle's files by path, in the tarball as they are here.
	Files map[string]string `json:"files"`
	// Missing is what could not be collected, and why.
	Missing []string `json:"missing,omitempty"`
}

// reportLogLimit bounds each container's log in the bundle (its end is kept
// by asking for the window's tail).
const reportLogLimit = 8 << 20

type reportOptions struct {
	file             string
	since            time.Duration
	operatorSelector string
	json             bool
}

func (a *app) reportCommand() *cobra.Command {
	o := reportOptions{}
	var output string
	c := &cobra.Command{
		Use:   "report",
		Short: "Collect a diagnostics bundle of the -c cluster to attach to a ticket",
		Long: `Collect what a maintainer asks for when a cluster misbehaves, into one file:
the EtcdCluster, its EtcdMembers, Pods, claims, Services, disruption budget,
snapshots, schedules and defragmentations; the namespace's events about them;
the Secrets the cluster uses, with their values left out (names, types and
key sizes only); the logs of every member Pod's containers (and of their
last run, when one restarted) and of the operator's Pods over --since; and
each member's etcd status, the membership and the alarms. What could not be
collected (a member that does not answer, logs you may not read) is listed
in README.txt, and the rest is collected anyway.

The bundle is written to --file (etcd-report-<namespace>-<cluster>-<time>.tar.gz
by default); -o json prints it to stdout instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "":
			case "json":
				o.json = true
			default:
				return usageError(fmt.Sprintf("-o %q: report prints json, or writes a .tar.gz without -o", output))
			}
			if a.opts.Cluster == "" || a.opts.Pod != "" {
				return usageError("report needs the EtcdCluster with -c/--cluster (not -p)")
			}
			if o.since <= 0 {
				return usageError("--since must be positive")
			}
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				r := s.report(ctx, a.version, o)
				return writeReport(cmd, r, o)
			})
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "", "json: print the report to stdout instead of writing a .tar.gz")
	c.Flags().StringVar(&o.file, "file", "", "where to write the .tar.gz (default etcd-report-<namespace>-<cluster>-<time>.tar.gz)")
	c.Flags().DurationVar(&o.since, "since", time.Hour, "how far back the logs go")
	c.Flags().StringVar(&o.operatorSelector, "operator-selector", "app.kubernetes.io/name=etcd-operator",
		"label selector of the operator's Pods, whose logs are collected from every namespace")
	return c
}

// reporter collects a report's files.
type reporter struct {
	s *session
	r *Report
	o reportOptions
	// names are the objects the cluster's events may be about.
	names map[string]bool
}

func (s *session) report(ctx context.Context, version string, o reportOptions) *Report {
	now := time.Now().UTC()
	rp := &reporter{s: s, o: o, names: map[string]bool{}, r: &Report{
		Kind: "EtcdReport", Cluster: s.cluster.Name, Namespace: s.cluster.Namespace, Collected: now,
		Since: o.since.String(), Plugin: version, Files: map[string]string{},
	}}
	rp.objects(ctx)
	rp.secrets(ctx)
	rp.events(ctx)
	rp.etcd(ctx)
	rp.memberLogs(ctx)
	rp.operatorLogs(ctx)
	rp.readme()
	return rp.r
}

func (rp *reporter) missing(format string, args ...any) {
	rp.r.Missing = append(rp.r.Missing, fmt.Sprintf(format, args...))
}

// put adds a file of YAML; the objects lose their managed fields, which
// say nothing a maintainer needs and triple the size.
func (rp *reporter) put(name string, v any) {
	out, err := yaml.Marshal(v)
	if err != nil {
		rp.missing("%s: %v", name, err)
		return
	}
	rp.r.Files[name] = string(out)
}

// objects lists the cluster's own objects and those of its namespace that
// belong to it.
func (rp *reporter) objects(ctx context.Context) {
	c := rp.s.cluster.DeepCopy()
	rp.names[c.Name] = true
	rp.put("objects/etcdcluster.yaml", trimmed(c))
	in := client.InNamespace(c.Namespace)
	ofCluster := client.MatchingLabels{manifest.LabelCluster: c.Name}
	for _, l := range []struct {
		file string
		list client.ObjectList
		opts []client.ListOption
		keep func(client.Object) bool
	}{
		{"objects/etcdmembers.yaml", &v1alpha2.EtcdMemberList{}, []client.ListOption{in},
			func(o client.Object) bool { return o.(*v1alpha2.EtcdMember).Spec.ClusterName == c.Name }},
		{"objects/pods.yaml", &corev1.PodList{}, []client.ListOption{in, ofCluster}, nil},
		{"objects/persistentvolumeclaims.yaml", &corev1.PersistentVolumeClaimList{}, []client.ListOption{in, ofCluster}, nil},
		{"objects/services.yaml", &corev1.ServiceList{}, []client.ListOption{in, ofCluster}, nil},
		{"objects/poddisruptionbudgets.yaml", &policyv1.PodDisruptionBudgetList{}, []client.ListOption{in, ofCluster}, nil},
		{"objects/etcdsnapshots.yaml", &v1alpha2.EtcdSnapshotList{}, []client.ListOption{in},
			func(o client.Object) bool { return o.(*v1alpha2.EtcdSnapshot).Spec.ClusterRef.Name == c.Name }},
		{"objects/etcdsnapshotschedules.yaml", &v1alpha2.EtcdSnapshotScheduleList{}, []client.ListOption{in},
			func(o client.Object) bool {
				return o.(*v1alpha2.EtcdSnapshotSchedule).Spec.SnapshotTemplate.Spec.ClusterRef.Name == c.Name
			}},
		{"objects/etcddefrags.yaml", &v1alpha2.EtcdDefragList{}, []client.ListOption{in},
			func(o client.Object) bool { return o.(*v1alpha2.EtcdDefrag).Spec.ClusterRef.Name == c.Name }},
	} {
		if err := rp.s.kube.List(ctx, l.list, l.opts...); err != nil {
			rp.missing("%s: %v", l.file, err)
			continue
		}
		items, err := meta.ExtractList(l.list)
		if err != nil {
			rp.missing("%s: %v", l.file, err)
			continue
		}
		var kept []any
		for _, item := range items {
			o, ok := item.(client.Object)
			if !ok || (l.keep != nil && !l.keep(o)) {
				continue
			}
			rp.names[o.GetName()] = true
			kept = append(kept, trimmed(o))
		}
		rp.put(l.file, map[string]any{"items": kept})
	}
}

// trimmed is the object without its managed fields.
func trimmed(o client.Object) runtime.Object {
	cp, ok := o.DeepCopyObject().(client.Object)
	if !ok {
		return o
	}
	cp.SetManagedFields(nil)
	return cp
}

// RedactedSecret is a Secret as the report shows it: never a value.
type RedactedSecret struct {
	Name   string            `json:"name"`
	Type   corev1.SecretType `json:"type,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// KeyBytes is each key's value's length.
	KeyBytes map[string]int `json:"keyBytes"`
	Created  time.Time      `json:"created"`
	Missing  bool           `json:"missing,omitempty"`
}

// secrets records the Secrets the cluster and its members use, redacted.
func (rp *reporter) secrets(ctx context.Context) {
	names := etcdconn.SecretNames(rp.s.cluster)
	members := &v1alpha2.EtcdMemberList{}
	if err := rp.s.kube.List(ctx, members, client.InNamespace(rp.s.cluster.Namespace)); err == nil {
		for i := range members.Items {
			if members.Items[i].Spec.ClusterName != rp.s.cluster.Name {
				continue
			}
			for _, u := range manifest.MountedSecrets(&members.Items[i]) {
				names = append(names, u.Name)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var out []RedactedSecret
	for _, name := range names {
		sec := &corev1.Secret{}
		err := rp.s.kube.Get(ctx, client.ObjectKey{Namespace: rp.s.cluster.Namespace, Name: name}, sec)
		if err != nil {
			rp.missing("Secret %s: %v", name, err)
			out = append(out, RedactedSecret{Name: name, Missing: true})
			continue
		}
		r := RedactedSecret{Name: name, Type: sec.Type, Labels: sec.Labels, KeyBytes: map[string]int{}, Created: sec.CreationTimestamp.UTC()}
		for k, v := range sec.Data {
			r.KeyBytes[k] = len(v)
		}
		out = append(out, r)
	}
	rp.put("objects/secrets-redacted.yaml", map[string]any{"items": out})
}

// events keeps the namespace's events about the cluster's objects, oldest
// first.
func (rp *reporter) events(ctx context.Context) {
	list := &corev1.EventList{}
	if err := rp.s.kube.List(ctx, list, client.InNamespace(rp.s.cluster.Namespace)); err != nil {
		rp.missing("events: %v", err)
		return
	}
	var kept []corev1.Event
	for _, e := range list.Items {
		if rp.names[e.InvolvedObject.Name] {
			e.ManagedFields = nil
			kept = append(kept, e)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return eventTime(kept[i]).Before(eventTime(kept[j])) })
	rp.put("objects/events.yaml", map[string]any{"items": kept})
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// etcd records what the members say: each one's status and the alarms
// (the status command's view), and the membership.
func (rp *reporter) etcd(ctx context.Context) {
	rows, err := rp.s.status(ctx)
	if err != nil {
		rp.missing("etcd status: %v", err)
		return
	}
	for _, row := range rows {
		if row.Unreachable != "" {
			rp.missing("etcd status of %s: %s", row.Name, row.Unreachable)
		}
	}
	rp.putJSON("etcd/status.json", newMemberStatusList(rows))
	if _, list, err := rp.s.members(ctx); err != nil {
		rp.missing("etcd membership: %v", err)
	} else {
		rp.putJSON("etcd/members.json", memberList(list))
	}
}

func (rp *reporter) putJSON(name string, v any) {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		rp.missing("%s: %v", name, err)
		return
	}
	rp.r.Files[name] = string(out) + "\n"
}

// memberLogs collects each member Pod's containers' logs over the window,
// and their previous run's when a container restarted.
func (rp *reporter) memberLogs(ctx context.Context) {
	pods := &corev1.PodList{}
	err := rp.s.kube.List(ctx, pods, client.InNamespace(rp.s.cluster.Namespace), client.MatchingLabels{manifest.LabelCluster: rp.s.cluster.Name})
	if err != nil {
		rp.missing("member Pods' logs: %v", err)
		return
	}
	for i := range pods.Items {
		rp.podLogs(ctx, &pods.Items[i], "logs/"+pods.Items[i].Name)
	}
}

// operatorLogs collects the logs of the operator's Pods, wherever they run.
func (rp *reporter) operatorLogs(ctx context.Context) {
	sel, err := labels.Parse(rp.o.operatorSelector)
	if err != nil {
		rp.missing("operator logs: --operator-selector: %v", err)
		return
	}
	pods := &corev1.PodList{}
	if err := rp.s.kube.List(ctx, pods, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		rp.missing("operator logs (listing Pods %s in every namespace): %v", rp.o.operatorSelector, err)
		return
	}
	if len(pods.Items) == 0 {
		rp.missing("operator logs: no Pod matches %s", rp.o.operatorSelector)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		rp.podLogs(ctx, p, path.Join("logs/operator", p.Namespace, p.Name))
	}
}

func (rp *reporter) podLogs(ctx context.Context, p *corev1.Pod, dir string) {
	since := int64(rp.o.since.Seconds())
	containers := append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
	for _, c := range containers {
		opts := &corev1.PodLogOptions{Container: c.Name, SinceSeconds: &since, Timestamps: true, LimitBytes: ptr.To(int64(reportLogLimit))}
		rp.podLog(ctx, p, opts, path.Join(dir, c.Name+".log"))
		if restarted(p, c.Name) {
			prev := *opts
			prev.Previous, prev.SinceSeconds = true, nil
			rp.podLog(ctx, p, &prev, path.Join(dir, c.Name+".previous.log"))
		}
	}
}

func (rp *reporter) podLog(ctx context.Context, p *corev1.Pod, opts *corev1.PodLogOptions, file string) {
	if rp.s.logs == nil {
		rp.missing("%s: logs cannot be read here", file)
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := rp.s.logs(lctx, p.Namespace, p.Name, opts)
	if err != nil {
		rp.missing("%s: %v", file, err)
		return
	}
	rp.r.Files[file] = string(out)
}

// restarted: the container has a previous run whose log the kubelet keeps.
func restarted(p *corev1.Pod, container string) bool {
	for _, st := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if st.Name == container && st.RestartCount > 0 {
			return true
		}
	}
	return false
}

func (rp *reporter) readme() {
	var b strings.Builder
	fmt.Fprintf(&b, "etcd-operator diagnostics report\n\ncluster:   %s/%s\ncollected: %s\nlogs since: %s before that\nplugin:    %s\n\n",
		rp.r.Namespace, rp.r.Cluster, rp.r.Collected.Format(time.RFC3339), rp.r.Since, rp.r.Plugin)
	b.WriteString("Secrets are listed with their names, types and the size of each key, never a value.\n\nFiles:\n")
	files := make([]string, 0, len(rp.r.Files))
	for f := range rp.r.Files {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, f := range files {
		fmt.Fprintf(&b, "  %s (%d bytes)\n", f, len(rp.r.Files[f]))
	}
	if len(rp.r.Missing) > 0 {
		b.WriteString("\nNot collected:\n")
		for _, m := range rp.r.Missing {
			fmt.Fprintf(&b, "  - %s\n", m)
		}
	}
	rp.r.Files["README.txt"] = b.String()
}

// writeReport prints the report as JSON, or writes its files into a
// .tar.gz and says where.
func writeReport(cmd *cobra.Command, r *Report, o reportOptions) error {
	if o.json {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	file := o.file
	if file == "" {
		file = fmt.Sprintf("etcd-report-%s-%s-%s.tar.gz", r.Namespace, r.Cluster, r.Collected.Format("20060102T150405Z"))
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := writeTarball(f, r); err != nil {
		_ = f.Close()
		_ = os.Remove(file)
		return fmt.Errorf("writing the report to %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the report to %s: %w", file, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Wrote %s: %d files", file, len(r.Files))
	if len(r.Missing) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "; %d things not collected (see README.txt)", len(r.Missing))
	}
	fmt.Fprintln(cmd.OutOrStdout())
	return nil
}

func writeTarball(w io.Writer, r *Report) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	root := fmt.Sprintf("etcd-report-%s-%s/", r.Namespace, r.Cluster)
	files := make([]string, 0, len(r.Files))
	for f := range r.Files {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, name := range files {
		data := r.Files[name]
		hdr := &tar.Header{Name: root + name, Mode: 0o600, Size: int64(len(data)), ModTime: r.Collected, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}
