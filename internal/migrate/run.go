package migrate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// Options are the command line of etcd-migrate.
type Options struct {
	// Namespace limits the run to one namespace; empty means all.
	Namespace string
	Apply     bool
	Yes       bool
	// LegacyOperator and Operator are namespace/name of the two operators'
	// Deployments, which must exist and be scaled to zero before --apply.
	LegacyOperator string
	Operator       string
	// SkipOperatorCheck skips that check, and the search for Deployments
	// running the legacy operator's image (for operators not run as a
	// Deployment).
	SkipOperatorCheck bool
	// Version overrides the version read from the running image.
	Version    string
	SkipBackup bool
	BackupDir  string
	// StopAfter (hidden) ends the run after the named step.
	StopAfter string
}

// Exit codes.
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitStopped = 3
)

// Run discovers the legacy clusters, prints the plan of each and, with
// --apply, carries out the plans that nothing refuses. It returns the exit
// code.
func Run(ctx context.Context, env Env, o Options, in io.Reader, out, errOut io.Writer) int {
	legacies, err := listLegacy(ctx, env.Client, o.Namespace)
	if err != nil {
		fmt.Fprintln(errOut, "Error:", err)
		return ExitFailed
	}
	schedules, err := listLegacyKind(ctx, env.Client, LegacyScheduleGVK, o.Namespace)
	if err != nil {
		fmt.Fprintln(errOut, "Error:", err)
		return ExitFailed
	}
	backups, err := listLegacyKind(ctx, env.Client, LegacyBackupGVK, o.Namespace)
	if err != nil {
		fmt.Fprintln(errOut, "Error:", err)
		return ExitFailed
	}
	if len(legacies) == 0 && len(schedules) == 0 {
		fmt.Fprintln(out, "No etcd.aenix.io/v1alpha1 EtcdCluster or EtcdBackupSchedule found: nothing to migrate.")
		for _, b := range backupRecords(backups) {
			b.Render(out)
		}
		return ExitOK
	}
	var plans []*Plan
	refused := 0
	adopting := map[string]bool{}
	for _, l := range legacies {
		p := NewPlan(Inspect(ctx, env, l), o.Version)
		if err := p.Render(out); err != nil {
			fmt.Fprintln(errOut, "Error:", err)
			return ExitFailed
		}
		if len(p.Refusals()) > 0 {
			refused++
			continue
		}
		plans = append(plans, p)
		adopting[l.Namespace()+"/"+l.Name()] = true
	}
	var carry []*SchedulePlan
	for i := range schedules {
		u := &schedules[i]
		p := PlanSchedule(u, func(cluster string) bool {
			return adopting[u.GetNamespace()+"/"+cluster] || adoptedCluster(ctx, env.Client, u.GetNamespace(), cluster)
		})
		if err := p.Render(out); err != nil {
			fmt.Fprintln(errOut, "Error:", err)
			return ExitFailed
		}
		if p.Refusal != "" {
			refused++
			continue
		}
		carry = append(carry, p)
	}
	for _, b := range backupRecords(backups) {
		b.Render(out)
	}
	return finish(ctx, env, o, migration{plans: plans, carry: carry}, refused, in, out, errOut)
}

// finish looks for webhooks that would fail the run's writes, then sums a
// dry run up or applies.
func finish(ctx context.Context, env Env, o Options, m migration, refused int, in io.Reader, out, errOut io.Writer) int {
	var err error
	if m.webhooks, err = legacyWebhooks(ctx, env.Client, m.namespaces()); err != nil {
		fmt.Fprintln(errOut, "Error:", err)
		return ExitFailed
	}
	renderWebhooks(out, m.webhooks)
	if !o.Apply {
		return dryRunDone(out, m, refused)
	}
	return apply(ctx, env, o, m, refused, in, out, errOut)
}

// dryRunDone sums a dry run up; it fails if --apply would refuse anything.
func dryRunDone(out io.Writer, m migration, refused int) int {
	blocked := len(deleteCommands(m.webhooks))
	fmt.Fprint(out, webhooksNotice(m.webhooks))
	fmt.Fprintf(out, "Dry run: nothing was changed. %d cluster(s) can be adopted, %d schedule(s) carried, %d refused, %d webhook configuration(s) to delete first. Run again with --apply to adopt.\n",
		len(m.plans), len(m.carry), refused, blocked)
	return exitFor(refused + blocked)
}

// migration is what an --apply run is to do, and what stands in its way.
type migration struct {
	plans    []*Plan
	carry    []*SchedulePlan
	webhooks []WebhookFinding
}

