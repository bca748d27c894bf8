package offsets

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/sluice-io/sluice/api"
)

// Subscriptions by regular expression (KIP-848's SubscribedTopicRegex).
// The coordinator resolves a member's expression against the cluster's
// topic names, as Kafka's does: the expression must match the whole name.
// A group keeps each expression its members use resolved (persisted in its
// record, so a replay and every retarget see the same subscriptions), and
// compiled with the topic-set version it was last resolved at (memory
// only). A heartbeat resolves again only when the expression is new or the
// topic set's version moved: never a scan of every topic per heartbeat.
// A member's subscription is the union of the names it sends and what its
// expression resolves to.

// Bounds on subscriptions by regular expression.
const (
	// MaxRegexBytes bounds an expression's length.
	MaxRegexBytes = 1024
	// MaxRegexTopics bounds the topics one expression resolves to: past
	// it, the names after the first MaxRegexTopics (in order) are left out.
	MaxRegexTopics = 1000
)

// TopicSet is the cluster's topic names, as subscriptions by regular
// expression are resolved against them. The coordinator's owner passes its
// cluster view.
type TopicSet struct {
	// Version changes whenever a name is added or removed; an expression
	// resolved at one version is not resolved again until it changes.
	Version uint64
	// Names are sorted, and shared: not to be modified.
	Names []string
}

// compiledRegex is one expression a group's members use: compiled once,
// and the topics it resolved to at a topic-set version.
type compiledRegex struct {
	re       *regexp.Regexp
	version  uint64
	resolved bool
	topics   []string
}

// validateRegex checks an expression before a member may subscribe with it.
func validateRegex(expr string) error {
	if len(expr) > MaxRegexBytes {
		return api.Errorf(api.CodeInvalidRegex, "the regular expression is %d bytes long, more than %d", len(expr), MaxRegexBytes)
	}
	if _, err := syntax.Parse(expr, syntax.Perl); err != nil {
		return api.Errorf(api.CodeInvalidRegex, "regular expression %q: %v", expr, err)
	}
	return nil
}

// compileRegex compiles a valid expression to match whole names. It is
// parsed alone first, so the wrapping cannot change what it means (an
// expression such as "a)|(b" is refused, not wrapped into another).
func compileRegex(expr string) (*regexp.Regexp, error) {
	if err := validateRegex(expr); err != nil {
		return nil, err
	}
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidRegex, "regular expression %q: %v", expr, err)
	}
	return re, nil
}

// regex returns the group's compiled expression, compiling it on first use.
func (g *Group) regex(expr string) (*compiledRegex, error) {
	if c := g.regexes[expr]; c != nil {
		return c, nil
	}
	re, err := compileRegex(expr)
	if err != nil {
		return nil, err
	}
	if g.regexes == nil {
		g.regexes = map[string]*compiledRegex{}
	}
	c := &compiledRegex{re: re}
	g.regexes[expr] = c
	return c, nil
}

// internalTopic reports whether a topic is internal to the cluster
// (__consumer_offsets, __push_deliveries: the "__" prefix, which topic
// creation keeps for them).
func internalTopic(name string) bool { return strings.HasPrefix(name, "__") }

// resolve matches the expression against the names. An internal topic
// matches only an expression that spells its name out (as is, or quoted
// by regexp.QuoteMeta), so ".*" never subscribes a member to the
// coordinator's own records.
func (c *compiledRegex) resolve(expr string, names []string) []string {
	out := []string{}
	for _, name := range names {
		if !c.re.MatchString(name) {
			continue
		}
		if internalTopic(name) && !strings.Contains(expr, name) && !strings.Contains(expr, regexp.QuoteMeta(name)) {
			continue
		}
		out = append(out, name)
		if len(out) == MaxRegexTopics {
			break
		}
	}
	return out
}

// resolveRegexes brings next.Regexes to the expressions next's members use,
// each resolved against topics, and reports whether a resolution changed
// (then the targets must be computed again). The compiled expressions of
// live (the group as applied; nil for a group not created yet) are the
// cache: an expression is compiled once per group, and resolved again only
// when it is new or the topic set's version moved.
func resolveRegexes(live, next *Group, topics TopicSet) bool {
	used := map[string]bool{}
	for _, m := range next.Members {
		if m.Consumer != nil && m.Consumer.TopicRegex != "" {
			used[m.Consumer.TopicRegex] = true
		}
	}
	cache := live
	if cache == nil {
		cache = next
	}
	for expr := range cache.regexes {
		if !used[expr] {
			delete(cache.regexes, expr)
		}
	}
	changed := false
	for expr := range next.Regexes {
		if !used[expr] {
			delete(next.Regexes, expr)
			changed = true
		}
	}
	for expr := range used {
		resolved := []string{}
		// Validated when the member sent it; one a record written by
		// another version holds that this one refuses matches nothing.
		if c, err := cache.regex(expr); err == nil {
			if !c.resolved || c.version != topics.Version {
				c.topics, c.version, c.resolved = c.resolve(expr, topics.Names), topics.Version, true
			}
			resolved = c.topics
		}
		if old, ok := next.Regexes[expr]; !ok || !slices.Equal(old, resolved) {
			if next.Regexes == nil {
				next.Regexes = map[string][]string{}
			}
			next.Regexes[expr] = resolved
			changed = true
		}
	}
	return changed
}

// subscription is the topics a member subscribes to: those it names and,
// for a member with a regular expression, those it resolved to; sorted.
func (g *Group) subscription(m *Member) []string {
	if m.Consumer == nil || m.Consumer.TopicRegex == "" {
		return m.Topics
	}
	resolved := g.Regexes[m.Consumer.TopicRegex]
	if len(m.Topics) == 0 {
		return resolved
	}
	out := append(slices.Clone(m.Topics), resolved...)
	slices.Sort(out)
	return slices.Compact(out)
}

// subscriptions is every member's subscription as a set, for the assignors.
func (g *Group) subscriptions() map[string]map[string]bool {
	out := make(map[string]map[string]bool, len(g.Members))
	for id, m := range g.Members {
		topics := g.subscription(m)
		set := make(map[string]bool, len(topics))
		for _, t := range topics {
			set[t] = true
		}
		out[id] = set
	}
	return out
}
