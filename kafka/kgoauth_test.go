package kafka_test

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha512"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
)

const adminToken = "slc_0123456789abcdef_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// authCluster is a cluster that checks ACLs everywhere (its Kafka
// listeners are SASL_PLAINTEXT), with topics "granted" and "withheld",
// a token and a SCRAM-SHA-256 password ("alice-pw") for User:alice, who
// may write and read "granted" and read group "g-alice", nothing else, and
// a SCRAM-SHA-256 password "root-pw" for User:root, a super user.
func authCluster(t *testing.T) (cl *embedtest.Cluster, aliceTok string) {
	t.Helper()
	cl = embedtest.Start(t, embedtest.Options{Kafka: true, ClusterSecret: []byte("0123456789abcdef0123456789abcdef"),
		GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: adminToken},
		BrokerAuth:  broker.AuthOptions{Required: true, SuperUsers: []string{"User:root"}}})
	hc, err := client.New(cl.URL, client.WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"granted", "withheld"} {
		if _, err := hc.CreateTopic(ctx, api.CreateTopicRequest{Name: name, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []api.ACL{
		{Principal: "User:alice", ResourceType: "topic", ResourceName: "granted", Operation: "WRITE", Permission: "allow"},
		{Principal: "User:alice", ResourceType: "topic", ResourceName: "granted", Operation: "READ", Permission: "allow"},
		{Principal: "User:alice", ResourceType: "group", ResourceName: "g-alice", Operation: "READ", Permission: "allow"},
	} {
		if _, err := hc.CreateACL(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := hc.CreateToken(ctx, "User:alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"alice", "root"} {
		if _, err := hc.SetScramCredential(ctx, api.SetScramCredentialRequest{Principal: "User:" + p, Mechanism: "SCRAM-SHA-256", Password: p + "-pw"}); err != nil {
			t.Fatal(err)
		}
	}
	// The brokers see the new token, ACLs and credential when their
	// watches fire; wait for the last one through the Kafka door.
	waitAuthenticates(t, cl, kgo.SASL(scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism()))
	return cl, tok.Token
}

// waitAuthenticates polls until a client with opts gets a Metadata answer.
func waitAuthenticates(t *testing.T, cl *embedtest.Cluster, opts ...kgo.Opt) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := metadataWith(t, cl, opts...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused after 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metadataWith(t *testing.T, cl *embedtest.Cluster, opts ...kgo.Opt) error {
	t.Helper()
	kc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds(cl)...), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, kc)
	return err
}

// On a cluster that checks ACLs, franz-go authenticates with PLAIN (a
// token) and SCRAM-SHA-256 (a credential set over HTTP), and is refused
// with a wrong password or token; alice, allowed to write "granted" but
// not "withheld", gets TOPIC_AUTHORIZATION_FAILED for the second, reads
// back what she wrote in group g-alice, and gets GROUP_AUTHORIZATION_FAILED
// for another group.
func TestKgoSASLAndACLs(t *testing.T) {
	cl, tok := authCluster(t)
	for _, tc := range []struct {
		name string
		opt  kgo.Opt
	}{
		{"SCRAM-SHA-256, a wrong password", kgo.SASL(scram.Auth{User: "alice", Pass: "alice-pw!"}.AsSha256Mechanism())},
		{"SCRAM-SHA-512, no credential", kgo.SASL(scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha512Mechanism())},
		{"PLAIN, a revoked or unknown token", kgo.SASL(plain.Auth{User: "alice", Pass: adminToken[:len(adminToken)-1] + "0"}.AsMechanism())},
	} {
		if err := metadataWith(t, cl, tc.opt); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED", tc.name, err)
		}
	}

	for _, mech := range []kgo.Opt{
		kgo.SASL(plain.Auth{User: "alice", Pass: tok}.AsMechanism()),
		kgo.SASL(scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism()),
	} {
		kc := newKgo(t, cl, mech, kgo.RecordRetries(1), kgo.ProducerLinger(0))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := kc.ProduceSync(ctx, &kgo.Record{Topic: "granted", Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatalf("produce to a granted topic: %v", err)
		}
		err := kc.ProduceSync(ctx, &kgo.Record{Topic: "withheld", Value: []byte("v")}).FirstErr()
		if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("produce to a withheld topic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
		}
		cancel()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	consumer := newKgo(t, cl, kgo.SASL(plain.Auth{User: "alice", Pass: tok}.AsMechanism()),
		kgo.ConsumerGroup("g-alice"), kgo.ConsumeTopics("granted"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < 2 {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group g-alice read %d of 2 records: %v", got, fs.Errors())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("group g-alice: %v", e.Err)
		}
		got += fs.NumRecords()
	}

	kc := newKgo(t, cl, kgo.SASL(plain.Auth{User: "alice", Pass: tok}.AsMechanism()))
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "g-mallory", "consumer", 30000, 30000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name = "range"
	join.Protocols = append(join.Protocols, p)
	resp, err := join.RequestWith(ctx, kc)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("join of a group alice may not read: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
}

// kcat authenticates with PLAIN and SCRAM-SHA-256 and lists only the topics
// alice may describe; a wrong password fails.
func TestKcatSASL(t *testing.T) {
	cl, tok := authCluster(t)
	for _, args := range [][]string{
		{"-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=" + tok},
		{"-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=alice", "-X", "sasl.password=alice-pw"},
	} {
		out := kcat(t, cl, "", append([]string{"-X", "security.protocol=SASL_PLAINTEXT", "-L"}, args...)...)
		if !strings.Contains(string(out), `topic "granted"`) || strings.Contains(string(out), `topic "withheld"`) {
			t.Errorf("kcat -L with %s lists:\n%s", args[1], out)
		}
	}
	if out, _, err := runKcat(t, cl, "", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-256",
		"-X", "sasl.username=alice", "-X", "sasl.password=wrong", "-m", "10", "-L"); err == nil {
		t.Errorf("kcat with a wrong password listed:\n%s", out)
	}
}

// A super user sets a SCRAM credential through Kafka's
// AlterUserScramCredentials (the client salts the password), which then
// authenticates and is listed by DescribeUserScramCredentials; alice, who
// may not ALTER the cluster, gets CLUSTER_AUTHORIZATION_FAILED.
func TestKgoAlterUserScramCredentials(t *testing.T) {
	cl, tok := authCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alter := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	up.Name, up.Mechanism, up.Iterations, up.Salt = "carol", 2, 4096, []byte("carol's salt")
	up.SaltedPassword, _ = pbkdf2.Key(sha512.New, "carol-pw", up.Salt, 4096, sha512.Size)
	alter.Upsertions = append(alter.Upsertions, up)

	alice := newKgo(t, cl, kgo.SASL(plain.Auth{User: "alice", Pass: tok}.AsMechanism()))
	resp, err := alter.RequestWith(ctx, alice)
	if err != nil || len(resp.Results) != 1 || resp.Results[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("alice alters a credential: %+v %v, want CLUSTER_AUTHORIZATION_FAILED", resp, err)
	}
	root := newKgo(t, cl, kgo.SASL(scram.Auth{User: "root", Pass: "root-pw"}.AsSha256Mechanism()))
	resp, err = alter.RequestWith(ctx, root)
	if err != nil || len(resp.Results) != 1 || resp.Results[0].ErrorCode != 0 {
		t.Fatalf("root alters a credential: %+v %v", resp, err)
	}
	waitAuthenticates(t, cl, kgo.SASL(scram.Auth{User: "carol", Pass: "carol-pw"}.AsSha512Mechanism()))

	desc := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	u := kmsg.NewDescribeUserSCRAMCredentialsRequestUser()
	u.Name = "carol"
	desc.Users = append(desc.Users, u)
	dr, err := desc.RequestWith(ctx, root)
	if err != nil || len(dr.Results) != 1 || len(dr.Results[0].CredentialInfos) != 1 ||
		dr.Results[0].CredentialInfos[0].Mechanism != 2 || dr.Results[0].CredentialInfos[0].Iterations != 4096 {
		t.Fatalf("describe carol: %+v %v", dr, err)
	}
}
