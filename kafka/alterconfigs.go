package kafka

import (
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// handleAlterConfigs serves the non-incremental AlterConfigs on the same
// topic configs as IncrementalAlterConfigs, with Kafka's meaning: a
// resource's configs replace the whole set, so a config set now and not
// named returns to its default, and a null value is a config not named.
// It becomes one IncrementalAlterConfigs-style change of the configs this
// broker's metadata shows set: SET of each named one, DELETE of the others.
// Configs fixed at creation (remote.storage.enable) keep their value when
// not named; naming one with another value is INVALID_CONFIG, as for
// IncrementalAlterConfigs. A replacement that changes nothing succeeds
// without a write.
func (s *Server) handleAlterConfigs(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	md := s.opts.Backend.Metadata()
	for i, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		err := func() error {
			switch {
			case i >= maxAdminTopics:
				return api.Errorf(api.CodeInvalidRequest, "more than %d resources in one request", maxAdminTopics)
			case r.ResourceType != kmsg.ConfigResourceTypeTopic:
				return api.Errorf(api.CodeInvalidRequest, "only topic configs can be altered")
			case len(r.Configs) > maxAdminTopics:
				return api.Errorf(api.CodeInvalidRequest, "more than %d configs in one resource", maxAdminTopics)
			}
			tm, ok := md.Topics[r.ResourceName]
			if !ok {
				return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", r.ResourceName)
			}
			alter := replaceConfigs(tm.Record.Configs, r.Configs)
			if len(alter.Set) == 0 && len(alter.Delete) == 0 {
				return nil
			}
			return s.opts.Backend.AlterTopicConfig(ctx, r.ResourceName, alter, req.ValidateOnly)
		}()
		if err != nil {
			rr.ErrorCode, rr.ErrorMessage = errorCode(err), errorMessage(err)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// replaceConfigs is the change that makes a topic's configs, now current,
// those named in configs (the last value of a name named twice): SET of
// each whose value differs, DELETE of each set now and not named, except
// the configs fixed at creation.
func replaceConfigs(current map[string]string, configs []kmsg.AlterConfigsRequestResourceConfig) api.AlterTopicConfigRequest {
	want := map[string]string{}
	for _, c := range configs {
		if c.Value == nil {
			delete(want, c.Name)
			continue
		}
		want[c.Name] = *c.Value
	}
	alter := api.AlterTopicConfigRequest{Set: map[string]string{}}
	for name, v := range want {
		if cur, ok := current[name]; !ok || cur != v {
			alter.Set[name] = v
		}
	}
	for _, name := range slices.Sorted(maps.Keys(current)) {
		if _, named := want[name]; !named && !api.FixedTopicConfig(name) {
			alter.Delete = append(alter.Delete, name)
		}
	}
	return alter
}
