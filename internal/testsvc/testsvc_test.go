package testsvc

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// fakeTB records Fatalf and Skipf and ends the goroutine, as testing.T does.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// call runs fn with a fakeTB in a goroutine of its own, so that Fatalf can
// end it; skip is what a Skipf said.
func call(t *testing.T, fn func(testing.TB) any) (got any, fatal string) {
	got, fatal, skip := callLane(t, fn)
	if skip != "" {
		t.Fatalf("unexpected Skipf: %s", skip)
	}
	return got, fatal
}

func callLane(t *testing.T, fn func(testing.TB) any) (got any, fatal, skip string) {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = fn(f)
	}()
	<-done
	return got, f.fatal, f.skip
}

// inLane runs the test as if in the full lane (short false) or the fast one.
func inLane(t *testing.T, short bool) {
	old := shortLane
	shortLane = func() bool { return short }
	t.Cleanup(func() { shortLane = old })
}

var allVars = []string{
	EnvZooKeeper, EnvZKJava, EnvZKClasspath, EnvRedis,
	EnvS3Endpoint, EnvS3AccessKey, EnvS3SecretKey, EnvS3Bucket, EnvS3Region, EnvChromium, EnvKcat,
	EnvNode, EnvKafkajs,
}

func TestGetters(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		get  func(testing.TB) any
		want any
	}{
		{"zookeeper", map[string]string{EnvZooKeeper: "127.0.0.1:21811"},
			func(t testing.TB) any { return ZooKeeper(t) }, "127.0.0.1:21811"},
		{"redis", map[string]string{EnvRedis: "127.0.0.1:26379"},
			func(t testing.TB) any { return Redis(t) }, "127.0.0.1:26379"},
		{"chromium", map[string]string{EnvChromium: "/usr/bin/chromium"},
			func(t testing.TB) any { return Chromium(t) }, "/usr/bin/chromium"},
		{"kcat", map[string]string{EnvKcat: "/usr/bin/kcat"},
			func(t testing.TB) any { return Kcat(t) }, "/usr/bin/kcat"},
		{"kafkajs", map[string]string{EnvNode: "/usr/bin/node", EnvKafkajs: "/c/node_modules"},
			func(t testing.TB) any { n, p := Kafkajs(t); return [2]string{n, p} },
			[2]string{"/usr/bin/node", "/c/node_modules"}},
		{"s3", map[string]string{
			EnvS3Endpoint: "127.0.0.1:27070", EnvS3AccessKey: "ak", EnvS3SecretKey: "sk",
			EnvS3Bucket: "b", EnvS3Region: "eu-west-3"},
			func(t testing.TB) any { return S3(t) },
			S3Config{Endpoint: "127.0.0.1:27070", AccessKey: "ak", SecretKey: "sk", Bucket: "b", Region: "eu-west-3"}},
		{"s3 default region", map[string]string{
			EnvS3Endpoint: "127.0.0.1:27070", EnvS3AccessKey: "ak", EnvS3SecretKey: "sk", EnvS3Bucket: "b"},
			func(t testing.TB) any { return S3(t) },
			S3Config{Endpoint: "127.0.0.1:27070", AccessKey: "ak", SecretKey: "sk", Bucket: "b", Region: DefaultS3Region}},
		{"zookeeper runtime", map[string]string{EnvZKJava: "/usr/bin/java", EnvZKClasspath: "/a.jar:/b.jar"},
			func(t testing.TB) any { return ZooKeeperRuntime(t) },
			ZKRuntime{Java: "/usr/bin/java", Classpath: "/a.jar:/b.jar"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range allVars {
				t.Setenv(v, "")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, fatal := call(t, tc.get)
			if fatal != "" {
				t.Fatalf("unexpected Fatalf: %s", fatal)
			}
			if got != tc.want {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestMissingIsFatalNotSkip(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		get     func(testing.TB) any
		missing string
	}{
		{"zookeeper", nil, func(t testing.TB) any { return ZooKeeper(t) }, EnvZooKeeper},
		{"redis", nil, func(t testing.TB) any { return Redis(t) }, EnvRedis},
		{"chromium", nil, func(t testing.TB) any { return Chromium(t) }, EnvChromium},
		{"kcat", nil, func(t testing.TB) any { return Kcat(t) }, EnvKcat},
		{"kafkajs", map[string]string{EnvNode: "/usr/bin/node"},
			func(t testing.TB) any { n, p := Kafkajs(t); return [2]string{n, p} }, EnvKafkajs},
		{"s3 endpoint", nil, func(t testing.TB) any { return S3(t) }, EnvS3Endpoint},
		{"s3 bucket", map[string]string{EnvS3Endpoint: "e", EnvS3AccessKey: "a", EnvS3SecretKey: "s"},
			func(t testing.TB) any { return S3(t) }, EnvS3Bucket},
		{"zookeeper runtime", map[string]string{EnvZKJava: "/usr/bin/java"},
			func(t testing.TB) any { return ZooKeeperRuntime(t) }, EnvZKClasspath},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range allVars {
				t.Setenv(v, "")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			inLane(t, false)
			_, fatal, skip := callLane(t, tc.get)
			want := tc.missing + " is not set: run the tests through `make test`, which starts the real services"
			if fatal != want || skip != "" {
				t.Errorf("Fatalf message = %q, Skipf %q; want Fatalf %q", fatal, skip, want)
			}
			// The fast lane (go test -short) skips instead, naming the service.
			inLane(t, true)
			_, fatal, skip = callLane(t, tc.get)
			if fatal != "" || !strings.HasPrefix(skip, "-short: "+tc.missing+" is not set") {
				t.Errorf("under -short: Fatalf %q, Skipf %q; want a Skipf naming %s", fatal, skip, tc.missing)
			}
		})
	}
}

// The services that make test started answer. This is the check that the
// env file and the helpers agree with what scripts/services.sh runs.
func TestSharedZooKeeperAnswers(t *testing.T) {
	addr := ZooKeeper(t)
	if mode := ZKMode(addr); mode != "standalone" {
		t.Fatalf("ZooKeeper %s: mode %q, want standalone", addr, mode)
	}
}

func TestStartStopZooKeeper(t *testing.T) {
	z := StartZooKeeper(t)
	if !strings.HasPrefix(z.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q, want a loopback address", z.Addr)
	}
	if mode := ZKMode(z.Addr); mode != "standalone" {
		t.Fatalf("mode %q after start, want standalone", mode)
	}
	z.Stop()
	if mode := ZKMode(z.Addr); mode != "" {
		t.Fatalf("still answers (%q) after Stop", mode)
	}
	z.Start()
	if mode := ZKMode(z.Addr); mode != "standalone" {
		t.Fatalf("mode %q after restart, want standalone", mode)
	}
}
