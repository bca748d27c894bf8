package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/internal/tlsfiles"
)

// brokerTLSFlags are the TLS flags of `sluice broker`: its listener's
// certificate, the CA of the certificates its callers must show, and the
// cluster CA of its calls to other brokers.
type brokerTLSFlags struct {
	cert, key, clientCA *string
	cluster             clusterTLSFlags
}

func addBrokerTLSFlags(fs *flag.FlagSet) *brokerTLSFlags {
	return &brokerTLSFlags{
		cert:     fs.String("tls-cert", envOr("SLUICE_TLS_CERT", ""), "PEM certificate (chain) of the internal API: it is then served over TLS only and registered as https://; reloaded when it changes. It is also shown to other brokers that ask for a client certificate (env SLUICE_TLS_CERT)"),
		key:      fs.String("tls-key", envOr("SLUICE_TLS_KEY", ""), "PEM key of --tls-cert (env SLUICE_TLS_KEY)"),
		clientCA: fs.String("tls-client-ca", envOr("SLUICE_TLS_CLIENT_CA", ""), "PEM CAs: callers (other brokers, gateways, sluice drain) must show a client certificate one of them signed, or the handshake fails; without a cluster secret its common name names the calling node: broker:<id> or gateway (env SLUICE_TLS_CLIENT_CA)"),
		cluster:  clusterTLSFlags{ca: fs.String("cluster-ca", envOr("SLUICE_CLUSTER_CA", ""), "PEM CAs that sign the other brokers' certificates, for this broker's calls to them (env SLUICE_CLUSTER_CA)")},
	}
}

// options are the listener's and the peer calls' TLS options (nil, nil
// without any flag).
func (f *brokerTLSFlags) options() (*tlsfiles.Options, *tlsfiles.ClientOptions, error) {
	var server *tlsfiles.Options
	switch {
	case *f.cert != "" || *f.key != "":
		server = &tlsfiles.Options{CertFile: *f.cert, KeyFile: *f.key, ClientCAFile: *f.clientCA, RequireClientCert: *f.clientCA != ""}
	case *f.clientCA != "":
		return nil, nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	}
	var peers *tlsfiles.ClientOptions
	if *f.cluster.ca != "" {
		peers = &tlsfiles.ClientOptions{CAFile: *f.cluster.ca, CertFile: *f.cert, KeyFile: *f.key}
	}
	return server, peers, nil
}

// clusterTLSFlags are the flags of a node that calls brokers over TLS
// (`sluice gateway`, `sluice drain`): the cluster CA, and the client
// certificate brokers with --tls-client-ca ask for.
type clusterTLSFlags struct{ ca, cert, key *string }

func addClusterTLSFlags(fs *flag.FlagSet) clusterTLSFlags {
	return clusterTLSFlags{
		ca:   fs.String("cluster-ca", envOr("SLUICE_CLUSTER_CA", ""), "PEM CAs that sign the brokers' certificates (brokers started with --tls-cert); default: the system's roots (env SLUICE_CLUSTER_CA)"),
		cert: fs.String("cluster-cert", envOr("SLUICE_CLUSTER_CERT", ""), "PEM client certificate shown to brokers started with --tls-client-ca; reloaded when it changes (env SLUICE_CLUSTER_CERT)"),
		key:  fs.String("cluster-key", envOr("SLUICE_CLUSTER_KEY", ""), "PEM key of --cluster-cert (env SLUICE_CLUSTER_KEY)"),
	}
}

// options is nil without --cluster-ca.
func (f clusterTLSFlags) options() (*tlsfiles.ClientOptions, error) {
	if *f.ca == "" {
		if *f.cert != "" || *f.key != "" {
			return nil, errors.New("--cluster-cert and --cluster-key need --cluster-ca")
		}
		return nil, nil
	}
	return &tlsfiles.ClientOptions{CAFile: *f.ca, CertFile: *f.cert, KeyFile: *f.key}, nil
}

// useOn makes c call brokers over TLS with the flags' options, if any.
func (f clusterTLSFlags) useOn(c *brokerapi.Client) error {
	o, err := f.options()
	if err != nil || o == nil {
		return err
	}
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	c.UseTLS(cfg)
	return nil
}

// kafkaSecurityFlags are the Kafka listener's security flags of `sluice
// broker`; its TLS certificate is --tls-cert's.
type kafkaSecurityFlags struct{ protocol, sasl *string }

func addKafkaSecurityFlags(fs *flag.FlagSet) kafkaSecurityFlags {
	return kafkaSecurityFlags{
		protocol: fs.String("kafka-security-protocol", envOr("SLUICE_KAFKA_SECURITY_PROTOCOL", ""), "the Kafka listener's: PLAINTEXT, SSL (with --tls-cert's certificate), SASL_PLAINTEXT or SASL_SSL (env SLUICE_KAFKA_SECURITY_PROTOCOL; default: SSL with --tls-cert, else PLAINTEXT, and the SASL one with --auth required, which refuses the others)"),
		sasl:     fs.String("kafka-sasl-mechanisms", envOr("SLUICE_KAFKA_SASL_MECHANISMS", ""), "comma-separated SASL mechanisms of a SASL Kafka listener, of PLAIN (the password is a Sluice token), SCRAM-SHA-256 and SCRAM-SHA-512 (env SLUICE_KAFKA_SASL_MECHANISMS; default: all three)"),
	}
}

// mechanisms is --kafka-sasl-mechanisms as a list (nil: the default).
func (f kafkaSecurityFlags) mechanisms() []string {
	var out []string
	for _, m := range strings.Split(*f.sasl, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, strings.ToUpper(m))
		}
	}
	return out
}
