package charttest

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/writeback/writeback/internal/config"
)

const (
	sidecarImage  = "ghcr.io/writeback/writeback:0.1.0" // repository + the chart's appVersion
	configPath    = "/etc/writeback/writeback.yaml"
	shutdownSlack = 10 // the sidecar's graceful shutdown (internal/server: 10 s)
	serviceMonAPI = "monitoring.coreos.com/v1/ServiceMonitor"
)

// The documented values examples; the Makefile lints and renders every
// examples/*.yaml, these must be among them.
var documentedExamples = []string{"app-sidecar", "inject", "standalone-appliers", "sentinel"}

func TestExamplesLintAndDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	for _, want := range documentedExamples {
		if !slices.Contains(names, want) {
			t.Errorf("helm/writeback/examples/%s.yaml is missing (have %v)", want, names)
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if out, errOut, err := runHelm("lint", "--strict", chartDir, "-f", f); err != nil {
				t.Fatalf("helm lint --strict -f %s: %v\n%s%s", f, err, out, errOut)
			}
			for _, extra := range [][]string{nil, {"--api-versions", serviceMonAPI}} {
				ms := render(t, "", append([]string{"-f", f}, extra...)...)
				noInlineSecrets(t, ms)
			}
		})
	}
}

// noInlineSecrets checks that no rendered writeback.yaml holds a DSN, a
// password or a token, and that no container gets one as a literal value.
func noInlineSecrets(t *testing.T, ms manifests) {
	t.Helper()
	secretKey := regexp.MustCompile(`(?m)^\s*(dsn|uri|password|token):`)
	for _, cm := range all[*corev1.ConfigMap](ms) {
		if data, ok := cm.Data["writeback.yaml"]; ok {
			if m := secretKey.FindString(data); m != "" {
				t.Errorf("ConfigMap %s: writeback.yaml holds a secret (%q):\n%s", cm.Name, strings.TrimSpace(m), data)
			}
		}
	}
	for _, d := range all[*appsv1.Deployment](ms) {
		for _, c := range append(append([]corev1.Container{}, d.Spec.Template.Spec.InitContainers...), d.Spec.Template.Spec.Containers...) {
			for _, e := range c.Env {
				n := strings.ToUpper(e.Name)
				secretish := strings.Contains(n, "DSN") || strings.Contains(n, "PASSWORD") || strings.Contains(n, "TOKEN")
				if secretish && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("Deployment %s container %s: env %s is not read from a Secret", d.Name, c.Name, e.Name)
				}
			}
		}
	}
}

// sidecarWant is what checkSidecar expects of a writeback container.
type sidecarWant struct {
	preStopSeconds int64
	native         bool
	secrets        map[string]corev1.SecretKeySelector // env var → Secret key
}

// checkSidecar checks the writeback container: image, command line, port,
// probes, preStop hook, Secret references, security context.
func checkSidecar(t *testing.T, c corev1.Container, want sidecarWant) {
	t.Helper()
	if c.Image != sidecarImage {
		t.Errorf("sidecar image = %q, want %q", c.Image, sidecarImage)
	}
	if want := []string{"serve", "--config", configPath}; !reflect.DeepEqual(c.Args, want) || len(c.Command) != 0 {
		t.Errorf("sidecar command %q args %q, want the image's entrypoint with args %q", c.Command, c.Args, want)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "wb-http" || c.Ports[0].ContainerPort != 8480 || c.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("sidecar ports = %+v, want wb-http 8480/TCP", c.Ports)
	}
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}, {"startupProbe", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("sidecar %s = %+v, want an httpGet of %s", p.kind, p.probe, p.path)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "wb-http" {
			t.Errorf("sidecar %s gets %s on port %s, want %s on wb-http", p.kind, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.TimeoutSeconds <= 2 {
		t.Errorf("sidecar readinessProbe timeout %ds: /readyz waits up to 2 s for its pings, give it more", c.ReadinessProbe.TimeoutSeconds)
	}
	switch {
	case want.preStopSeconds == 0:
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
			t.Errorf("sidecar preStop = %+v, want none", c.Lifecycle.PreStop)
		}
	case c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil:
		t.Errorf("sidecar lifecycle = %+v, want preStop sleep %d s", c.Lifecycle, want.preStopSeconds)
	case c.Lifecycle.PreStop.Sleep.Seconds != want.preStopSeconds || c.Lifecycle.PreStop.Exec != nil || c.Lifecycle.PreStop.HTTPGet != nil:
		t.Errorf("sidecar preStop = %+v, want only sleep %d s (the image is distroless)", c.Lifecycle.PreStop, want.preStopSeconds)
	}
	native := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	if native != want.native {
		t.Errorf("sidecar restartPolicy = %v, want native sidecar %v", c.RestartPolicy, want.native)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("sidecar securityContext = %+v, want non-root, read-only root, no privilege escalation", sc)
	}
	for name, ref := range want.secrets {
		e, ok := envVar(c, name)
		if !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("sidecar env %s = %+v, want it from Secret %s key %s", name, e, ref.Name, ref.Key)
			continue
		}
		if got := e.ValueFrom.SecretKeyRef; got.Name != ref.Name || got.Key != ref.Key {
			t.Errorf("sidecar env %s from Secret %s key %s, want Secret %s key %s", name, got.Name, got.Key, ref.Name, ref.Key)
		}
	}
	// The Go runtime's soft memory limit is the container's, when it has one.
	e, ok := envVar(c, "GOMEMLIMIT")
	fromLimit := ok && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
		e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.ContainerName == "writeback"
	if limited := !c.Resources.Limits.Memory().IsZero(); limited != fromLimit {
		t.Errorf("sidecar memory limit %v, env GOMEMLIMIT %+v: want GOMEMLIMIT from limits.memory exactly when there is a limit", c.Resources.Limits.Memory(), e)
	}
	var mounted bool
	for _, vm := range c.VolumeMounts {
		mounted = mounted || (vm.MountPath == filepath.Dir(configPath) && vm.ReadOnly)
	}
	if !mounted {
		t.Errorf("sidecar volumeMounts = %+v, want the config read-only at %s", c.VolumeMounts, filepath.Dir(configPath))
	}
}

