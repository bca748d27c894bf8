package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
)

// The compose stack, run as local processes: Docker has no engine where the
// tests run, so this is as close to `docker compose up` as they get. Every
// sluice service of the compose file runs with its own command and
// environment, as the compose-spec loader reads them, with only these
// rewrites: the addresses of ZooKeeper, the S3 server and Redis become those
// of the real ones scripts/services.sh started; each service's listen address
// and its compose DNS name become a free loopback port; the data directory is
// a temporary one; the S3 bucket and access key are the test server's; and,
// to share those servers with other tests, the ZooKeeper chroot, the S3 key
// prefix and the Redis sink's key prefix are fresh. Services start in
// depends_on order, each once its compose health check's URL answers 200.

// Where scripts/services.sh tells the tests to find the services.
const (
	envZK          = "SLUICE_TEST_ZK"
	envS3Endpoint  = "SLUICE_TEST_S3_ENDPOINT"
	envS3AccessKey = "SLUICE_TEST_S3_ACCESS_KEY"
	envS3SecretKey = "SLUICE_TEST_S3_SECRET_KEY"
	envS3Bucket    = "SLUICE_TEST_S3_BUCKET"
	envRedis       = "SLUICE_TEST_REDIS"
)

func needEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the tests through `make test`, which starts the real services", name)
	}
	return v
}

// localService is one compose service running as a local process.
type localService struct {
	name   string
	args   []string
	env    []string
	listen string // its address on loopback
	health string // its health check URL, rewritten
	logf   string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (s *localService) start(t *testing.T, bin string) {
	t.Helper()
	f, err := os.Create(s.logf)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Env = s.env
	s.cmd.Stdout, s.cmd.Stderr = f, f
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", s.name, err)
	}
	s.done = make(chan struct{})
	go func() {
		s.err = s.cmd.Wait()
		_ = f.Close() // the service's log, read by tests through its path
		close(s.done)
	}()
	t.Logf("%s: started (pid %d): sluice %s", s.name, s.cmd.Process.Pid, strings.Join(s.args, " "))
}

func (s *localService) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *localService) logTail() string {
	b, _ := os.ReadFile(s.logf)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// stack is the compose stack's sluice services, running.
type stack struct {
	t        *testing.T
	services map[string]*localService
	order    []string // start order
	http     *http.Client
}

func startStack(t *testing.T) *stack {
	zk := needEnv(t, envZK)
	s3Endpoint := needEnv(t, envS3Endpoint)
	s3Key, s3Secret, s3Bucket := needEnv(t, envS3AccessKey), needEnv(t, envS3SecretKey), needEnv(t, envS3Bucket)
	redis := needEnv(t, envRedis)
	bin := sluiceBinary(t)
	run := randomHex(t, 4)

	// The secret reaches the services through the compose file's own
	// interpolation, ${SLUICE_S3_SECRET_KEY:-...}.
	p := loadCompose(t, map[string]string{"SLUICE_S3_SECRET_KEY": s3Secret})
	names := sluiceServices(p)
	order := startOrder(t, p, names)

	st := &stack{t: t, services: map[string]*localService{}, order: order, http: &http.Client{Timeout: 40 * time.Second}}
	// DNS names of the compose network, and what they become.
	hosts := map[string]string{"zookeeper:2181/sluice": zk + "/deploy-" + run, "zookeeper:2181": zk, "s3:7070": s3Endpoint, "redis:6379": redis}
	for _, name := range names {
		st.services[name] = &localService{name: name, listen: "127.0.0.1:" + strconv.Itoa(freePort(t)), logf: filepath.Join(t.TempDir(), name+".log")}
	}
	for _, name := range names {
		svc := p.Services[name]
		ls := st.services[name]
		port := listenPort(svc)
		if port == "" {
			t.Fatalf("%s: cannot tell which port it listens on from %q", name, svc.Command)
		}
		hosts[name+":"+port] = ls.listen
	}
	rewrite := func(self *localService, v string) string {
		if strings.HasPrefix(v, "0.0.0.0:") {
			return self.listen
		}
		keys := make([]string, 0, len(hosts))
		for k := range hosts {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) }) // longest first
		for _, k := range keys {
			if strings.Contains(v, k) {
				return strings.Replace(v, k, hosts[k], 1)
			}
		}
		return v
	}
	for _, name := range names {
		svc := p.Services[name]
		ls := st.services[name]
		for _, a := range svc.Command {
			ls.args = append(ls.args, rewrite(ls, a))
		}
		env := serviceEnv(svc)
		for k, v := range env {
			env[k] = rewrite(ls, v)
		}
		if _, ok := env["SLUICE_DATA"]; ok {
			env["SLUICE_DATA"] = t.TempDir()
		}
		if _, ok := env["SLUICE_S3_ENDPOINT"]; ok {
			if env["SLUICE_S3_SECRET_KEY"] != s3Secret {
				t.Fatalf("%s: SLUICE_S3_SECRET_KEY was not interpolated from the environment", name)
			}
			env["SLUICE_S3_BUCKET"], env["SLUICE_S3_ACCESS_KEY"] = s3Bucket, s3Key
			env["SLUICE_S3_PREFIX"] = "deploy-" + run
		}
		if len(svc.Command) > 1 && svc.Command[0] == "sink" {
			ls.args = append(ls.args, "--prefix", "deploy-"+run+":")
		}
		ls.env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		for k, v := range env {
			ls.env = append(ls.env, k+"="+v)
		}
		ls.health = healthURL(t, svc, ls.listen)
	}
	t.Cleanup(func() {
		for _, ls := range st.services {
			if ls.cmd != nil && !ls.exited() {
				_ = ls.cmd.Process.Kill()
				<-ls.done
			}
		}
		if t.Failed() {
			for _, name := range st.order {
				t.Logf("---- %s log tail:\n%s", name, st.services[name].logTail())
			}
		}
	})

	// Start each dependency level together, then wait for its health checks.
	for _, level := range levels(p, order) {
		for _, name := range level {
			st.services[name].start(t, bin)
		}
		for _, name := range level {
			st.waitHealthy(st.services[name], 90*time.Second)
		}
	}
	return st
}

