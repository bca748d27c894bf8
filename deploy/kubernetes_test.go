package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifests is a decoded set of Kubernetes objects, by kind.
type manifests struct {
	namespaces   []corev1.Namespace
	services     []corev1.Service
	secrets      []corev1.Secret
	statefulSets []appsv1.StatefulSet
	deployments  []appsv1.Deployment
	pdbs         []policyv1.PodDisruptionBudget
	hpas         []autoscalingv2.HorizontalPodAutoscaler
}

// decodeStrict decodes one object into the Kubernetes API type of its
// apiVersion and kind, refusing unknown and duplicate fields.
func (m *manifests) decodeStrict(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	strict := func(v any) error { return yaml.UnmarshalStrict(doc, v) }
	var err error
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		var o corev1.Namespace
		err = strict(&o)
		m.namespaces = append(m.namespaces, o)
	case "v1 Service":
		var o corev1.Service
		err = strict(&o)
		m.services = append(m.services, o)
	case "v1 Secret":
		var o corev1.Secret
		err = strict(&o)
		m.secrets = append(m.secrets, o)
	case "apps/v1 StatefulSet":
		var o appsv1.StatefulSet
		err = strict(&o)
		m.statefulSets = append(m.statefulSets, o)
	case "apps/v1 Deployment":
		var o appsv1.Deployment
		err = strict(&o)
		m.deployments = append(m.deployments, o)
	case "policy/v1 PodDisruptionBudget":
		var o policyv1.PodDisruptionBudget
		err = strict(&o)
		m.pdbs = append(m.pdbs, o)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		var o autoscalingv2.HorizontalPodAutoscaler
		err = strict(&o)
		m.hpas = append(m.hpas, o)
	default:
		return fmt.Errorf("apiVersion %q kind %q: not a kind this test knows; add it", tm.APIVersion, tm.Kind)
	}
	return err
}

const kustomizeDir = "kubernetes"

// TestKubernetesFilesDecodeStrictly decodes every document of every file
// the kustomization lists, as written, into the API types.
func TestKubernetesFilesDecodeStrictly(t *testing.T) {
	kb, err := os.ReadFile(filepath.Join(kustomizeDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(kb, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if len(k.Resources) == 0 {
		t.Fatal("kustomization.yaml lists no resources")
	}
	onDisk, _ := filepath.Glob(filepath.Join(kustomizeDir, "*.yaml"))
	for _, f := range onDisk {
		if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(k.Resources, name) {
			t.Errorf("%s is not listed in kustomization.yaml's resources", name)
		}
	}
	var m manifests
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(kustomizeDir, r))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			if err := m.decodeStrict(doc); err != nil {
				t.Errorf("%s, document %d: %v", r, i+1, err)
			}
		}
	}
}

// render runs kustomize on the directory, as kubectl apply -k does.
func render(t *testing.T) manifests {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), kustomizeDir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", kustomizeDir, err)
	}
	var m manifests
	for _, r := range rm.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.decodeStrict(b); err != nil {
			t.Errorf("%s %s (rendered): %v", r.GetKind(), r.GetName(), err)
		}
	}
	return m
}

// workload is a StatefulSet or Deployment as far as the checks care.
type workload struct {
	kind, name string
	selector   *metav1.LabelSelector
	pod        corev1.PodTemplateSpec
}