// checkPod checks the pod-level pieces the sidecar needs: a grace period
// covering preStop and the sidecar's shutdown, and the checksum annotation.
func checkPod(t *testing.T, d *appsv1.Deployment, preStop, wantGrace int64) {
	t.Helper()
	g := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil || *g != wantGrace {
		t.Errorf("Deployment %s terminationGracePeriodSeconds = %v, want %d", d.Name, g, wantGrace)
	} else if *g < preStop+shutdownSlack {
		t.Errorf("Deployment %s terminationGracePeriodSeconds %d < preStop %d + %d s shutdown", d.Name, *g, preStop, shutdownSlack)
	}
	if sum := d.Spec.Template.Annotations["checksum/writeback-config"]; !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(sum) {
		t.Errorf("Deployment %s: pod annotation checksum/writeback-config = %q, want a sha256", d.Name, sum)
	}
}

func secretRef(name, key string) corev1.SecretKeySelector {
	return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func TestAppSidecar(t *testing.T) {
	ms := render(t, "", "-f", example("app-sidecar"))
	d := find[*appsv1.Deployment](t, ms, release)
	pod := d.Spec.Template.Spec
	if got := containerNames(pod.Containers); !reflect.DeepEqual(got, []string{"app", "writeback"}) || len(pod.InitContainers) != 0 {
		t.Fatalf("Deployment %s containers %v init %v, want [app writeback] and no init containers", d.Name, got, containerNames(pod.InitContainers))
	}
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %d, want 3", *d.Spec.Replicas)
	}
	app := container(t, d, "app")
	if app.Image != "ghcr.io/example/shop:2.4.1" {
		t.Errorf("app image = %q", app.Image)
	}
	if e, _ := envVar(app, "WRITEBACK_ADDR"); e.Value != "http://127.0.0.1:8480" {
		t.Errorf("app env WRITEBACK_ADDR = %q, want http://127.0.0.1:8480", e.Value)
	}
	sc := container(t, d, "writeback")
	checkSidecar(t, sc, sidecarWant{preStopSeconds: 5, secrets: map[string]corev1.SecretKeySelector{
		"WRITEBACK_STORE_PG_DSN":   secretRef("shop-pg", "dsn"),
		"WRITEBACK_REDIS_PASSWORD": secretRef("shop-redis", "password"),
		"WRITEBACK_AUTH_TOKEN":     secretRef("shop-writeback-auth", "token"),
	}})
	checkPod(t, d, 5, 5+shutdownSlack+15)

	cfg, raw := loadConfig(t, ms, d, sc)
	if pg := cfg.Stores["pg"]; pg.Driver != "postgres" || pg.DSNEnv != "WRITEBACK_STORE_PG_DSN" || pg.DSN != "secret:shop-pg/dsn" || pg.MaxConns != 16 {
		t.Errorf("stores.pg = %+v, want postgres with its DSN from Secret shop-pg (dsnEnv WRITEBACK_STORE_PG_DSN)", pg)
	}
	if cfg.Redis.Password != "secret:shop-redis/password" || cfg.Auth.Token != "secret:shop-writeback-auth/token" {
		t.Errorf("redis password %q, auth token %q: want both from their Secrets", cfg.Redis.Password, cfg.Auth.Token)
	}
	if cfg.Redis.Mode != config.ModeStandalone || !reflect.DeepEqual(cfg.Redis.Addrs, []string{"redis-master.redis.svc:6379"}) {
		t.Errorf("redis = %+v", cfg.Redis)
	}
	if cfg.Writeback.PinnedMemoryLimit != 512*config.MiB || cfg.Writeback.Workers != 2 {
		t.Errorf("writeback = %+v, want pinnedMemoryLimit 512MiB, workers 2", cfg.Writeback)
	}
	if cfg.Listen != ":8480" {
		t.Errorf("listen = %q, want :8480 (probes and scrapes reach the pod IP)", cfg.Listen)
	}
	if o, c := cfg.Collections["orders"], cfg.Collections["customers"]; o.Policy != config.PolicyWriteBack || o.Store != "pg" || c.Policy != config.PolicyWriteThrough || c.Table != "customers" {
		t.Errorf("collections = %+v", cfg.Collections)
	}
	if !strings.Contains(raw, "dsnEnv: WRITEBACK_STORE_PG_DSN") {
		t.Errorf("writeback.yaml does not name the DSN's env var:\n%s", raw)
	}
	if q := cfg.Queues["bank"]; q.Store != "pg" || !reflect.DeepEqual(q.Tables, []string{"account"}) || !q.WriteThrough() || len(cfg.Mappings) != 1 || cfg.Mappings[0]["plugin"] != "sql" {
		t.Errorf("queues = %+v, mappings = %+v: want the write-through bank queue and the sql mapping", cfg.Queues, cfg.Mappings)
	}
	if cfg.Writeback.SessionTimeout.Duration != 20*time.Second {
		t.Errorf("writeback.sessionTimeout = %v, want 20s", cfg.Writeback.SessionTimeout)
	}

	// The headless metrics Service scrapes the sidecar's port of the app pods.
	svc := find[*corev1.Service](t, ms, release+"-writeback-metrics")
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("metrics Service clusterIP = %q, want None (headless: not an entry point to /v1)", svc.Spec.ClusterIP)
	}
	if got := podsSelected(t, ms, selectorOf(svc)); len(got) != 1 || got[0].Name != release {
		t.Errorf("metrics Service selects %v, want the app Deployment", deploymentNames(got))
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "wb-http" || svc.Spec.Ports[0].TargetPort.String() != "wb-http" {
		t.Errorf("metrics Service ports = %+v, want wb-http → wb-http", svc.Spec.Ports)
	}
	appSvc := find[*corev1.Service](t, ms, release)
	if got := podsSelected(t, ms, selectorOf(appSvc)); len(got) != 1 || got[0].Name != release {
		t.Errorf("app Service selects %v, want the app Deployment", deploymentNames(got))
	}

	// The ServiceMonitor only where the cluster has its API.
	if sms := all[*monitoringv1.ServiceMonitor](ms); len(sms) != 0 {
		t.Errorf("a ServiceMonitor is rendered although the cluster has no %s", serviceMonAPI)
	}
	ms = render(t, "", "-f", example("app-sidecar"), "--api-versions", serviceMonAPI)
	sm := find[*monitoringv1.ServiceMonitor](t, ms, release+"-writeback")
	sel := labels.SelectorFromSet(sm.Spec.Selector.MatchLabels)
	if !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the metrics Service (labels %v)", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if !reflect.DeepEqual(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor namespaceSelector = %+v, want [%s]", sm.Spec.NamespaceSelector, namespace)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "wb-http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints = %+v, want port wb-http path /metrics", sm.Spec.Endpoints)
	}
	if sm.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels = %v, want metrics.serviceMonitor.labels added", sm.Labels)
	}

	checkDashboard(t, find[*corev1.ConfigMap](t, ms, release+"-writeback-dashboard"))
}