// listenPort is the port a sluice service listens on inside its container:
// --addr's or --metrics-addr's.
func listenPort(svc types.ServiceConfig) string {
	for _, f := range []string{"--addr", "--metrics-addr"} {
		if v := flagValue(svc.Command, f); v != "" {
			_, port, _ := strings.Cut(v, ":")
			return port
		}
	}
	return ""
}

// healthURL takes the URL out of a compose health check that GETs one
// (wget ... URL) and points it at the local process.
func healthURL(t *testing.T, svc types.ServiceConfig, listen string) string {
	t.Helper()
	if svc.HealthCheck == nil || len(svc.HealthCheck.Test) == 0 {
		t.Fatalf("%s: no health check", svc.Name)
	}
	raw := svc.HealthCheck.Test[len(svc.HealthCheck.Test)-1]
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || !slices.Contains(svc.HealthCheck.Test, "wget") {
		t.Fatalf("%s: health check %q does not GET a URL", svc.Name, svc.HealthCheck.Test)
	}
	_, port, _ := net.SplitHostPort(u.Host)
	if want := listenPort(svc); port != want {
		t.Fatalf("%s: health check probes port %s, but the service listens on %s", svc.Name, port, want)
	}
	u.Host = listen
	return u.String()
}

// startOrder sorts services so that each comes after what it depends on.
func startOrder(t *testing.T, p *types.Project, names []string) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	var visit func(n string, depth int)
	visit = func(n string, depth int) {
		if depth > len(names) {
			t.Fatalf("a depends_on cycle through %s", n)
		}
		if seen[n] || !slices.Contains(names, n) {
			return
		}
		deps := make([]string, 0)
		for d := range p.Services[n].DependsOn {
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			visit(d, depth+1)
		}
		seen[n] = true
		out = append(out, n)
	}
	for _, n := range names {
		visit(n, 0)
	}
	return out
}

// levels groups services (in start order) by how deep their dependencies
// among the sluice services go: compose starts each level together.
func levels(p *types.Project, order []string) [][]string {
	depth := map[string]int{}
	var out [][]string
	for _, n := range order {
		d := 0
		for dep := range p.Services[n].DependsOn {
			if dd, ok := depth[dep]; ok && dd+1 > d {
				d = dd + 1
			}
		}
		depth[n] = d
		for len(out) <= d {
			out = append(out, nil)
		}
		out[d] = append(out[d], n)
	}
	return out
}