func (m manifests) workloads() []workload {
	var out []workload
	for _, s := range m.statefulSets {
		out = append(out, workload{"StatefulSet", s.Name, s.Spec.Selector, s.Spec.Template})
	}
	for _, d := range m.deployments {
		out = append(out, workload{"Deployment", d.Name, d.Spec.Selector, d.Spec.Template})
	}
	return out
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// TestKubernetesInvariants checks the rendered manifests for what a cluster
// would only reveal at run time.
func TestKubernetesInvariants(t *testing.T) {
	m := render(t)
	if len(m.namespaces) != 1 {
		t.Fatalf("want one Namespace, got %d", len(m.namespaces))
	}
	secrets := map[string]corev1.Secret{}
	for _, s := range m.secrets {
		secrets[s.Name] = s
	}
	services := map[string]corev1.Service{}
	for _, s := range m.services {
		services[s.Name] = s
	}

	for _, w := range m.workloads() {
		what := w.kind + " " + w.name
		if !selects(t, w.selector, w.pod.Labels) {
			t.Errorf("%s: selector %v does not match its pod labels %v", what, w.selector, w.pod.Labels)
		}
		if len(w.pod.Spec.Containers) == 0 {
			t.Errorf("%s: no containers", what)
		}
		volumes := map[string]corev1.Volume{}
		for _, v := range w.pod.Spec.Volumes {
			volumes[v.Name] = v
			if v.Secret != nil {
				s, ok := secrets[v.Secret.SecretName]
				if !ok {
					t.Errorf("%s: volume %s names Secret %q, which is not in the manifests", what, v.Name, v.Secret.SecretName)
				}
				for _, it := range v.Secret.Items {
					if _, ok := s.StringData[it.Key]; !ok {
						t.Errorf("%s: volume %s takes key %q of Secret %s, which it lacks", what, v.Name, it.Key, s.Name)
					}
				}
			}
		}
		for _, c := range w.pod.Spec.Containers {
			cw := what + " container " + c.Name
			checkImage(t, cw, c.Image)
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: wants both a readiness and a liveness probe", cw)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: wants CPU and memory requests, has %v", cw, c.Resources.Requests)
			}
			for _, e := range c.Env {
				if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
					s, ok := secrets[ref.SecretKeyRef.Name]
					if _, has := s.StringData[ref.SecretKeyRef.Key]; !ok || !has {
						t.Errorf("%s: env %s takes key %q of Secret %q, which the manifests do not hold", cw, e.Name, ref.SecretKeyRef.Key, ref.SecretKeyRef.Name)
					}
				}
			}
			for _, vm := range c.VolumeMounts {
				_, isVolume := volumes[vm.Name]
				isClaim := false
				for _, s := range m.statefulSets {
					if s.Name == w.name {
						for _, pvc := range s.Spec.VolumeClaimTemplates {
							isClaim = isClaim || pvc.Name == vm.Name
						}
					}
				}
				if !isVolume && !isClaim {
					t.Errorf("%s: mounts %q, which is neither a volume nor a volume claim template", cw, vm.Name)
				}
			}
		}
	}

	for _, s := range m.statefulSets {
		svc, ok := services[s.Spec.ServiceName]
		switch {
		case !ok:
			t.Errorf("StatefulSet %s: serviceName %q names no Service", s.Name, s.Spec.ServiceName)
		case svc.Spec.ClusterIP != corev1.ClusterIPNone:
			t.Errorf("StatefulSet %s: its Service %s is not headless (clusterIP %q)", s.Name, svc.Name, svc.Spec.ClusterIP)
		case !selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, s.Spec.Template.Labels):
			t.Errorf("StatefulSet %s: its Service %s selects %v, not its pods %v", s.Name, svc.Name, svc.Spec.Selector, s.Spec.Template.Labels)
		}
	}

	for _, svc := range m.services {
		found := false
		for _, w := range m.workloads() {
			found = found || selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, w.pod.Labels)
		}
		if !found {
			t.Errorf("Service %s: selector %v matches no workload's pods", svc.Name, svc.Spec.Selector)
		}
	}
	for _, pdb := range m.pdbs {
		found := false
		for _, w := range m.workloads() {
			found = found || selects(t, pdb.Spec.Selector, w.pod.Labels)
		}
		if !found {
			t.Errorf("PodDisruptionBudget %s: selector matches no workload's pods", pdb.Name)
		}
	}
	for _, h := range m.hpas {
		ok := false
		for _, d := range m.deployments {
			ok = ok || (h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == d.Name)
		}
		if !ok {
			t.Errorf("HorizontalPodAutoscaler %s: targets %v, which is not a Deployment here", h.Name, h.Spec.ScaleTargetRef)
		}
	}

	checkBrokers(t, m)
	checkGateways(t, m)
}