func selectorOf(svc *corev1.Service) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}
}

func deploymentNames(ds []*appsv1.Deployment) []string {
	var n []string
	for _, d := range ds {
		n = append(n, d.Name)
	}
	return n
}

// checkDashboard checks the Grafana dashboard ConfigMap: the sidecar label,
// valid JSON, and a panel for each of the metrics operators watch.
func checkDashboard(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels = %v, want grafana_dashboard: \"1\"", cm.Labels)
	}
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(cm.Data["writeback.json"]), &dash); err != nil {
		t.Fatalf("dashboard writeback.json is not JSON: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for what, re := range map[string]string{
		"pending changes":    `writeback_pending_changes\{`,
		"oldest pending age": `writeback_oldest_pending_age_seconds\{`,
		"apply rate":         `rate\(writeback_applied_changes_total\{[^}]*\}\[1m\]\)`,
		"hit ratio":          `writeback_cache_hits_total\{.*/.*writeback_cache_misses_total\{`,
		"lease conflicts":    `writeback_lease_conflicts_total\{`,
		"fallback state":     `writeback_write_through_fallback\{`,
		"dead letters":       `writeback_dead_letters\{`,
		"pinned bytes":       `writeback_pinned_bytes\{`,
	} {
		found := false
		for _, e := range exprs {
			found = found || regexp.MustCompile(re).MatchString(e)
		}
		if !found {
			t.Errorf("dashboard has no %s panel (an expression matching %s) among %q", what, re, exprs)
		}
	}
}

