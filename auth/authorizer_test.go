package auth

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func acl(principal string, rt ResourceType, pt PatternType, name string, op Operation, perm Permission) ACL {
	return ACL{Principal: principal, ResourceType: rt, PatternType: pt, ResourceName: name, Operation: op, Permission: perm}
}

func TestAuthorizerRules(t *testing.T) {
	set := NewACLSet([]ACL{
		acl("User:alice", ResourceTopic, PatternLiteral, "orders", OpWrite, Allow),
		acl("User:alice", ResourceTopic, PatternPrefixed, "logs.", OpRead, Allow),
		acl("User:alice", ResourceTopic, PatternLiteral, "logs.secret", OpRead, Deny),
		acl("User:*", ResourceTopic, PatternLiteral, "public", OpRead, Allow),
		acl("User:bob", ResourceTopic, PatternLiteral, "*", OpAll, Allow),
		acl("User:bob", ResourceTopic, PatternLiteral, "orders", OpDelete, Deny),
		acl("User:carol", ResourceGroup, PatternPrefixed, "etl-", OpRead, Allow),
		acl("User:carol", ResourceTopic, PatternLiteral, "public", OpAll, Deny),
		acl("User:dave", ResourceTopic, PatternLiteral, "cfg", OpAlterConfigs, Allow),
	})
	z := Authorizer{SuperUsers: []string{"User:admin"}, ACLs: set}
	cases := []struct {
		name      string
		principal string
		op        Operation
		rt        ResourceType
		res       string
		want      bool
	}{
		{"literal allow", "User:alice", OpWrite, ResourceTopic, "orders", true},
		{"write implies describe", "User:alice", OpDescribe, ResourceTopic, "orders", true},
		{"write does not imply read", "User:alice", OpRead, ResourceTopic, "orders", false},
		{"literal is not a prefix", "User:alice", OpWrite, ResourceTopic, "orders2", false},
		{"prefixed allow", "User:alice", OpRead, ResourceTopic, "logs.app", true},
		{"deny beats a prefixed allow", "User:alice", OpRead, ResourceTopic, "logs.secret", false},
		{"a deny of READ leaves DESCRIBE to the allow", "User:alice", OpDescribe, ResourceTopic, "logs.secret", true},
		{"any principal", "User:zed", OpRead, ResourceTopic, "public", true},
		{"wildcard resource with ALL", "User:bob", OpCreate, ResourceTopic, "anything", true},
		{"deny of one op beats ALL", "User:bob", OpDelete, ResourceTopic, "orders", false},
		{"ALL on topics says nothing of groups", "User:bob", OpRead, ResourceGroup, "g", false},
		{"prefixed group", "User:carol", OpRead, ResourceGroup, "etl-nightly", true},
		{"deny ALL beats allow to everyone", "User:carol", OpRead, ResourceTopic, "public", false},
		{"alter configs implies describe configs", "User:dave", OpDescribeConfigs, ResourceTopic, "cfg", true},
		{"alter configs does not imply describe", "User:dave", OpDescribe, ResourceTopic, "cfg", false},
		{"no match means deny", "User:erin", OpRead, ResourceTopic, "orders", false},
		{"super user", "User:admin", OpDelete, ResourceCluster, ClusterName, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := z.Allowed(c.principal, c.op, c.rt, c.res); got != c.want {
				t.Fatalf("Allowed(%s, %s, %s, %q) = %v, want %v", c.principal, c.op, c.rt, c.res, got, c.want)
			}
		})
	}
	if (Authorizer{}).Allowed("User:alice", OpRead, ResourceTopic, "x") {
		t.Fatal("an empty authorizer allowed a request")
	}
}

// bruteAllowed is the rule written as plainly as possible: the evaluator,
// with its indexes, must agree with it on every input.
func bruteAllowed(acls []ACL, principal string, op Operation, rt ResourceType, name string) bool {
	allowed := false
	for _, a := range acls {
		if (a.Principal != principal && a.Principal != AnyPrincipal) || a.ResourceType != rt {
			continue
		}
		match := a.ResourceName == name || (a.PatternType == PatternLiteral && a.ResourceName == "*") ||
			(a.PatternType == PatternPrefixed && len(name) >= len(a.ResourceName) && name[:len(a.ResourceName)] == a.ResourceName)
		if !match {
			continue
		}
		if a.Permission == Deny && (a.Operation == op || a.Operation == OpAll) {
			return false
		}
		grants := a.Operation == op || a.Operation == OpAll ||
			(op == OpDescribe && slices.Contains([]Operation{OpRead, OpWrite, OpDelete, OpAlter}, a.Operation)) ||
			(op == OpDescribeConfigs && a.Operation == OpAlterConfigs)
		if a.Permission == Allow && grants {
			allowed = true
		}
	}
	return allowed
}

