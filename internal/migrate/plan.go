package migrate

import (
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Plan is what the tool would do to one legacy cluster.
type Plan struct {
	Live        *Live
	Translation *Translation
	// Cluster is the EtcdCluster to create, its status pre-filled so that
	// the operator takes the cluster as formed and never bootstraps it.
	Cluster *v1alpha2.EtcdCluster
	// Members are the EtcdMembers to create, one per live member, named
	// after its Pod, status pre-filled with what etcd and the Pod say.
	Members []*v1alpha2.EtcdMember
	// CAChanges are the CAs ca.crt of the certificate Secrets gains.
	CAChanges []caChange
}

// Refusals are the reasons the cluster is left untouched.
func (p *Plan) Refusals() []string {
	return append(append([]string(nil), p.Live.Problems...), p.Translation.Refusals...)
}

// NewPlan translates a live legacy cluster into the objects that adopt it.
func NewPlan(lv *Live, version string) *Plan {
	t := Translate(lv.Legacy, lv.facts(), version)
	p := &Plan{Live: lv, Translation: t, Cluster: t.Cluster.DeepCopy()}
	p.Cluster.Status = v1alpha2.EtcdClusterStatus{
		ClusterID:    etcd.FormatID(lv.ClusterID),
		ClusterToken: lv.Legacy.ClusterToken(),
		Observed:     manifest.Observe(&p.Cluster.Spec),
	}
	t.Risks = append(t.Risks, standingRisks(lv)...)
	t.Risks = append(t.Risks, lv.tlsRisks()...)
	p.CAChanges = lv.caChanges()
	p.Members = p.members(p.Cluster)
	return p
}

// members renders the EtcdMembers of the live members for a cluster (whose
// UID, once it exists, goes into their owner references).
func (p *Plan) members(c *v1alpha2.EtcdCluster) []*v1alpha2.EtcdMember {
	l := p.Live.Legacy
	peers := map[string]string{}
	for _, lm := range p.Live.Members {
		peers[lm.Name] = lm.PeerURL
	}
	initial := manifest.InitialCluster(peers)
	var out []*v1alpha2.EtcdMember
	for _, lm := range p.Live.Members {
		m := manifest.NewMember(c, false)
		m.APIVersion, m.Kind = v1alpha2.GroupVersion.String(), "EtcdMember"
		m.Name = lm.Name
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[manifest.AnnotationHeadlessService] = l.HeadlessService()
		m.Annotations[manifest.AnnotationDataDirSubPath] = LegacyDataSubPath
		m.Spec.ServiceName = l.HeadlessService()
		m.Spec.InitialCluster = initial
		m.Status = v1alpha2.EtcdMemberStatus{MemberID: etcd.FormatID(lm.ID), IsVoter: true, PVCName: manifest.PVCName(lm.Name)}
		if lm.Pod != nil {
			m.Status.PodName, m.Status.PodUID = lm.Pod.Name, string(lm.Pod.UID)
			m.Annotations[manifest.AnnotationRunAsUser] = strconv.FormatInt(etcdUser(lm.Pod), 10)
		}
		out = append(out, m)
	}
	return out
}

// etcdUser is the user a legacy Pod runs etcd as, which owns the data it
// wrote: the etcd container's runAsUser, else the Pod's, else root (the
// legacy operator sets neither, and etcd's images run as root).
func etcdUser(p *corev1.Pod) int64 {
	for _, c := range p.Spec.Containers {
		if c.Name == "etcd" && c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			return *c.SecurityContext.RunAsUser
		}
	}
	if sc := p.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		return *sc.RunAsUser
	}
	return 0
}

// standingRisks are what changes for the cluster's users in every adoption.
func standingRisks(lv *Live) []string {
	l := lv.Legacy
	out := []string{
		fmt.Sprintf("the adopted Pods keep their legacy spec (image, flags, probes, volumes at /var/run/etcd) until the operator restarts them for a change of version, resources or options; it then renders its own Pod on the same claim, with the data under %s and etcd running as the user the legacy Pod ran it as (root unless the legacy Pod named a user: the data belongs to that user; annotation %s); members the operator adds run as its own non-root user", manifest.DataDir+"/"+LegacyDataSubPath, manifest.AnnotationRunAsUser),
		fmt.Sprintf("the adopted members' DNS names stay under the legacy headless Service %s, which passes to the EtcdCluster: do not delete it while an adopted member remains; new members live under %s", l.HeadlessService(), l.Name()),
		"between the StatefulSet's retirement and the operator's start nothing recreates a deleted Pod: scale the operator up right after the tool finishes",
		"the legacy PodDisruptionBudget (if any) is replaced by the operator's, which keeps a majority of the voters",
	}
	if l.ClientService() == l.Name() {
		out = append(out, fmt.Sprintf("Service %s changes shape: the ClusterIP Service is deleted and the operator makes a headless Service of that name (DNS answers with every member, ready or not); point clients at the ClusterIP Service %s, which selects voters only", l.Name(), manifest.ClientServiceName(l.Name())))
	} else {
		out = append(out, fmt.Sprintf("the legacy client Service %s is kept but no longer managed; clients should move to %s", l.ClientService(), manifest.ClientServiceName(l.Name())))
	}
	switch auth := l.Spec.Security != nil && l.Spec.Security.EnableAuth; {
	case auth:
		out = append(out, fmt.Sprintf("AUTH: the legacy root user has no password (it authenticates by certificate); the operator logs in as root with the password of Secret %s (made with a random password unless it exists). etcd cannot give that user a password, so the tool switches authentication off for a moment (a few round trips), re-creates root with the password and the roles it held, and switches it on again. Other users and roles stay; clients authenticated by certificate are not affected; clients with tokens log in again", RootCredentialsSecretName(l.Name())))
		if !lv.AuthEnabled && len(lv.Members) > 0 {
			out = append(out, "AUTH IS OFF: the legacy spec asks for authentication but etcd has it off, so any client can read and write every key; an --apply stopped inside its auth step leaves it so: run --apply again, which switches it on")
		}
	case lv.AuthEnabled:
		out = append(out, "etcd auth is on although the legacy spec does not ask for it")
	}
	for _, m := range lv.Members {
		if strings.HasPrefix(m.PeerURL, "https://") && !l.peerSecretOn() {
			out = append(out, "SECURITY: the peer plane runs etcd's --peer-auto-tls (encrypted, not authenticated: any Pod that reaches port 2380 can join the peer traffic); the adopted cluster and its new members keep it (annotation "+manifest.AnnotationPeerAutoTLS+")")
			break
		}
	}
	return out
}