// sidecar.respSocket puts the Redis-protocol front door on a Unix socket in
// an emptyDir that the sidecar and the app mount at the same directory, the
// app told the path; the standalone appliers serve no socket and mount
// nothing of it.
func TestRespSocket(t *testing.T) {
	const path = "/run/writeback/resp.sock"
	ms := render(t, "", "-f", example("standalone-appliers"), "--set", "sidecar.respSocket="+path)
	d := find[*appsv1.Deployment](t, ms, release)
	sc, app := container(t, d, "writeback"), container(t, d, "app")
	cfg, _ := loadConfig(t, ms, d, sc)
	if cfg.ListenResp != "unix:"+path || cfg.Resp.SocketMode != "0666" {
		t.Errorf("the sidecar's listenResp %q, resp.socketMode %q; want unix:%s and 0666", cfg.ListenResp, cfg.Resp.SocketMode, path)
	}
	mounted := func(c corev1.Container) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "writeback-run" && m.MountPath == "/run/writeback" && !m.ReadOnly
		})
	}
	if !mounted(sc) || !mounted(app) {
		t.Errorf("volume mounts: sidecar %+v, app %+v; want writeback-run at /run/writeback in both", sc.VolumeMounts, app.VolumeMounts)
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "writeback-run" && v.EmptyDir != nil }) {
		t.Errorf("pod volumes %+v; want the emptyDir writeback-run", d.Spec.Template.Spec.Volumes)
	}
	if e, _ := envVar(app, "WRITEBACK_RESP_SOCKET"); e.Value != path {
		t.Errorf("app env WRITEBACK_RESP_SOCKET = %q, want %s", e.Value, path)
	}

	appliers := find[*appsv1.Deployment](t, ms, release+"-writeback-appliers")
	acfg, _ := loadConfig(t, ms, appliers, container(t, appliers, "writeback"))
	if _, unix := config.UnixSocket(acfg.ListenResp); unix || len(appliers.Spec.Template.Spec.Volumes) != 1 {
		t.Errorf("appliers: listenResp %q, volumes %+v; want no socket and only the configuration", acfg.ListenResp, appliers.Spec.Template.Spec.Volumes)
	}

	// Off by default: loopback TCP, no volume.
	ms = render(t, "", "-f", example("standalone-appliers"))
	d = find[*appsv1.Deployment](t, ms, release)
	cfg, _ = loadConfig(t, ms, d, container(t, d, "writeback"))
	if _, unix := config.UnixSocket(cfg.ListenResp); unix || mounted(container(t, d, "app")) {
		t.Errorf("without sidecar.respSocket: listenResp %q, app mounts %+v; want TCP and no socket volume", cfg.ListenResp, container(t, d, "app").VolumeMounts)
	}
}

