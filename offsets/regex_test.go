package offsets

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
)

// regexHarness is a harness whose cluster also lists its topic names, at a
// version that moves when a test adds or removes one.
type regexHarness struct {
	*harness
	topics TopicSet
}

func newRegexHarness(t *testing.T, topics map[string]int32) *regexHarness {
	h := &regexHarness{harness: newHarness(t, topics)}
	h.sync()
	return h
}

// sync lists the harness's topics at a new version.
func (h *regexHarness) sync() {
	names := make([]string, 0, len(h.meta))
	for n := range h.meta {
		names = append(names, n)
	}
	slices.Sort(names)
	h.topics = TopicSet{Version: h.topics.Version + 1, Names: names}
}

// beat sends a heartbeat that lists what the member owns (owned) and
// returns its assignment; names and regex nil leave the subscription as
// it is.
func (h *regexHarness) beat(group, id string, epoch int32, names []string, regex *string, owned []api.TopicPartition) (int32, []api.TopicPartition, error) {
	h.t.Helper()
	hb := ConsumerHeartbeat{MemberID: id, Epoch: epoch, Topics: names, TopicRegex: regex, Owned: owned,
		RebalanceTimeoutMs: 60000, ServerAssignor: api.AssignorUniform}
	if err := h.apply(h.s.HeartbeatConsumer(group, hb, h.metadata, h.topics, h.now)); err != nil {
		return 0, nil, err
	}
	if epoch < 0 {
		return epoch, nil, nil
	}
	return h.s.ConsumerAssignment(group, id)
}

func topicsOf(tps []api.TopicPartition) []string {
	var out []string
	for _, tp := range tps {
		if !slices.Contains(out, tp.Topic) {
			out = append(out, tp.Topic)
		}
	}
	return out
}