// checkImage refuses images without a pinned tag or digest, and :latest.
func checkImage(t *testing.T, what, image string) {
	t.Helper()
	if strings.Contains(image, "@sha256:") {
		return
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok || tag == "" || tag == "latest" {
		t.Errorf("%s: image %q is not pinned to a tag other than latest", what, image)
	}
}

// checkBrokers holds the broker StatefulSet to what the issue asks.
func checkBrokers(t *testing.T, m manifests) {
	t.Helper()
	var b *appsv1.StatefulSet
	for i := range m.statefulSets {
		if m.statefulSets[i].Name == "broker" {
			b = &m.statefulSets[i]
		}
	}
	if b == nil {
		t.Fatal("no broker StatefulSet")
	}
	if b.Spec.Replicas == nil || *b.Spec.Replicas < 3 {
		t.Errorf("broker StatefulSet: want at least 3 replicas (replication factor 3)")
	}
	if len(b.Spec.VolumeClaimTemplates) == 0 {
		t.Errorf("broker StatefulSet: no volume claim templates")
	}
	aa := b.Spec.Template.Spec.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Errorf("broker StatefulSet: wants required pod anti-affinity")
	} else {
		term := aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
		if term.TopologyKey != "kubernetes.io/hostname" || !selects(t, term.LabelSelector, b.Spec.Template.Labels) {
			t.Errorf("broker StatefulSet: the anti-affinity term (%s, %v) does not keep two brokers off one node", term.TopologyKey, term.LabelSelector)
		}
	}
	pdbOK := false
	for _, p := range m.pdbs {
		if selects(t, p.Spec.Selector, b.Spec.Template.Labels) {
			pdbOK = p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.IntValue() == 1
		}
	}
	if !pdbOK {
		t.Errorf("broker StatefulSet: wants a PodDisruptionBudget with maxUnavailable 1")
	}
	c := b.Spec.Template.Spec.Containers[0]
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("broker: readiness wants GET /readyz, has %+v", p)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil ||
		!slices.Equal(c.Lifecycle.PreStop.Exec.Command[:2], []string{"sluice", "drain"}) {
		t.Errorf("broker: wants a preStop hook running `sluice drain`, has %+v", c.Lifecycle)
	} else {
		checkFlags(t, "broker preStop", c.Lifecycle.PreStop.Exec.Command[1:], nil, "")
	}
	grace := int64(30)
	if g := b.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	if grace < 45 {
		t.Errorf("broker: terminationGracePeriodSeconds %d leaves no time for a 30 s drain and the close", grace)
	}
	checkContainerFlags(t, "broker", c, map[string]string{"HOSTNAME": "broker-0"})
	// The advertised address is the pod's name under the headless Service.
	if !strings.Contains(strings.Join(c.Args, " "), "${HOSTNAME}."+b.Spec.ServiceName+":") {
		t.Errorf("broker: advertised address is not ${HOSTNAME}.%s (the headless Service), args %q", b.Spec.ServiceName, c.Args)
	}
}

func checkGateways(t *testing.T, m manifests) {
	t.Helper()
	var g *appsv1.Deployment
	for i := range m.deployments {
		if m.deployments[i].Name == "gateway" {
			g = &m.deployments[i]
		}
	}
	if g == nil {
		t.Fatal("no gateway Deployment")
	}
	hpa := false
	for _, h := range m.hpas {
		hpa = hpa || h.Spec.ScaleTargetRef.Name == g.Name
	}
	pdb := false
	for _, p := range m.pdbs {
		pdb = pdb || selects(t, p.Spec.Selector, g.Spec.Template.Labels)
	}
	if !hpa || !pdb {
		t.Errorf("gateway Deployment: wants an HPA (%v) and a PDB (%v)", hpa, pdb)
	}
	c := g.Spec.Template.Spec.Containers[0]
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("gateway: readiness wants GET /readyz, has %+v", p)
	}
	checkContainerFlags(t, "gateway", c, nil)
}

// checkContainerFlags runs a sluice container's command line against the
// real binary: its args (the image's entrypoint is sluice), or its sh -c
// script with the given extra environment.
func checkContainerFlags(t *testing.T, what string, c corev1.Container, extraEnv map[string]string) {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "from-" + e.Name // a secret or a resource: any value will do
		}
		if e.Name == "GOMEMLIMIT" {
			v = "1GiB"
		}
		env[e.Name] = v
	}
	for k, v := range extraEnv {
		env[k] = v
	}
	if len(c.Command) == 2 && c.Command[0] == "/bin/sh" && c.Command[1] == "-c" && len(c.Args) == 1 {
		checkFlags(t, what, nil, env, c.Args[0])
		return
	}
	if len(c.Command) != 0 {
		t.Errorf("%s: command %q: want the image's entrypoint (sluice) or /bin/sh -c", what, c.Command)
		return
	}
	checkFlags(t, what, c.Args, env, "")
}

// probePaths returns the HTTP probe paths of a workload's first container.
func probePaths(m manifests, workload string) []string {
	var out []string
	for _, w := range m.workloads() {
		if w.name != workload {
			continue
		}
		c := w.pod.Spec.Containers[0]
		for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if p != nil && p.HTTPGet != nil && !slices.Contains(out, p.HTTPGet.Path) {
				out = append(out, p.HTTPGet.Path)
			}
		}
	}
	return out
}