func TestInjectMode(t *testing.T) {
	// The writeback chart alone renders no workload: the config, metrics Service, dashboard.
	ms := render(t, "", "-f", example("inject"))
	if ds := all[*appsv1.Deployment](ms); len(ds) != 0 {
		t.Errorf("mode inject renders Deployments %v, want none", deploymentNames(ds))
	}
	find[*corev1.ConfigMap](t, ms, release+"-writeback-config")
	find[*corev1.Service](t, ms, release+"-writeback-metrics")

	// An app chart with writeback as a dependency includes the sidecar.
	chart := filepath.Join(t.TempDir(), "injectapp")
	copyDir(t, filepath.Join("testdata", "injectapp"), chart)
	copyDir(t, chartDir, filepath.Join(chart, "charts", "writeback"))
	if out, errOut, err := runHelm("lint", "--strict", chart); err != nil {
		t.Fatalf("helm lint --strict testdata/injectapp: %v\n%s%s", err, out, errOut)
	}
	ms = render(t, chart)
	d := find[*appsv1.Deployment](t, ms, release+"-catalog")
	if got := containerNames(d.Spec.Template.Spec.Containers); !reflect.DeepEqual(got, []string{"catalog", "writeback"}) {
		t.Fatalf("containers = %v, want [catalog writeback]", got)
	}
	sc := container(t, d, "writeback")
	checkSidecar(t, sc, sidecarWant{preStopSeconds: 5, secrets: map[string]corev1.SecretKeySelector{
		"WRITEBACK_STORE_MARIA_DSN": secretRef("catalog-mariadb", "dsn"),
	}})
	if _, ok := envVar(sc, "WRITEBACK_REDIS_PASSWORD"); ok {
		t.Errorf("sidecar env has WRITEBACK_REDIS_PASSWORD although no Secret is configured for it")
	}
	// No token Secret is configured: the subchart generates one, and the
	// sidecar reads both tokens from it.
	checkSidecar(t, sc, sidecarWant{preStopSeconds: 5, secrets: map[string]corev1.SecretKeySelector{
		"WRITEBACK_AUTH_TOKEN":       secretRef(release+"-writeback-auth", "token"),
		"WRITEBACK_AUTH_ADMIN_TOKEN": secretRef(release+"-writeback-auth", "adminToken"),
	}})
	generatedTokens(t, ms, release+"-writeback-auth")
	checkPod(t, d, 5, 30)
	cfg, _ := loadConfig(t, ms, d, sc)
	if m := cfg.Stores["maria"]; m.Driver != "mysql" || m.DSN != "secret:catalog-mariadb/dsn" {
		t.Errorf("stores.maria = %+v, want mysql with its DSN from Secret catalog-mariadb", m)
	}
	if cfg.Writeback.PinnedMemoryLimit != 256*config.MiB {
		t.Errorf("pinnedMemoryLimit = %v, want 256MiB", cfg.Writeback.PinnedMemoryLimit)
	}
	svc := find[*corev1.Service](t, ms, release+"-writeback-metrics")
	if got := podsSelected(t, ms, selectorOf(svc)); len(got) != 1 || got[0].Name != d.Name {
		t.Errorf("metrics Service selects %v, want the app's Deployment (labels from writeback.podLabels)", deploymentNames(got))
	}
}

// TestNoMemoryLimit: a sidecar without a memory limit gets no GOMEMLIMIT
// (checkSidecar checks the containers that have one).
func TestNoMemoryLimit(t *testing.T) {
	ms := render(t, "", "-f", example("app-sidecar"), "--set", "sidecar.resources.limits=null")
	d := find[*appsv1.Deployment](t, ms, release)
	sc := container(t, d, "writeback")
	if !sc.Resources.Limits.Memory().IsZero() {
		t.Fatalf("sidecar limits = %v, want none", sc.Resources.Limits)
	}
	if e, ok := envVar(sc, "GOMEMLIMIT"); ok {
		t.Errorf("sidecar env GOMEMLIMIT = %+v without a memory limit; want none", e)
	}
}

