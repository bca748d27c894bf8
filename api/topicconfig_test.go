package api

import (
	"errors"
	"testing"
	"time"
)

func TestParseTopicConfigCleanupPolicy(t *testing.T) {
	tests := []struct {
		name      string
		configs   map[string]string
		wantErr   bool
		compact   bool
		delete    bool
		retention time.Duration
		bytes     int64
	}{
		{name: "default is delete", configs: nil, delete: true, retention: 7 * 24 * time.Hour, bytes: -1},
		{name: "delete", configs: map[string]string{"cleanup.policy": "delete", "retention.bytes": "5000"}, delete: true, retention: 7 * 24 * time.Hour, bytes: 5000},
		{name: "compact alone turns retention off", configs: map[string]string{"cleanup.policy": "compact", "retention.ms": "1000", "retention.bytes": "5000"}, compact: true, retention: -1, bytes: -1},
		{name: "compact,delete keeps retention", configs: map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "1000"}, compact: true, delete: true, retention: time.Second, bytes: -1},
		{name: "delete,compact", configs: map[string]string{"cleanup.policy": "delete,compact"}, compact: true, delete: true, retention: 7 * 24 * time.Hour, bytes: -1},
		{name: "unknown policy", configs: map[string]string{"cleanup.policy": "shred"}, wantErr: true},
		{name: "compact with tiering", configs: map[string]string{"cleanup.policy": "compact", "remote.storage.enable": "true"}, wantErr: true},
		{name: "compact,delete with tiering", configs: map[string]string{"cleanup.policy": "compact,delete", "remote.storage.enable": "true"}, wantErr: true},
		{name: "delete with tiering", configs: map[string]string{"remote.storage.enable": "true"}, delete: true, retention: 7 * 24 * time.Hour, bytes: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseTopicConfig(tt.configs, 3)
			if tt.wantErr {
				var ae *Error
				if !errors.As(err, &ae) || ae.Code != CodeInvalidConfig {
					t.Fatalf("err = %v, want INVALID_CONFIG", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Compact != tt.compact || c.DeletePolicy != tt.delete {
				t.Errorf("compact=%v delete=%v, want %v %v", c.Compact, c.DeletePolicy, tt.compact, tt.delete)
			}
			if c.Retention != tt.retention || c.RetentionBytes != tt.bytes {
				t.Errorf("retention %v / %d bytes, want %v / %d", c.Retention, c.RetentionBytes, tt.retention, tt.bytes)
			}
		})
	}
}

func TestParseTopicConfigCompactionSettings(t *testing.T) {
	c, err := ParseTopicConfig(map[string]string{"cleanup.policy": "compact"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.MinCleanableDirtyRatio != 0.5 || c.DeleteRetention != 24*time.Hour || c.MinCompactionLag != 0 {
		t.Errorf("defaults: ratio %v, delete retention %v, lag %v", c.MinCleanableDirtyRatio, c.DeleteRetention, c.MinCompactionLag)
	}
	c, err = ParseTopicConfig(map[string]string{
		"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1",
		"delete.retention.ms": "1000", "min.compaction.lag.ms": "60000",
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.MinCleanableDirtyRatio != 0.1 || c.DeleteRetention != time.Second || c.MinCompactionLag != time.Minute {
		t.Errorf("set: ratio %v, delete retention %v, lag %v", c.MinCleanableDirtyRatio, c.DeleteRetention, c.MinCompactionLag)
	}

	bad := []struct{ name, value string }{
		{"min.cleanable.dirty.ratio", "1.5"},
		{"min.cleanable.dirty.ratio", "-0.1"},
		{"min.cleanable.dirty.ratio", "NaN"},
		{"min.cleanable.dirty.ratio", "half"},
		{"delete.retention.ms", "-1"},
		{"min.compaction.lag.ms", "soon"},
	}
	for _, b := range bad {
		t.Run(b.name+"="+b.value, func(t *testing.T) {
			_, err := ParseTopicConfig(map[string]string{b.name: b.value}, 1)
			var ae *Error
			if !errors.As(err, &ae) || ae.Code != CodeInvalidConfig {
				t.Fatalf("err = %v, want INVALID_CONFIG", err)
			}
		})
	}
}