// Render prints the plan: what runs, what would be created, what is lost
// and what changes.
func (p *Plan) Render(w io.Writer) error {
	l := p.Live.Legacy
	fmt.Fprintf(w, "=== EtcdCluster.etcd.aenix.io %s/%s\n", l.Namespace(), l.Name())
	p.renderLive(w)
	if refusals := p.Refusals(); len(refusals) > 0 {
		fmt.Fprintln(w, "REFUSED: this cluster is left untouched:")
		for _, r := range refusals {
			fmt.Fprintf(w, "  - %s\n", r)
		}
	}
	fmt.Fprintln(w, "Legacy fields not carried:")
	if len(p.Translation.Dropped) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, d := range p.Translation.Dropped {
		fmt.Fprintf(w, "  - %s: %s\n", d.Field, d.Why)
	}
	if p.Live.TLS != nil {
		fmt.Fprintln(w, "Secrets to change:")
		if len(p.CAChanges) == 0 {
			fmt.Fprintln(w, "  (none: ca.crt of the certificate Secrets holds every CA needed)")
		}
		for _, c := range p.CAChanges {
			fmt.Fprintf(w, "  - %s\n", c)
		}
	}
	fmt.Fprintln(w, "Risks:")
	for _, r := range p.Translation.Risks {
		fmt.Fprintf(w, "  - %s\n", r)
	}
	fmt.Fprintln(w, "Objects to create (status is written after creation):")
	objs := []any{p.Cluster}
	for _, m := range p.Members {
		objs = append(objs, m)
	}
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "---\n%s", b)
	}
	fmt.Fprintln(w, "Steps on --apply:")
	for _, s := range Steps {
		fmt.Fprintf(w, "  %-12s %s\n", s.Name, s.What)
	}
	fmt.Fprintln(w)
	return nil
}

func (p *Plan) renderLive(w io.Writer) {
	lv := p.Live
	fmt.Fprintf(w, "Found: cluster ID %s, %d members, auth %s, client TLS %s, peer TLS %s\n",
		etcd.FormatID(lv.ClusterID), len(lv.Members), onOff(lv.AuthEnabled), clientTLS(lv), peerTLS(lv))
	if lv.StatefulSet != nil {
		fmt.Fprintf(w, "  StatefulSet %s: %d replicas\n", lv.StatefulSet.Name, ptrInt(lv.StatefulSet.Spec.Replicas))
	} else {
		fmt.Fprintln(w, "  StatefulSet: gone (an earlier run retired it)")
	}
	for _, m := range lv.Members {
		role := "voter"
		if m.Learner {
			role = "learner"
		}
		fmt.Fprintf(w, "  member %-24s id %s %-7s %s pod=%s pvc=%s\n", m.Name, etcd.FormatID(m.ID), role, m.PeerURL, podInfo(m.Pod), pvcInfo(m.PVC))
	}
	if lv.Adopted != nil {
		fmt.Fprintf(w, "  EtcdCluster %s exists already (an earlier run): the remaining steps finish the job\n", lv.Adopted.Name)
	}
}

func peerTLS(lv *Live) string {
	switch {
	case lv.Legacy.peerSecretOn():
		return "on (Secret " + lv.Legacy.tls().PeerSecret + ")"
	case lv.facts().PeerTLS:
		return "auto-TLS"
	}
	return "off"
}

func clientTLS(lv *Live) string {
	t := lv.Legacy.tls()
	switch {
	case t.ServerSecret == "":
		return "off"
	case t.ClientTrustedCASecret != "":
		return "on with client certificates (Secret " + t.ServerSecret + ")"
	}
	return "on (Secret " + t.ServerSecret + ")"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func ptrInt(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func podInfo(p *corev1.Pod) string {
	if p == nil {
		return "(none)"
	}
	return fmt.Sprintf("%s(uid %s, %s)", p.Name, p.UID, p.Status.Phase)
}

func pvcInfo(p *corev1.PersistentVolumeClaim) string {
	if p == nil {
		return "(none)"
	}
	q := p.Spec.Resources.Requests[corev1.ResourceStorage]
	return fmt.Sprintf("%s(%s)", p.Name, q.String())
}

// memberPodLabels are the labels an adopted Pod or claim gains: the
// operator's, for the member (and the voter role on the Pod).
func memberPodLabels(have map[string]string, cluster, member string, voter bool) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, manifest.MemberLabels(cluster, member))
	if voter {
		out[manifest.LabelRole] = manifest.RoleVoter
	}
	return out
}