func TestStandaloneAppliers(t *testing.T) {
	ms := render(t, "", "-f", example("standalone-appliers"))
	app := find[*appsv1.Deployment](t, ms, release)
	appCfg, _ := loadConfig(t, ms, app, container(t, app, "writeback"))
	if appCfg.Writeback.Workers != 1 {
		t.Errorf("app sidecars run %d applier workers, want 1 (sidecar.workers)", appCfg.Writeback.Workers)
	}

	d := find[*appsv1.Deployment](t, ms, release+"-writeback-appliers")
	if *d.Spec.Replicas != 3 {
		t.Errorf("appliers replicas = %d, want 3", *d.Spec.Replicas)
	}
	if got := containerNames(d.Spec.Template.Spec.Containers); !reflect.DeepEqual(got, []string{"writeback"}) || len(d.Spec.Template.Spec.InitContainers) != 0 {
		t.Fatalf("appliers containers = %v, want only writeback", got)
	}
	c := container(t, d, "writeback")
	checkSidecar(t, c, sidecarWant{preStopSeconds: 5, secrets: map[string]corev1.SecretKeySelector{
		"WRITEBACK_STORE_PG_DSN":   secretRef("ledger-pg", "dsn"),
		"WRITEBACK_REDIS_PASSWORD": secretRef("redis", "redis-password"),
	}})
	checkPod(t, d, 5, 30)
	podIP := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	})
	listen := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "WRITEBACK_LISTEN" })
	if podIP < 0 || listen < podIP || c.Env[listen].Value != "$(POD_IP):8480" {
		t.Errorf("appliers env = %+v, want POD_IP from status.podIP, then WRITEBACK_LISTEN=$(POD_IP):8480", c.Env)
	}
	cfg, _ := loadConfig(t, ms, d, c)
	if cfg.Listen != "10.1.2.3:8480" || cfg.Writeback.Workers != 8 || cfg.Writeback.Partitions != 128 || cfg.Writeback.PinnedMemoryLimit != 2*config.GiB {
		t.Errorf("appliers config: listen %q workers %d partitions %d pinned %v; want 10.1.2.3:8480, 8, 128, 2GiB",
			cfg.Listen, cfg.Writeback.Workers, cfg.Writeback.Partitions, cfg.Writeback.PinnedMemoryLimit)
	}

	pdb := find[*policyv1.PodDisruptionBudget](t, ms, release+"-writeback-appliers")
	if got := podsSelected(t, ms, pdb.Spec.Selector); len(got) != 1 || got[0].Name != d.Name {
		t.Errorf("PodDisruptionBudget selects %v, want only the appliers", deploymentNames(got))
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget = %+v, want maxUnavailable 1", pdb.Spec)
	}
	svc := find[*corev1.Service](t, ms, release+"-writeback-metrics")
	if got := deploymentNames(podsSelected(t, ms, selectorOf(svc))); !reflect.DeepEqual(got, []string{release, d.Name}) && !reflect.DeepEqual(got, []string{d.Name, release}) {
		t.Errorf("metrics Service selects %v, want the app sidecars and the appliers", got)
	}
	if d.Spec.Template.Labels["writeback/role"] != "appliers" || app.Spec.Template.Labels["writeback/role"] != "sidecar" {
		t.Errorf("writeback/role labels: appliers %q, app %q", d.Spec.Template.Labels["writeback/role"], app.Spec.Template.Labels["writeback/role"])
	}
}

func TestSentinelNativeSidecar(t *testing.T) {
	ms := render(t, "", "-f", example("sentinel"))
	d := find[*appsv1.Deployment](t, ms, release)
	pod := d.Spec.Template.Spec
	if got := containerNames(pod.InitContainers); !reflect.DeepEqual(got, []string{"writeback"}) {
		t.Fatalf("init containers = %v, want [writeback] (sidecar.native)", got)
	}
	if got := containerNames(pod.Containers); !reflect.DeepEqual(got, []string{"app"}) {
		t.Fatalf("containers = %v, want [app]", got)
	}
	sc := container(t, d, "writeback")
	checkSidecar(t, sc, sidecarWant{preStopSeconds: 10, native: true, secrets: map[string]corev1.SecretKeySelector{
		"WRITEBACK_STORE_PG_DSN":    secretRef("app-pg", "dsn"),
		"WRITEBACK_STORE_MARIA_DSN": secretRef("app-mariadb", "dsn"),
		"WRITEBACK_REDIS_PASSWORD":  secretRef("redis", "password"),
	}})
	checkPod(t, d, 10, 10+shutdownSlack+15)
	cfg, _ := loadConfig(t, ms, d, sc)
	if cfg.Redis.Mode != config.ModeSentinel || cfg.Redis.MasterName != "mymaster" || len(cfg.Redis.Addrs) != 3 {
		t.Errorf("redis = %+v, want sentinel mymaster with 3 sentinels", cfg.Redis)
	}
	if cfg.Stores["pg"].DSN != "secret:app-pg/dsn" || cfg.Stores["maria"].DSN != "secret:app-mariadb/dsn" {
		t.Errorf("stores = %+v", cfg.Stores)
	}
}

func TestPreStopAndGracePeriod(t *testing.T) {
	ms := render(t, "", "-f", example("app-sidecar"), "--set", "preStop.sleepSeconds=0")
	d := find[*appsv1.Deployment](t, ms, release)
	checkSidecar(t, container(t, d, "writeback"), sidecarWant{preStopSeconds: 0})
	checkPod(t, d, 0, shutdownSlack+15)

	ms = render(t, "", "-f", example("app-sidecar"), "--set", "terminationGracePeriodSeconds=120")
	checkPod(t, find[*appsv1.Deployment](t, ms, release), 5, 120)
}

