package broker

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/kafka"
)

// The Kafka listener's security protocol: derived from the broker's TLS
// and auth options when not given, checked against them when given.
func TestKafkaSecurityProtocol(t *testing.T) {
	cert := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, tc := range []struct {
		name     string
		protocol string
		mechs    []string
		tls      bool
		required bool
		want     string // protocol, or the error's text
		wantErr  bool
	}{
		{name: "default", want: KafkaPlaintext},
		{name: "default with TLS", tls: true, want: KafkaSSL},
		{name: "default with auth", required: true, want: KafkaSASLPlaintext},
		{name: "default with TLS and auth", tls: true, required: true, want: KafkaSASLSSL},
		{name: "SASL without auth required", protocol: KafkaSASLPlaintext, want: KafkaSASLPlaintext},
		{name: "PLAIN only", protocol: KafkaSASLPlaintext, mechs: []string{"PLAIN"}, want: KafkaSASLPlaintext},
		{name: "SSL without a certificate", protocol: KafkaSSL, want: "needs the broker's TLS certificate", wantErr: true},
		{name: "PLAINTEXT with auth required", protocol: KafkaPlaintext, required: true, want: "must authenticate", wantErr: true},
		{name: "SSL with auth required", protocol: KafkaSSL, tls: true, required: true, want: "must authenticate", wantErr: true},
		{name: "mechanisms without SASL", mechs: []string{"PLAIN"}, want: "need a SASL", wantErr: true},
		{name: "an unknown mechanism", protocol: KafkaSASLSSL, tls: true, mechs: []string{"GSSAPI"}, want: "GSSAPI", wantErr: true},
		{name: "an unknown protocol", protocol: "TLS", want: "one of", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Broker{opts: Options{Auth: AuthOptions{Required: tc.required},
				Kafka: KafkaOptions{SecurityProtocol: tc.protocol, SASLMechanisms: tc.mechs}}}
			var cfg *tls.Config
			if tc.tls {
				cfg = cert
			}
			sec, err := b.kafkaSecurity(cfg)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error about %q", err, tc.want)
				}
				return
			}
			if err != nil || sec.protocol != tc.want {
				t.Fatalf("got %q %v, want %s", sec.protocol, err, tc.want)
			}
			if sec.sasl != strings.HasPrefix(tc.want, "SASL_") || (sec.tls != nil) != strings.HasSuffix(tc.want, "SSL") {
				t.Fatalf("%s: sasl %v, tls %v", tc.want, sec.sasl, sec.tls != nil)
			}
			if sec.sasl && len(tc.mechs) == 0 && !slices.Equal(sec.mechanisms, kafka.Mechanisms) {
				t.Fatalf("default mechanisms %v", sec.mechanisms)
			}
		})
	}
}