// namespaces are the namespaces whose etcd.aenix.io objects the run
// changes.
func (m migration) namespaces() []string {
	var out []string
	for _, p := range m.plans {
		out = append(out, p.Live.Legacy.Namespace())
	}
	for _, p := range m.carry {
		out = append(out, p.Legacy.GetNamespace())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func apply(ctx context.Context, env Env, o Options, m migration, refused int, in io.Reader, out, errOut io.Writer) int {
	plans, carry := m.plans, m.carry
	if len(plans) == 0 && len(carry) == 0 {
		fmt.Fprintln(out, "Nothing to adopt.")
		return exitFor(refused)
	}
	if err := webhooksRefusal(m.webhooks); err != nil {
		fmt.Fprintln(errOut, "Error:", err)
		return ExitFailed
	}
	if !o.SkipOperatorCheck {
		if err := operatorsStopped(ctx, env.Client, o); err != nil {
			fmt.Fprintln(errOut, "Error:", err)
			return ExitFailed
		}
	}
	if !o.Yes && !confirm(in, out, len(plans), len(carry)) {
		fmt.Fprintln(out, "Aborted: nothing was changed.")
		return ExitFailed
	}
	backupDir := o.BackupDir
	if o.SkipBackup {
		backupDir = ""
	}
	failed, clustersFailed := 0, 0
	for _, p := range plans {
		err := Apply(ctx, env, p, ApplyOptions{BackupDir: backupDir, StopAfter: o.StopAfter, Log: out})
		switch {
		case errors.Is(err, ErrStopped):
			fmt.Fprintf(out, "Stopped after step %s, as asked.\n", o.StopAfter)
			return ExitStopped
		case err != nil:
			failed++
			clustersFailed++
			fmt.Fprintf(errOut, "Error: adopting %s/%s: %v; run etcd-migrate again to finish it\n", p.Live.Legacy.Namespace(), p.Live.Legacy.Name(), err)
		default:
			fmt.Fprintf(out, "Adopted %s/%s.\n", p.Live.Legacy.Namespace(), p.Live.Legacy.Name())
		}
	}
	// A schedule is carried once its cluster's adoption finished, in this
	// run or an earlier one.
	carried := 0
	for _, p := range carry {
		ns, name := p.Legacy.GetNamespace(), p.Legacy.GetName()
		cluster := p.Schedule.Spec.SnapshotTemplate.Spec.ClusterRef.Name
		if !adoptedCluster(ctx, env.Client, ns, cluster) {
			fmt.Fprintf(out, "Schedule %s/%s waits: its cluster %s is not adopted.\n", ns, name, cluster)
			continue
		}
		p.Waiting = ""
		if err := ApplySchedule(ctx, env.Client, p); err != nil {
			failed++
			fmt.Fprintf(errOut, "Error: carrying schedule %s/%s: %v; run etcd-migrate again to finish it\n", ns, name, err)
			continue
		}
		carried++
		fmt.Fprintf(out, "Carried schedule %s/%s to EtcdSnapshotSchedule %s/%s.\n", ns, name, ns, name)
	}
	fmt.Fprintf(out, "Done: %d adopted, %d schedule(s) carried, %d failed, %d refused. NEXT: scale the new operator (%s) up; it takes the adopted clusters over without restarting them. The legacy CRDs are left installed.\n",
		len(plans)-clustersFailed, carried, failed, refused, o.Operator)
	return exitFor(refused + failed)
}

// adoptedCluster reports whether the cluster's adoption finished: the
// EtcdCluster etcd-migrate made exists and the legacy cluster it came from
// is gone or going. The last step deletes the legacy cluster orphaning its
// dependents, which keeps it, marked for deletion, until the garbage
// collector has let go of them: that is finished too.
func adoptedCluster(ctx context.Context, c client.Client, ns, name string) bool {
	ec := &v1alpha2.EtcdCluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ec); err != nil || ec.Annotations[MigratedFromAnnotation] == "" {
		return false
	}
	legacy := &unstructured.Unstructured{}
	legacy.SetGroupVersionKind(LegacyGVR.GroupVersion().WithKind("EtcdCluster"))
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, legacy); {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return true
	case err != nil:
		return false
	}
	return legacy.GetDeletionTimestamp() != nil && string(legacy.GetUID()) == ec.Annotations[MigratedFromAnnotation]
}

func exitFor(problems int) int {
	if problems > 0 {
		return ExitFailed
	}
	return ExitOK
}

func confirm(in io.Reader, out io.Writer, clusters, schedules int) bool {
	fmt.Fprintf(out, "Adopt %d cluster(s) and carry %d schedule(s) as shown above? [y/N] ", clusters, schedules)
	line, _ := bufio.NewReader(in).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}

// listLegacy lists the legacy clusters; a missing CRD means there are none.
func listLegacy(ctx context.Context, c client.Client, ns string) ([]*Legacy, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(LegacyGVR.GroupVersion().WithKind("EtcdClusterList"))
	var opts []client.ListOption
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, list, opts...); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing legacy EtcdClusters: %w", err)
	}
	var out []*Legacy
	for i := range list.Items {
		if list.Items[i].GetDeletionTimestamp() != nil {
			continue
		}
		l, err := ParseLegacy(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}