// generatedTokens checks the Secret the chart generates: a random token
// and a different random admin token, 40 characters each.
func generatedTokens(t *testing.T, ms manifests, name string) (token, admin string) {
	t.Helper()
	sec := find[*corev1.Secret](t, ms, name)
	token, admin = string(sec.Data["token"]), string(sec.Data["adminToken"])
	alnum := regexp.MustCompile(`^[A-Za-z0-9]{40}$`)
	if !alnum.MatchString(token) || !alnum.MatchString(admin) || token == admin {
		t.Errorf("Secret %s: token %q, adminToken %q; want two different random 40-character tokens", name, token, admin)
	}
	return token, admin
}

// Without auth.tokenSecret the chart generates the API token and an admin
// token into a Secret of its own: the sidecar reads both, the app gets the
// API token as WRITEBACK_TOKEN, and every render draws new ones unless the
// values give them. With auth.tokenSecret, nothing is generated. With no
// token at all the chart refuses, unless auth.allowUnauthenticated.
func TestGeneratedTokens(t *testing.T) {
	app := example("app-sidecar")
	secretName := release + "-writeback-auth"
	ms := render(t, "", "-f", app, "--set", "auth.tokenSecret=null")
	d := find[*appsv1.Deployment](t, ms, release)
	sc := container(t, d, "writeback")
	checkSidecar(t, sc, sidecarWant{preStopSeconds: 5, secrets: map[string]corev1.SecretKeySelector{
		"WRITEBACK_AUTH_TOKEN":       secretRef(secretName, "token"),
		"WRITEBACK_AUTH_ADMIN_TOKEN": secretRef(secretName, "adminToken"),
	}})
	if e, ok := envVar(container(t, d, "app"), "WRITEBACK_TOKEN"); !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != secretName || e.ValueFrom.SecretKeyRef.Key != "token" {
		t.Errorf("app env WRITEBACK_TOKEN = %+v, want the generated token", e)
	}
	cfg, _ := loadConfig(t, ms, d, sc)
	if cfg.Auth.Token != "secret:"+secretName+"/token" || cfg.Auth.AdminToken != "secret:"+secretName+"/adminToken" || cfg.Auth.AllowUnauthenticated {
		t.Errorf("auth = %+v, want both tokens from the generated Secret", cfg.Auth)
	}
	first, _ := generatedTokens(t, ms, secretName)
	second, _ := generatedTokens(t, render(t, "", "-f", app, "--set", "auth.tokenSecret=null"), secretName)
	if first == second {
		t.Errorf("two renders generated the same token %q", first)
	}

	ms = render(t, "", "-f", app, "--set", "auth.tokenSecret=null,auth.token=given-token-0123456789,auth.generateAdminToken=false")
	sec := find[*corev1.Secret](t, ms, secretName)
	if string(sec.Data["token"]) != "given-token-0123456789" || sec.Data["adminToken"] != nil {
		t.Errorf("Secret %s = %q, want the given token and no admin token", secretName, sec.Data)
	}
	if _, ok := envVar(container(t, find[*appsv1.Deployment](t, ms, release), "writeback"), "WRITEBACK_AUTH_ADMIN_TOKEN"); ok {
		t.Errorf("sidecar env has WRITEBACK_AUTH_ADMIN_TOKEN with generateAdminToken false")
	}

	// An existing Secret: nothing generated; an admin token from another.
	ms = render(t, "", "-f", app, "--set", "auth.adminTokenSecret.secretName=shop-admin,auth.adminTokenSecret.secretKey=token")
	if ss := all[*corev1.Secret](ms); len(ss) != 0 {
		t.Errorf("with auth.tokenSecret the chart generates Secrets %v", ss)
	}
	d = find[*appsv1.Deployment](t, ms, release)
	checkSidecar(t, container(t, d, "writeback"), sidecarWant{preStopSeconds: 5, secrets: map[string]corev1.SecretKeySelector{
		"WRITEBACK_AUTH_TOKEN":       secretRef("shop-writeback-auth", "token"),
		"WRITEBACK_AUTH_ADMIN_TOKEN": secretRef("shop-admin", "token"),
	}})

	// No token at all, explicitly.
	ms = render(t, "", "-f", app, "--set", "auth.tokenSecret=null,auth.generate=false,auth.allowUnauthenticated=true")
	d = find[*appsv1.Deployment](t, ms, release)
	if cfg, _ := loadConfig(t, ms, d, container(t, d, "writeback")); cfg.Auth.Token != "" || !cfg.Auth.AllowUnauthenticated {
		t.Errorf("auth = %+v, want no token and allowUnauthenticated", cfg.Auth)
	}
}