func TestAuthorizerAgreesWithBruteForce(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	principals := []string{"User:a", "User:b", AnyPrincipal}
	types := []ResourceType{ResourceTopic, ResourceGroup}
	names := []string{"t", "t1", "t12", "u", "*"}
	prefixes := []string{"t", "t1", "u"}
	pick := func(n int) int { return rng.IntN(n) }
	for round := 0; round < 2000; round++ {
		var acls []ACL
		for range pick(12) {
			a := ACL{Principal: principals[pick(3)], ResourceType: types[pick(2)], Operation: operations[pick(len(operations))], Permission: Allow}
			if pick(3) == 0 {
				a.Permission = Deny
			}
			if pick(2) == 0 {
				a.PatternType, a.ResourceName = PatternPrefixed, prefixes[pick(len(prefixes))]
			} else {
				a.PatternType, a.ResourceName = PatternLiteral, names[pick(len(names))]
			}
			acls = append(acls, a)
		}
		set := NewACLSet(acls)
		for _, p := range principals[:2] {
			for _, rt := range types {
				for _, name := range names[:4] {
					for _, op := range operations[:8] {
						if got, want := set.Allowed(p, op, rt, name), bruteAllowed(acls, p, op, rt, name); got != want {
							t.Fatalf("round %d: Allowed(%s, %s, %s, %q) = %v, brute force says %v; ACLs %+v", round, p, op, rt, name, got, want, acls)
						}
					}
				}
			}
		}
	}
}

func TestACLValidate(t *testing.T) {
	ok := acl("User:alice", ResourceTopic, "", "orders", OpRead, Allow)
	if err := ok.Validate(); err != nil || ok.PatternType != PatternLiteral {
		t.Fatalf("valid ACL: %v, pattern %q", err, ok.PatternType)
	}
	bad := []ACL{
		acl("alice", ResourceTopic, PatternLiteral, "x", OpRead, Allow),
		acl("User:alice", "queue", PatternLiteral, "x", OpRead, Allow),
		acl("User:alice", ResourceTopic, "regex", "x", OpRead, Allow),
		acl("User:alice", ResourceTopic, PatternPrefixed, "*", OpRead, Allow),
		acl("User:alice", ResourceTopic, PatternLiteral, "", OpRead, Allow),
		acl("User:alice", ResourceTopic, PatternLiteral, "x", "FLY", Allow),
		acl("User:alice", ResourceTopic, PatternLiteral, "x", OpRead, "maybe"),
		acl("User:alice", ResourceCluster, PatternLiteral, "prod", OpAlter, Allow),
	}
	for _, a := range bad {
		if err := a.Validate(); err == nil {
			t.Errorf("%+v: no error", a)
		}
	}
}

func TestTokens(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	tok, rec, err := NewToken("User:alice", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	id, secret, err := ParseToken(tok)
	if err != nil || id != rec.ID {
		t.Fatalf("ParseToken(%q) = %q, %v; record id %q", tok, id, err, rec.ID)
	}
	if !rec.Matches(secret) {
		t.Fatal("the token does not match its own record")
	}
	if rec.Matches(secret[:63]+"0") && secret[63] != '0' {
		t.Fatal("a different secret matched")
	}
	if rec.Expired(now.Add(59*time.Minute)) || !rec.Expired(now.Add(time.Hour)) {
		t.Fatalf("expiry at %d misjudged", rec.ExpiresAt)
	}
	for _, s := range []string{"", "slc_", "slc_abc_def", "Bearer " + tok, tok + "0", "slc_" + rec.ID, "xyz_" + tok[4:],
		"slc_" + rec.ID + "_" + secret[:62] + "ZZ"} {
		if _, _, err := ParseToken(s); err == nil {
			t.Errorf("ParseToken(%q) accepted it", s)
		}
	}
	if _, err := RecordFor(tok, "alice", now); err == nil {
		t.Fatal("a principal without User: was accepted")
	}
}
