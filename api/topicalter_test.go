package api

import (
	"errors"
	"maps"
	"testing"
)

func TestAlterTopicConfigs(t *testing.T) {
	current := map[string]string{ConfigRetentionMs: "60000", ConfigRemoteStorage: "true"}
	for _, tc := range []struct {
		name string
		req  AlterTopicConfigRequest
		rf   int
		want map[string]string
		code Code
	}{
		{"set", AlterTopicConfigRequest{Set: map[string]string{ConfigMaxMessageBytes: "2000"}}, 1,
			map[string]string{ConfigRetentionMs: "60000", ConfigRemoteStorage: "true", ConfigMaxMessageBytes: "2000"}, ""},
		{"replace and delete", AlterTopicConfigRequest{Set: map[string]string{ConfigRetentionMs: "-1"}, Delete: []string{ConfigSegmentBytes}}, 1,
			map[string]string{ConfigRetentionMs: "-1", ConfigRemoteStorage: "true"}, ""},
		{"back to the default", AlterTopicConfigRequest{Delete: []string{ConfigRetentionMs}}, 1,
			map[string]string{ConfigRemoteStorage: "true"}, ""},
		{"fixed config, same value", AlterTopicConfigRequest{Set: map[string]string{ConfigRemoteStorage: "true"}}, 1, current, ""},
		{"nothing", AlterTopicConfigRequest{}, 1, nil, CodeInvalidRequest},
		{"set and delete", AlterTopicConfigRequest{Set: map[string]string{ConfigRetentionMs: "1"}, Delete: []string{ConfigRetentionMs}}, 1, nil, CodeInvalidRequest},
		{"unknown", AlterTopicConfigRequest{Set: map[string]string{"retention.forever": "1"}}, 1, nil, CodeInvalidConfig},
		{"delete unknown", AlterTopicConfigRequest{Delete: []string{"retention.forever"}}, 1, nil, CodeInvalidConfig},
		{"bad value", AlterTopicConfigRequest{Set: map[string]string{ConfigRetentionMs: "soon"}}, 1, nil, CodeInvalidConfig},
		{"min.insync above the replicas", AlterTopicConfigRequest{Set: map[string]string{ConfigMinInsyncReplicas: "3"}}, 1, nil, CodeInvalidConfig},
		{"fixed config", AlterTopicConfigRequest{Set: map[string]string{ConfigRemoteStorage: "false"}}, 1, nil, CodeInvalidConfig},
		{"fixed config deleted", AlterTopicConfigRequest{Delete: []string{ConfigRemoteStorage}}, 1, nil, CodeInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(current)
			got, err := AlterTopicConfigs(current, tc.req, tc.rf)
			if !maps.Equal(current, before) {
				t.Fatalf("current changed to %v", current)
			}
			if tc.code != "" {
				var e *Error
				if !errors.As(err, &e) || e.Code != tc.code {
					t.Fatalf("err %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
