package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/writeback/writeback/internal/config"
)

// The release every test renders, and its namespace.
const (
	release   = "shop"
	namespace = "shop-ns"
)

var (
	root     string // the repository root
	helmPath string // root/bin/helm, built by `make chart-test`
	chartDir string // root/helm/writeback
)

func TestMain(m *testing.M) {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	root = filepath.Clean(filepath.Join(wd, "..", ".."))
	helmPath = filepath.Join(root, "bin", "helm")
	chartDir = filepath.Join(root, "helm", "writeback")
	if _, err := os.Stat(helmPath); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %s is missing: run `make chart-test` from the repository root (it builds bin/helm from the Go module proxy, then runs these tests).\n", helmPath)
		os.Exit(1)
	}
	out, err := exec.Command(helmPath, "version", "--template", "{{.Version}}").Output()
	if err != nil || !regexp.MustCompile(`^v3\.\d+\.\d+$`).Match(out) {
		fmt.Fprintf(os.Stderr, "FAIL: %s reports version %q (%v), not a release version: it was not built by `make chart-test`; delete it and run `make chart-test`.\n", helmPath, out, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// runHelm runs bin/helm and returns its stdout and stderr.
func runHelm(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(helmPath, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// example is the path of a values example of the chart.
func example(name string) string { return filepath.Join(chartDir, "examples", name+".yaml") }

// manifest is one rendered Kubernetes object, decoded strictly.
type manifest struct {
	source string // the template it came from
	kind   string
	name   string
	obj    any // *appsv1.Deployment, *corev1.ConfigMap, …
}

type manifests []manifest

// render runs `helm template` on chart (the writeback chart when empty) with
// args and decodes every manifest.
func render(t *testing.T, chart string, args ...string) manifests {
	t.Helper()
	if chart == "" {
		chart = chartDir
	}
	full := append([]string{"template", release, chart, "--namespace", namespace}, args...)
	out, errOut, err := runHelm(full...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(full, " "), err, errOut)
	}
	ms := decodeAll(t, out)
	checkCommon(t, ms)
	return ms
}

var (
	docSep    = regexp.MustCompile(`(?m)^---[ \t]*$`)
	sourceRE  = regexp.MustCompile(`(?m)^# Source: (.+)$`)
	commentRE = regexp.MustCompile(`(?m)^\s*#.*$`)
)

// newObject returns the API type for apiVersion and kind; the chart renders
// nothing else.
func newObject(tm metav1.TypeMeta) any {
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Service":
		return &corev1.Service{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}
	}
	return nil
}

// decodeAll splits helm's output into documents and decodes each strictly
// (sigs.k8s.io/yaml.UnmarshalStrict: YAML → JSON, then a decoder that rejects
// unknown and duplicate fields) into its Kubernetes API type.
func decodeAll(t *testing.T, out string) manifests {
	t.Helper()
	var ms manifests
	for _, doc := range docSep.Split(out, -1) {
		if strings.TrimSpace(commentRE.ReplaceAllString(doc, "")) == "" {
			continue
		}
		source := "?"
		if m := sourceRE.FindStringSubmatch(doc); m != nil {
			source = m[1]
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: not YAML: %v\n%s", source, err, doc)
		}
		obj := newObject(tm)
		if obj == nil {
			t.Fatalf("%s: unexpected object %s %s", source, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: does not decode strictly into %T: %v\n%s", source, obj, err, doc)
		}
		meta := obj.(metav1.Object)
		ms = append(ms, manifest{source: source, kind: tm.Kind, name: meta.GetName(), obj: obj})
	}
	if len(ms) == 0 {
		t.Fatalf("helm template rendered no manifest")
	}
	return ms
}

// find returns the object of type T named name; it fails the test when
// there is none.
func find[T any](t *testing.T, ms manifests, name string) T {
	t.Helper()
	for _, m := range ms {
		if o, ok := m.obj.(T); ok && m.name == name {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T named %q among %s", zero, name, ms)
	return zero
}

func all[T any](ms manifests) []T {
	var out []T
	for _, m := range ms {
		if o, ok := m.obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

func (ms manifests) String() string {
	var s []string
	for _, m := range ms {
		s = append(s, m.kind+"/"+m.name)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// checkCommon checks what the API server would refuse in any manifest:
// names, labels, selectors that do not select their pods, env var and port
// names, probes on ports the container does not have, mounts of volumes the
// pod does not have, ConfigMap volumes naming a ConfigMap not rendered.
func checkCommon(t *testing.T, ms manifests) {
	t.Helper()
	configMaps := map[string]bool{}
	for _, cm := range all[*corev1.ConfigMap](ms) {
		configMaps[cm.Name] = true
	}
	for _, m := range ms {
		meta := m.obj.(metav1.Object)
		nameErrs := validation.IsDNS1123Subdomain(m.name)
		if m.kind == "Service" {
			nameErrs = validation.IsDNS1035Label(m.name)
		}
		for _, e := range nameErrs {
			t.Errorf("%s: name %q: %s", m.source, m.name, e)
		}
		checkLabels(t, m.source+" metadata.labels", meta.GetLabels())
	}
	for _, d := range all[*appsv1.Deployment](ms) {
		where := "Deployment " + d.Name
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			t.Fatalf("%s: selector: %v", where, err)
		}
		if sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %s does not select the pod template's labels %v", where, sel, d.Spec.Template.Labels)
		}
		checkLabels(t, where+" pod labels", d.Spec.Template.Labels)
		pod := d.Spec.Template.Spec
		volumes := map[string]corev1.Volume{}
		for _, v := range pod.Volumes {
			volumes[v.Name] = v
			if v.ConfigMap != nil && !configMaps[v.ConfigMap.Name] {
				t.Errorf("%s: volume %s names ConfigMap %q, which is not rendered", where, v.Name, v.ConfigMap.Name)
			}
		}
		for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
			cw := where + " container " + c.Name
			for _, e := range validation.IsDNS1123Label(c.Name) {
				t.Errorf("%s: name: %s", cw, e)
			}
			ports := map[string]bool{}
			for _, p := range c.Ports {
				if p.Name != "" {
					ports[p.Name] = true
					for _, e := range validation.IsValidPortName(p.Name) {
						t.Errorf("%s: port name %q: %s", cw, p.Name, e)
					}
				}
			}
			for _, e := range c.Env {
				for _, msg := range validation.IsEnvVarName(e.Name) {
					t.Errorf("%s: env %q: %s", cw, e.Name, msg)
				}
			}
			for kind, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
				if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.StrVal != "" && !ports[p.HTTPGet.Port.StrVal] {
					t.Errorf("%s: %s uses port %q, which the container does not name", cw, kind, p.HTTPGet.Port.StrVal)
				}
			}
			for _, vm := range c.VolumeMounts {
				if _, ok := volumes[vm.Name]; !ok {
					t.Errorf("%s: mounts volume %q, which the pod does not have", cw, vm.Name)
				}
			}
		}
	}
	for _, pdb := range all[*policyv1.PodDisruptionBudget](ms) {
		if n := len(podsSelected(t, ms, pdb.Spec.Selector)); n != 1 {
			t.Errorf("PodDisruptionBudget %s selects the pods of %d Deployments, want 1", pdb.Name, n)
		}
	}
}

func checkLabels(t *testing.T, where string, l map[string]string) {
	t.Helper()
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			t.Errorf("%s: label key %q: %s", where, k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			t.Errorf("%s: label %s value %q: %s", where, k, v, e)
		}
	}
}

// podsSelected returns the Deployments whose pods sel selects.
func podsSelected(t *testing.T, ms manifests, ls *metav1.LabelSelector) []*appsv1.Deployment {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		t.Fatalf("selector %v: %v", ls, err)
	}
	var out []*appsv1.Deployment
	for _, d := range all[*appsv1.Deployment](ms) {
		if !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

// container returns the container (or init container) of the pod named name.
func container(t *testing.T, d *appsv1.Deployment, name string) corev1.Container {
	t.Helper()
	for _, c := range append(append([]corev1.Container{}, d.Spec.Template.Spec.InitContainers...), d.Spec.Template.Spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %q", d.Name, name)
	return corev1.Container{}
}

func containerNames(cs []corev1.Container) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

func envVar(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerEnv is the environment the container's process sees: Secret
// references become "secret:<name>/<key>", status.podIP 10.1.2.3, the
// container's limits.memory its limit in bytes, and
// $(VAR) references to earlier variables are expanded as the kubelet does.
func containerEnv(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
				if v, ok := env[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref
			})
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			env[e.Name] = "10.1.2.3"
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" &&
			e.ValueFrom.ResourceFieldRef.ContainerName == c.Name:
			// In bytes, as the kubelet gives it without a divisor.
			env[e.Name] = strconv.FormatInt(c.Resources.Limits.Memory().Value(), 10)
		default:
			t.Fatalf("container %s: env %s: unexpected source %+v", c.Name, e.Name, e.ValueFrom)
		}
	}
	return env
}

// loadConfig follows the container's --config argument to the ConfigMap
// mounted there and loads it with the sidecar's own config loader and the
// container's environment, as `writeback serve` would, then validates it.
// It returns the loaded configuration and the file as rendered.
func loadConfig(t *testing.T, ms manifests, d *appsv1.Deployment, c corev1.Container) (*config.Config, string) {
	t.Helper()
	var path string
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			path = c.Args[i+1]
		}
	}
	if path == "" {
		t.Fatalf("container %s: args %q pass no --config", c.Name, c.Args)
	}
	var mount corev1.VolumeMount
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			mount = vm
		}
	}
	if mount.Name == "" {
		t.Fatalf("container %s: --config %s is on no volume mount (%+v)", c.Name, path, c.VolumeMounts)
	}
	var cmName string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName == "" {
		t.Fatalf("container %s: volume %s is not a ConfigMap", c.Name, mount.Name)
	}
	cm := find[*corev1.ConfigMap](t, ms, cmName)
	key := strings.TrimPrefix(path, strings.TrimSuffix(mount.MountPath, "/")+"/")
	data, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %q for --config %s", cmName, key, path)
	}
	file := filepath.Join(t.TempDir(), "writeback.yaml")
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	env := containerEnv(t, c)
	cfg, err := config.Load(file, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, nil)
	if err != nil {
		t.Fatalf("the sidecar's config loader refuses ConfigMap %s (env %v): %v\n%s", cmName, env, err, data)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the sidecar's config validation refuses ConfigMap %s: %v\n%s", cmName, err, data)
	}
	return cfg, data
}

// expectFailure runs helm template and expects a non-zero exit whose output
// contains every one of want.
func expectFailure(t *testing.T, args []string, want ...string) {
	t.Helper()
	full := append([]string{"template", release, chartDir, "--namespace", namespace}, args...)
	out, errOut, err := runHelm(full...)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("helm %s: want a non-zero exit, got err=%v\nstdout:\n%s", strings.Join(args, " "), err, out)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("helm %s: the error does not say %q:\n%s", strings.Join(args, " "), w, errOut)
		}
	}
}
