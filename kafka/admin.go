package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// Topic administration: CreateTopics, DeleteTopics, DescribeConfigs and
// IncrementalAlterConfigs on the topic configs the HTTP API has (the same
// names, checks and controller writes, through the Backend). Replica
// placement is the controller's: a manual assignment is refused. Broker
// configs are not served: DescribeConfigs of a broker answers no configs,
// altering one is INVALID_REQUEST.

// maxAdminTopics bounds the topics or resources of one request.
const maxAdminTopics = 1000

func (s *Server) handleCreateTopics(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	md := s.opts.Backend.Metadata()
	for i, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		err := func() error {
			switch {
			case i >= maxAdminTopics:
				return api.Errorf(api.CodeInvalidRequest, "more than %d topics in one request", maxAdminTopics)
			case len(t.ReplicaAssignment) > 0:
				return api.Errorf(api.CodeInvalidRequest, "replica assignments are the controller's: send num_partitions and replication_factor")
			}
			cr := api.CreateTopicRequest{Name: t.Topic, Partitions: int(t.NumPartitions), ReplicationFactor: int(t.ReplicationFactor), Configs: map[string]string{}}
			if cr.Partitions == -1 {
				cr.Partitions = 1
			}
			if cr.ReplicationFactor == -1 {
				cr.ReplicationFactor = min(3, len(md.Brokers))
			}
			for _, c := range t.Configs {
				if c.Value == nil {
					return api.Errorf(api.CodeInvalidConfig, "config %s has no value", c.Name)
				}
				cr.Configs[c.Name] = *c.Value
			}
			if err := s.opts.Backend.CreateTopic(ctx, cr, req.ValidateOnly); err != nil {
				return err
			}
			rt.NumPartitions, rt.ReplicationFactor = int32(cr.Partitions), int16(cr.ReplicationFactor)
			for _, c := range topicConfigs(cr.Configs, nil) {
				rc := kmsg.NewCreateTopicsResponseTopicConfig()
				rc.Name, rc.Value, rc.Source = c.Name, c.Value, int8(c.Source)
				rt.Configs = append(rt.Configs, rc)
			}
			if tm, ok := s.opts.Backend.Metadata().Topics[t.Topic]; ok {
				rt.TopicID = topicID(tm.Record)
			}
			return nil
		}()
		if err != nil {
			rt.NumPartitions, rt.ReplicationFactor = -1, -1
			rt.ErrorCode, rt.ErrorMessage = errorCode(err), errorMessage(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func (s *Server) handleDeleteTopics(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type named struct {
		name string
		id   [16]byte
	}
	var topics []named
	for _, n := range req.TopicNames {
		topics = append(topics, named{name: n})
	}
	for _, t := range req.Topics {
		n := named{id: t.TopicID}
		if t.Topic != nil {
			n.name = *t.Topic
		}
		topics = append(topics, n)
	}
	md := s.opts.Backend.Metadata()
	for i, t := range topics {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.TopicID = t.id
		err := func() error {
			if i >= maxAdminTopics {
				return api.Errorf(api.CodeInvalidRequest, "more than %d topics in one request", maxAdminTopics)
			}
			if t.name == "" {
				// By ID (v6): the name is the metadata's.
				for name, tm := range md.Topics {
					if topicID(tm.Record) == t.id {
						t.name = name
						break
					}
				}
				if t.name == "" {
					return api.Errorf(api.CodeUnknownTopic, "no topic has that id")
				}
			}
			rt.Topic = kmsg.StringPtr(t.name)
			if t.name == api.OffsetsTopic {
				return api.Errorf(api.CodeInvalidRequest, "%s is internal", api.OffsetsTopic)
			}
			return s.opts.Backend.DeleteTopic(ctx, t.name)
		}()
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = errorCode(err), errorMessage(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func (s *Server) handleDescribeConfigs(_ context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	md := s.opts.Backend.Metadata()
	for i, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		switch {
		case i >= maxAdminTopics:
			rr.ErrorCode = kerr.InvalidRequest.Code
		case r.ResourceType == kmsg.ConfigResourceTypeBroker:
			// Broker configs are flags, not served: none to show.
		case r.ResourceType != kmsg.ConfigResourceTypeTopic:
			rr.ErrorCode, rr.ErrorMessage = kerr.InvalidRequest.Code, kmsg.StringPtr("only topic and broker resources are served")
		default:
			tm, ok := md.Topics[r.ResourceName]
			if !ok {
				rr.ErrorCode, rr.ErrorMessage = kerr.UnknownTopicOrPartition.Code, kmsg.StringPtr("topic "+r.ResourceName+" does not exist")
				break
			}
			for _, c := range topicConfigs(tm.Record.Configs, r.ConfigNames) {
				rc := kmsg.NewDescribeConfigsResponseResourceConfig()
				rc.Name, rc.Value, rc.Source = c.Name, c.Value, c.Source
				rc.IsDefault = c.Source == kmsg.ConfigSourceDefaultConfig
				rc.ReadOnly = c.Name == api.ConfigRemoteStorage
				if req.IncludeDocumentation {
					rc.Documentation = kmsg.StringPtr(c.doc)
				}
				if req.IncludeSynonyms {
					syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
					syn.Name, syn.Value, syn.Source = c.Name, c.Value, c.Source
					rc.ConfigSynonyms = append(rc.ConfigSynonyms, syn)
				}
				rr.Configs = append(rr.Configs, rc)
			}
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

func (s *Server) handleIncrementalAlterConfigs(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for i, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		err := func() error {
			switch {
			case i >= maxAdminTopics:
				return api.Errorf(api.CodeInvalidRequest, "more than %d resources in one request", maxAdminTopics)
			case r.ResourceType != kmsg.ConfigResourceTypeTopic:
				return api.Errorf(api.CodeInvalidRequest, "only topic configs can be altered")
			}
			alter := api.AlterTopicConfigRequest{Set: map[string]string{}}
			for _, c := range r.Configs {
				switch c.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					if c.Value == nil {
						return api.Errorf(api.CodeInvalidConfig, "SET %s without a value", c.Name)
					}
					alter.Set[c.Name] = *c.Value
				case kmsg.IncrementalAlterConfigOpDelete:
					alter.Delete = append(alter.Delete, c.Name)
				default:
					return api.Errorf(api.CodeInvalidRequest, "%s: only SET and DELETE are served (no list configs to append to or subtract from)", c.Name)
				}
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

// describedConfig is one topic config as DescribeConfigs shows it.
type describedConfig struct {
	Name   string
	Value  *string
	Source kmsg.ConfigSource
	doc    string
}

// topicConfigs lists a topic's configs, those set and the defaults of the
// others, sorted by name; names, when not nil, picks some of them.
func topicConfigs(set map[string]string, names []string) []describedConfig {
	var out []describedConfig
	for _, name := range api.ConfigNames() {
		if names != nil && !slices.Contains(names, name) {
			continue
		}
		def, doc, _ := api.ConfigDoc(name)
		c := describedConfig{Name: name, Source: kmsg.ConfigSourceDefaultConfig, doc: doc}
		if v, ok := set[name]; ok {
			c.Value, c.Source = kmsg.StringPtr(v), kmsg.ConfigSourceDynamicTopicConfig
		} else if def != "" {
			c.Value = kmsg.StringPtr(def)
		}
		out = append(out, c)
	}
	return out
}