func (st *stack) waitHealthy(ls *localService, timeout time.Duration) {
	st.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		if ls.exited() {
			st.t.Fatalf("%s exited before it was healthy (%v):\n%s", ls.name, ls.err, ls.logTail())
		}
		resp, err := st.http.Get(ls.health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				st.t.Logf("%s: healthy (%s)", ls.name, ls.health)
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("%s: %s not 200 after %v (last: %s)", ls.name, ls.health, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (st *stack) url(name string) string { return "http://" + st.services[name].listen }

// do sends a request and decodes a 2xx JSON answer into out.
func (st *stack) do(method, u, contentType string, body []byte, out any) error {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := st.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s %s", method, u, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// stop ends the services as `docker compose stop` does: dependents first
// (reverse start order, a level at a time), with SIGTERM, each within the
// compose file's stop_grace_period, and wants each to exit with status 0.
func (st *stack) stop(p *types.Project) {
	st.t.Helper()
	lv := levels(p, st.order)
	for i := len(lv) - 1; i >= 0; i-- {
		var wg sync.WaitGroup
		for _, name := range lv[i] {
			ls := st.services[name]
			grace := 10 * time.Second
			if g := p.Services[name].StopGracePeriod; g != nil {
				grace = time.Duration(*g)
			}
			_ = ls.cmd.Process.Signal(syscall.SIGTERM)
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				select {
				case <-ls.done:
					st.t.Logf("%s: exited %v after SIGTERM (%v)", ls.name, time.Since(start).Round(time.Millisecond), ls.err)
					if ls.err != nil {
						st.t.Errorf("%s: exit after SIGTERM: %v", ls.name, ls.err)
					}
				case <-time.After(grace):
					st.t.Errorf("%s: still running %v after SIGTERM (its stop_grace_period)", ls.name, grace)
				}
			}()
		}
		wg.Wait()
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestComposeStackLocally runs the compose stack's sluice services as local
// processes and does what the README tells a user to do with it: create a
// topic and produce through one gateway, read it back through the other
// (partition fetches and a consumer group), see the Redis sink write it, open
// the dashboard, and stop the stack. It then checks that every metric the Grafana dashboard
// queries is exported by the brokers and gateways, and that the Kubernetes
// probes' paths answer on them.
func TestComposeStackLocally(t *testing.T) {
	st := startStack(t)
	p := loadCompose(t, map[string]string{"SLUICE_S3_SECRET_KEY": os.Getenv(envS3SecretKey)})
	gw1, gw2 := st.url("gateway-1"), st.url("gateway-2")

	// The topic the sink-redis service writes.
	if err := st.do("POST", gw1+"/v1/topics", "application/json",
		[]byte(`{"name":"orders","partitions":3,"replication_factor":3}`), nil); err != nil {
		t.Fatal(err)
	}

	const requests, perRequest = 5, 40
	want := map[string]bool{}
	for r := range requests {
		var body bytes.Buffer
		for i := range perRequest {
			v := fmt.Sprintf("order-%d-%d", r, i)
			want[v] = true
			fmt.Fprintf(&body, "{\"key\":\"user-%d\",\"value\":%q}\n", i%7, v)
		}
		var resp struct {
			Offsets []struct {
				Partition int32 `json:"partition"`
				Offset    int64 `json:"offset"`
			} `json:"offsets"`
		}
		if err := st.do("POST", gw1+"/v1/topics/orders/records?acks=all", "application/x-ndjson", body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Offsets) != perRequest {
			t.Fatalf("produce through gateway-1: %d offsets for %d records", len(resp.Offsets), perRequest)
		}
	}
	total := requests * perRequest

	t.Run("partition fetches through the other gateway", func(t *testing.T) {
		got := map[string]int{}
		for part := range 3 {
			next := int64(0)
			for deadline := time.Now().Add(30 * time.Second); ; {
				var fr struct {
					Records []struct {
						Offset int64  `json:"offset"`
						Value  string `json:"value"`
					} `json:"records"`
					NextOffset    int64 `json:"next_offset"`
					HighWatermark int64 `json:"high_watermark"`
				}
				u := fmt.Sprintf("%s/v1/topics/orders/partitions/%d/records?offset=%d&max_wait_ms=1000", gw2, part, next)
				if err := st.do("GET", u, "", nil, &fr); err != nil {
					t.Fatal(err)
				}
				for _, r := range fr.Records {
					got[r.Value]++
				}
				next = fr.NextOffset
				if next >= fr.HighWatermark && len(fr.Records) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("p%d: still reading at offset %d after 30 s", part, next)
				}
			}
		}
		checkSame(t, "fetched through gateway-2", got, want)
	})

	t.Run("a consumer group through the other gateway", func(t *testing.T) {
		var join struct {
			MemberID string `json:"member_id"`
			Cursor   string `json:"cursor"`
		}
		if err := st.do("POST", gw2+"/v1/groups/deploy-check/members", "application/json", []byte(`{"topics":["orders"]}`), &join); err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		cursor := join.Cursor
		for deadline := time.Now().Add(60 * time.Second); len(got) < total; {
			var poll struct {
				Records []struct {
					Value string `json:"value"`
				} `json:"records"`
				Cursor string `json:"cursor"`
			}
			u := fmt.Sprintf("%s/v1/groups/deploy-check/members/%s/records?max_wait_ms=1000&cursor=%s", gw2, url.PathEscape(join.MemberID), url.QueryEscape(cursor))
			if err := st.do("GET", u, "", nil, &poll); err != nil {
				t.Fatal(err)
			}
			for _, r := range poll.Records {
				got[r.Value]++
			}
			cursor = poll.Cursor
			if time.Now().After(deadline) {
				t.Fatalf("the group read %d of %d records in 60 s", len(got), total)
			}
		}
		commit, _ := json.Marshal(map[string]string{"member_id": join.MemberID, "cursor": cursor})
		if err := st.do("POST", gw2+"/v1/groups/deploy-check/offsets", "application/json", commit, nil); err != nil {
			t.Fatal(err)
		}
		checkSame(t, "polled by a group member through gateway-2", got, want)
	})

	t.Run("the Redis sink wrote every record", func(t *testing.T) {
		cli, err := exec.LookPath("redis-cli")
		if err != nil {
			t.Fatalf("redis-cli: %v (scripts/services.sh installs redis-tools)", err)
		}
		host, port, _ := net.SplitHostPort(os.Getenv(envRedis))
		var prefix string
		args := st.services["sink-redis"].args
		prefix = flagValue(args, "--prefix")
		key := prefix + "orders"
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := exec.Command(cli, "-h", host, "-p", port, "XLEN", key).Output()
			n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
			if err == nil && n == total {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("XLEN %s = %q (%v), want %d", key, strings.TrimSpace(string(out)), err, total)
			}
			time.Sleep(250 * time.Millisecond)
		}
		defer func() { _ = exec.Command(cli, "-h", host, "-p", port, "DEL", key, prefix+"offsets:to-redis").Run() }()
	})

	t.Run("every metric the dashboard queries is exported", func(t *testing.T) {
		queries, _ := dashboardQueries(t)
		var targets []string
		for _, name := range st.order {
			if c := p.Services[name].Command; len(c) > 0 && (c[0] == "broker" || c[0] == "gateway") {
				targets = append(targets, name)
			}
		}
		var missing []string
		// Group lag is measured every 10 s: poll until it shows.
		for deadline := time.Now().Add(60 * time.Second); ; {
			exported := map[string]bool{}
			for _, name := range targets {
				for _, m := range st.scrape(name) {
					exported[m] = true
				}
			}
			missing = missing[:0]
			for _, q := range queries {
				for _, m := range metricNames(q.expr) {
					if !exported[m] {
						missing = append(missing, fmt.Sprintf("%s (%s)", m, q.where))
					}
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		for _, m := range missing {
			t.Errorf("the dashboard queries %s, which no broker or gateway exports", m)
		}
	})

	t.Run("brokers refuse unsigned internal calls", func(t *testing.T) {
		// The compose file gives brokers and gateways one cluster secret:
		// everything above went through signed calls, and a caller without
		// it is refused.
		req, _ := http.NewRequest("GET", st.url("broker-1")+"/internal/v1/partitions/orders/0/fetch?offset=0", nil)
		resp, err := st.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("an unsigned fetch from broker-1: %s, want 401", resp.Status)
		}
	})

	t.Run("each gateway serves the dashboard", func(t *testing.T) {
		for _, gw := range []string{gw1, gw2} {
			resp, err := st.http.Get(gw + "/ui/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") {
				t.Errorf("GET %s/ui/: %s %s, %d bytes", gw, resp.Status, resp.Header.Get("Content-Type"), len(b))
			}
		}
	})

	t.Run("the Kubernetes probes answer", func(t *testing.T) {
		m := render(t)
		for workload, service := range map[string]string{"broker": "broker-1", "gateway": "gateway-1"} {
			paths := probePaths(m, workload)
			if len(paths) == 0 {
				t.Errorf("%s: no HTTP probes", workload)
			}
			for _, path := range paths {
				if err := st.do("GET", st.url(service)+path, "", nil, nil); err != nil {
					t.Errorf("%s probe %s on %s: %v", workload, path, service, err)
				}
			}
		}
	})

	st.stop(p)
}

// scrape returns the metric names a service's /metrics lists.
func (st *stack) scrape(name string) []string {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", st.url(name)+"/metrics", nil)
	resp, err := st.http.Do(req)
	if err != nil {
		st.t.Errorf("scrape %s: %v", name, err)
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if resp.StatusCode != http.StatusOK {
		st.t.Errorf("scrape %s: %s", name, resp.Status)
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		out = append(out, line[:end])
	}
	return out
}

func checkSame(t *testing.T, what string, got map[string]int, want map[string]bool) {
	t.Helper()
	for v := range want {
		if got[v] == 0 {
			t.Errorf("%s: %s is missing", what, v)
		}
	}
	for v, n := range got {
		if !want[v] {
			t.Errorf("%s: %s was never produced", what, v)
		} else if n > 1 {
			t.Errorf("%s: %s came %d times", what, v, n)
		}
	}
}