func TestBadValuesFail(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noDSN := write("no-dsn.yaml", `
redis: {addrs: ["redis:6379"]}
stores:
  pg: {driver: postgres}
collections:
  t: {store: pg, key: id}
app: {image: {repository: example/app}}
`)
	inlineDSN := write("inline-dsn.yaml", `
stores:
  pg: {dsn: "postgres://u:secret@db/x"}
`)
	app := example("app-sidecar")
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"missing DSN secret", []string{"-f", noDSN}, []string{"stores.pg: dsnSecret is required"}},
		{"inline DSN", []string{"-f", app, "-f", inlineDSN}, []string{"stores.pg: Additional property dsn is not allowed"}},
		{"DSN secret without key", []string{"-f", app, "--set", "stores.pg.dsnSecret.secretKey="}, []string{"stores.pg.dsnSecret.secretKey: String length must be greater than or equal to 1"}},
		{"app replicas < 0", []string{"-f", app, "--set", "app.replicas=-1"}, []string{"app.replicas: Must be greater than or equal to 0"}},
		{"appliers replicas < 0", []string{"-f", app, "--set", "appliers.replicas=-1"}, []string{"appliers.replicas: Must be greater than or equal to 0"}},
		{"unknown Redis mode", []string{"-f", app, "--set", "redis.mode=replicated"}, []string{`redis.mode: redis.mode must be one of the following: "standalone", "sentinel", "cluster"`}},
		{"sentinel without master", []string{"-f", app, "--set", "redis.mode=sentinel"}, []string{"redis.masterName: String length must be greater than or equal to 1"}},
		{"unknown policy", []string{"-f", app, "--set", "collections.orders.policy=write-behind"}, []string{`collections.orders.policy: collections.orders.policy must be one of the following: "write-back", "write-through", "write-around"`}},
		{"bad mode", []string{"-f", app, "--set", "mode=daemonset"}, []string{`mode: mode must be one of the following: "app", "inject"`}},
		{"unknown store", []string{"-f", app, "--set", "collections.orders.store=mongo"}, []string{`collections.orders.store: "mongo" is not one of the stores (pg)`}},
		{"no app image", []string{"-f", app, "--set", "app.image.repository="}, []string{"app.image.repository is required in mode app"}},
		{"grace period too short", []string{"-f", app, "--set", "terminationGracePeriodSeconds=12"}, []string{"terminationGracePeriodSeconds: 12 is shorter than preStop.sleepSeconds (5) + the sidecar's 10 s shutdown; use at least 15"}},
		{"bad pinned memory limit", []string{"-f", app, "--set", "writeback.pinnedMemoryLimit=lots"}, []string{"writeback.pinnedMemoryLimit: Does not match pattern"}},
		{"instanceID shared by every pod", []string{"-f", app, "--set", "writeback.instanceID=one"}, []string{"writeback: Additional property instanceID is not allowed"}},
		{"no token", []string{"-f", app, "--set", "auth.tokenSecret=null,auth.generate=false"}, []string{"auth: the sidecar listens on the pod network and has no API token"}},
		{"respSocket relative", []string{"-f", app, "--set", "sidecar.respSocket=resp.sock"}, []string{"sidecar.respSocket: Does not match pattern"}},
		{"respSocket in /", []string{"-f", app, "--set", "sidecar.respSocket=/resp.sock"}, []string{"sidecar.respSocket: Does not match pattern"}},
		{"admin token equal to the token", []string{"-f", app, "--set", "auth.tokenSecret=null,auth.token=same-token,auth.adminToken=same-token"}, []string{"auth.adminToken: it equals the API token"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expectFailure(t, tc.args, tc.want...) })
	}
}

// copyDir copies the directory tree src to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// TestReadmeValuesExample renders the values example of the README's
// "Deploy on Kubernetes" section, so that the documentation stays true.
func TestReadmeValuesExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Deploy on Kubernetes\n")
	if !ok {
		t.Fatal(`README.md has no "## Deploy on Kubernetes" section`)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal(`README.md's "Deploy on Kubernetes" section has no yaml values example`)
	}
	if !strings.Contains(section, "helm install ") {
		t.Error(`README.md's "Deploy on Kubernetes" section shows no helm install command`)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(m[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	ms := render(t, "", "-f", values)
	d := find[*appsv1.Deployment](t, ms, release)
	sc := container(t, d, "writeback")
	if sc.Image != "ghcr.io/you/writeback:0.1.0" {
		t.Errorf("sidecar image = %q", sc.Image)
	}
	cfg, _ := loadConfig(t, ms, d, sc)
	if cfg.Stores["pg"].DSN != "secret:shop-pg/dsn" || cfg.Redis.Password != "secret:shop-redis/password" {
		t.Errorf("the README example does not take its secrets from Secrets: %+v", cfg)
	}
}
