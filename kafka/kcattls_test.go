package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testcerts"
	"github.com/sluice-io/sluice/internal/testsvc"
)

// kcat lists the metadata of a TLS listener (SSL) and of a SASL_SSL one
// with the test CA as its ca.location; without the CA it fails the
// handshake.
func TestKcatTLS(t *testing.T) {
	bin := testsvc.Kcat(t)
	ca := testcerts.NewCA(t, "kafka test CA")
	certFile, keyFile := ca.Issue(t, "broker", testcerts.Server)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(opts Options) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		md := testMetadata()
		md.Brokers = map[int32]api.BrokerRegistration{1: {ID: 1, Address: "127.0.0.1:1", KafkaAddress: addr}}
		md.Controller = api.ControllerRegistration{BrokerID: 1, Epoch: 1}
		for _, tm := range md.Topics {
			for i := range tm.States {
				tm.States[i].Leader = 1
			}
		}
		opts.Backend = &fakeBackend{md: md}
		opts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		opts.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- s.Serve(ln) }()
		t.Cleanup(func() {
			s.Close()
			if err := <-served; !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v", err)
			}
		})
		return addr
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if errOut.Len() > 0 {
			t.Logf("kcat %s: stderr:\n%s", strings.Join(args, " "), errOut.String())
		}
		return out.String(), err
	}
	ssl := serve(Options{})
	out, err := run("-b", ssl, "-X", "security.protocol=SSL", "-X", "ssl.ca.location="+ca.File, "-L")
	if err != nil || !strings.Contains(out, `topic "orders"`) {
		t.Fatalf("kcat -L over SSL: %v\n%s", err, out)
	}
	if out, err := run("-b", ssl, "-X", "security.protocol=SSL", "-m", "5", "-L"); err == nil {
		t.Errorf("kcat without the CA listed:\n%s", out)
	}
	saslSSL := serve(Options{RequireAuth: true, Mechanisms: Mechanisms, Authenticator: newFakeAuth(t)})
	out, err = run("-b", saslSSL, "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location="+ca.File,
		"-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=bob", "-X", "sasl.password=bob-secret", "-L")
	if err != nil || !strings.Contains(out, `topic "orders"`) {
		t.Fatalf("kcat -L over SASL_SSL: %v\n%s", err, out)
	}
}
