package api

import (
	"maps"
	"sort"
)

// AlterTopicConfigRequest is the body of PATCH /v1/topics/{topic}/configs,
// as Kafka's incremental alter configs: configs to set, and configs to
// remove (back to their defaults). Configs not named keep their values.
type AlterTopicConfigRequest struct {
	Set    map[string]string `json:"set,omitempty"`
	Delete []string          `json:"delete,omitempty"`
}

// fixedTopicConfigs cannot change once a topic exists: turning tiering on
// or off would strand segments already in, or not yet in, the object store.
var fixedTopicConfigs = map[string]bool{ConfigRemoteStorage: true}

// FixedTopicConfig reports whether a topic config is fixed at creation.
func FixedTopicConfig(name string) bool { return fixedTopicConfigs[name] }

// AlterTopicConfigs returns the configs a topic has after req is applied to
// current (which it does not change), checked as at creation against the
// topic's replication factor. Errors: INVALID_REQUEST for a request that
// changes nothing or names a config both to set and to delete; INVALID_CONFIG
// for an unknown config, a value that does not parse, a combination that
// cannot work, or a config fixed at creation (remote.storage.enable).
func AlterTopicConfigs(current map[string]string, req AlterTopicConfigRequest, replicationFactor int) (map[string]string, error) {
	if len(req.Set) == 0 && len(req.Delete) == 0 {
		return nil, Errorf(CodeInvalidRequest, "nothing to alter: give configs to set or to delete")
	}
	out := maps.Clone(current)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range sortedNames(req.Set) {
		if fixedTopicConfigs[k] && req.Set[k] != current[k] {
			return nil, Errorf(CodeInvalidConfig, "%s cannot change once the topic exists", k)
		}
		out[k] = req.Set[k]
	}
	for _, k := range req.Delete {
		if _, ok := req.Set[k]; ok {
			return nil, Errorf(CodeInvalidRequest, "%s is both set and deleted", k)
		}
		if _, ok := configSpecs[k]; !ok {
			return nil, Errorf(CodeInvalidConfig, "unknown topic config %q", k)
		}
		if _, ok := current[k]; fixedTopicConfigs[k] && ok {
			return nil, Errorf(CodeInvalidConfig, "%s cannot change once the topic exists", k)
		}
		delete(out, k)
	}
	if _, err := ParseTopicConfig(out, replicationFactor); err != nil {
		return nil, err
	}
	return out, nil
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
