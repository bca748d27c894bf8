package deploy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

const composeFile = "compose/compose.yaml"

// loadCompose loads the compose file as `docker compose` does (the
// compose-spec loader: schema validation, interpolation from env, anchors
// and merges, relative paths resolved), with every profile enabled.
func loadCompose(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: env,
	}, loader.WithProfiles([]string{"*"}))
	if err != nil {
		t.Fatalf("load %s: %v", composeFile, err)
	}
	return p
}

// sluiceServices are the services that run the image built from the
// repository's Dockerfile, by name.
func sluiceServices(p *types.Project) []string {
	var out []string
	for name, s := range p.Services {
		if s.Build != nil {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// serviceEnv flattens a service's environment (a variable without a value
// is passed through from the host: empty here).
func serviceEnv(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		} else {
			env[k] = ""
		}
	}
	return env
}

func TestComposeFile(t *testing.T) {
	p := loadCompose(t, nil)
	for _, want := range []string{"zookeeper", "s3", "redis", "broker-1", "broker-2", "broker-3", "gateway-1", "gateway-2", "sink-redis", "prometheus", "grafana"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("no service %q", want)
		}
	}
	for name, s := range p.Services {
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s: no health check", name)
		}
		for dep, d := range s.DependsOn {
			if d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: depends on %s with condition %q, want service_healthy", name, dep, d.Condition)
			}
			if _, ok := p.Services[dep]; !ok {
				t.Errorf("%s: depends on %s, which is not a service", name, dep)
			}
		}
		checkImage(t, name, s.Image)
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s: publishes %s on %q: want 127.0.0.1 only", name, port.Published, port.HostIP)
			}
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s: bind mount source: %v", name, err)
				}
			}
		}
		if s.Build != nil {
			df := filepath.Join(s.Build.Context, s.Build.Dockerfile)
			if _, err := os.Stat(df); err != nil {
				t.Errorf("%s: builds with %s: %v", name, df, err)
			}
			if s.Build.Context != repoRoot(t) {
				t.Errorf("%s: build context %s, want the repository root %s", name, s.Build.Context, repoRoot(t))
			}
		}
	}
	for _, name := range sluiceServices(p) {
		s := p.Services[name]
		checkFlags(t, name, s.Command, serviceEnv(s), "")
	}
	checkPrometheusTargets(t, p)
}

// checkPrometheusTargets: Prometheus scrapes every broker and gateway
// service, at the port its --addr listens on.
func checkPrometheusTargets(t *testing.T, p *types.Project) {
	t.Helper()
	b, err := os.ReadFile("compose/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			MetricsPath   string `json:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	var targets []string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("prometheus.yml: job %s scrapes %s, not /metrics", sc.JobName, sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	for _, name := range sluiceServices(p) {
		s := p.Services[name]
		if len(s.Command) == 0 || (s.Command[0] != "broker" && s.Command[0] != "gateway") {
			continue
		}
		addr := flagValue(s.Command, "--addr")
		_, port, ok := strings.Cut(addr, ":")
		if !ok {
			t.Errorf("%s: no --addr host:port in %q", name, s.Command)
			continue
		}
		if !slices.Contains(targets, name+":"+port) {
			t.Errorf("prometheus.yml does not scrape %s:%s (targets %v)", name, port, targets)
		}
	}
}

// flagValue returns the value given to a flag in args ("--f v" or "--f=v").
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