// A member subscribed by regular expression gets the partitions of the
// topics whose whole name matches, a matching topic created later without
// changing its subscription (and loses one deleted), never an internal topic its expression does
// not name, and the union with the names it sends.
func TestConsumerProtocolRegex(t *testing.T) {
	h := newRegexHarness(t, map[string]int32{"orders": 2, "orders-eu": 1, "xorders": 1, "payments": 1, "__consumer_offsets": 2, "__push_deliveries": 1})
	re := "orders.*"
	e, a, err := h.beat("g", "a", 0, []string{}, &re, []api.TopicPartition{})
	if err != nil {
		t.Fatal(err)
	}
	if got := topicsOf(a); !slices.Equal(got, []string{"orders", "orders-eu"}) {
		t.Fatalf("orders.* assigned %v (the whole name must match: not xorders)", got)
	}

	// A topic created later is assigned at the next heartbeat.
	h.meta["orders-us"] = 1
	h.sync()
	if e, a, err = h.beat("g", "a", e, nil, nil, a); err != nil {
		t.Fatal(err)
	}
	if got := topicsOf(a); !slices.Equal(got, []string{"orders", "orders-eu", "orders-us"}) {
		t.Fatalf("after orders-us was created: %v", got)
	}

	// A deleted topic is dropped.
	delete(h.meta, "orders-eu")
	h.sync()
	if e, a, err = h.beat("g", "a", e, nil, nil, a); err != nil {
		t.Fatal(err)
	}
	if got := topicsOf(a); !slices.Equal(got, []string{"orders", "orders-us"}) {
		t.Fatalf("after orders-eu was deleted: %v", got)
	}

	// The topic set at the same version is not listed again: a name
	// the cluster view has not reported is not seen.
	h.meta["orders-ap"] = 1
	h.topics.Names = append(slices.Clone(h.topics.Names), "orders-ap")
	if e, a, err = h.beat("g", "a", e, nil, nil, a); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(topicsOf(a), "orders-ap") {
		t.Fatalf("resolved again at an unchanged topic-set version: %v", a)
	}

	// Names and an expression: both. ".*" takes every topic but the
	// internal ones.
	all := ".*"
	if e, a, err = h.beat("g", "a", e, []string{"payments"}, &all, a); err != nil {
		t.Fatal(err)
	}
	if _, a, err = h.beat("g", "a", e, nil, nil, a); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topicsOf(a) {
		if strings.HasPrefix(topic, "__") {
			t.Fatalf(".* assigned internal topic %s: %v", topic, a)
		}
	}
	if got := topicsOf(a); !slices.Contains(got, "payments") || !slices.Contains(got, "xorders") {
		t.Fatalf(".* with payments: %v", got)
	}

	// An expression that names an internal topic gets it.
	named := "payments|__consumer_offsets"
	b := "b"
	eb, ab, err := h.beat("g2", b, 0, []string{}, &named, []api.TopicPartition{})
	if err != nil {
		t.Fatal(err)
	}
	if got := topicsOf(ab); !slices.Equal(got, []string{"__consumer_offsets", "payments"}) {
		t.Fatalf("%s assigned %v", named, got)
	}
	// Described over HTTP with what it resolved to.
	d, _ := h.s.Describe("g2")
	if got := d.Members[0].Topics; !slices.Equal(got, []string{"__consumer_offsets", "payments"}) {
		t.Fatalf("HTTP describe: topics %v", got)
	}

	// Clearing the expression keeps the names only.
	none := ""
	if eb, ab, err = h.beat("g2", b, eb, []string{"orders-us"}, &none, ab); err != nil {
		t.Fatal(err)
	}
	if _, ab, err = h.beat("g2", b, eb, nil, nil, ab); err != nil {
		t.Fatal(err)
	}
	if got := topicsOf(ab); !slices.Equal(got, []string{"orders-us"}) {
		t.Fatalf("after clearing the expression: %v", got)
	}
	if g := h.s.Group("g2"); len(g.Regexes) != 0 || len(g.regexes) != 0 {
		t.Fatalf("expression no member uses is kept: %v, %d compiled", g.Regexes, len(g.regexes))
	}

	// A replay of the log rebuilds the same resolutions.
	replay := NewState()
	for _, r := range h.log {
		if err := replay.Apply(r, h.now); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := replay.Group("g").Regexes, h.s.Group("g").Regexes; len(got) != 1 || !slices.Equal(got[all], want[all]) {
		t.Fatalf("replayed resolutions %v, want %v", got, want)
	}
}

// An expression that does not compile, or is too long, is refused with
// INVALID_REGULAR_EXPRESSION, at a join and after; the member is not
// changed.
func TestConsumerProtocolRegexRefused(t *testing.T) {
	h := newRegexHarness(t, map[string]int32{"orders": 1})
	for name, expr := range map[string]string{
		"unclosed":   "orders(",
		"unbalanced": "a)|(b",
		"repeat":     "o{1001}",
		"too long":   strings.Repeat("a", MaxRegexBytes+1),
	} {
		if _, _, err := h.beat("g", "a", 0, []string{}, &expr, []api.TopicPartition{}); api.Classify(err).Code != api.CodeInvalidRegex {
			t.Errorf("%s: %v, want %s", name, err, api.CodeInvalidRegex)
		}
	}
	if h.s.Group("g") != nil {
		t.Fatal("a refused join created the group")
	}
	ok := "orders"
	e, a, err := h.beat("g", "a", 0, []string{}, &ok, []api.TopicPartition{})
	if err != nil || len(a) != 1 {
		t.Fatalf("join: %v %v", a, err)
	}
	bad := "["
	if _, _, err := h.beat("g", "a", e, nil, &bad, a); api.Classify(err).Code != api.CodeInvalidRegex {
		t.Fatalf("heartbeat with a bad expression: %v", err)
	}
	if got := h.s.Group("g").Members["a"].Consumer.TopicRegex; got != ok {
		t.Fatalf("the member's expression became %q", got)
	}
}

// An expression resolving to more than MaxRegexTopics topics keeps the
// first MaxRegexTopics in order.
func TestConsumerProtocolRegexBounded(t *testing.T) {
	topics := map[string]int32{}
	for i := range MaxRegexTopics + 5 {
		topics[fmt.Sprintf("t%05d", i)] = 1
	}
	h := newRegexHarness(t, topics)
	re := "t.*"
	if _, _, err := h.beat("g", "a", 0, []string{}, &re, []api.TopicPartition{}); err != nil {
		t.Fatal(err)
	}
	got := h.s.Group("g").Regexes[re]
	if len(got) != MaxRegexTopics || got[0] != "t00000" || !slices.IsSorted(got) {
		t.Fatalf("resolved %d topics, first %q", len(got), got[0])
	}
}

// An HTTP member and a Kafka member subscribed by regular expression share
// a group: the HTTP member's join and heartbeats compute the targets with
// what the expression resolved to, so the Kafka member keeps the topics
// only it subscribes to, every partition is owned, and none by two.
func TestConsumerProtocolRegexWithHTTPMember(t *testing.T) {
	h := newRegexHarness(t, map[string]int32{"orders": 4, "payments": 2})
	re := "orders|pay.*"
	e, a, err := h.beat("g", "k", 0, []string{}, &re, []api.TopicPartition{})
	if err != nil || len(a) != 6 {
		t.Fatalf("the Kafka member alone: %v %v", a, err)
	}
	web := h.join("g", api.JoinGroupRequest{Topics: []string{"orders"}})
	for range 5 {
		if e, a, err = h.beat("g", "k", e, nil, nil, a); err != nil {
			t.Fatal(err)
		}
		if err := h.heartbeat("g", web); err != nil {
			t.Fatal(err)
		}
	}
	webOwns := h.owned("g", web)
	if len(webOwns) == 0 || slices.ContainsFunc(webOwns, func(tp api.TopicPartition) bool { return tp.Topic != "orders" }) {
		t.Fatalf("the HTTP member owns %v", webOwns)
	}
	if got := topicsOf(a); !slices.Equal(got, []string{"orders", "payments"}) || len(a)+len(webOwns) != 6 {
		t.Fatalf("the Kafka member owns %v, the HTTP member %v", a, webOwns)
	}
}
