package api

import (
	"errors"
	"strconv"
	"testing"
)

func TestCheckTimestamp(t *testing.T) {
	const now = 1_767_225_600_000
	def, err := ParseTopicConfig(nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	strict, err := ParseTopicConfig(map[string]string{ConfigTimestampAfterMaxMs: "0", ConfigTimestampBeforeMaxMs: "1000"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  TopicConfig
		ts   int64
		ok   bool
	}{
		{"zero is now", strict, 0, true},
		{"an hour ahead", def, now + DefaultTimestampAfterMaxMs, true},
		{"past an hour ahead", def, now + DefaultTimestampAfterMaxMs + 1, false},
		{"2^62", def, 1 << 62, false},
		{"1970, no before limit", def, 1, true},
		{"ahead, after.max.ms 0", strict, now + 1, false},
		{"now, after.max.ms 0", strict, now, true},
		{"a second behind", strict, now - 1000, true},
		{"past a second behind", strict, now - 1001, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.CheckTimestamp(tt.ts, now)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, &Error{Code: CodeInvalidTimestamp})) {
				t.Fatalf("CheckTimestamp(%d): %v", tt.ts, err)
			}
		})
	}
	for _, v := range []string{"-1", "soon", "9223372036854775808"} {
		if _, err := ParseTopicConfig(map[string]string{ConfigTimestampAfterMaxMs: v}, 1); Classify(err).Code != CodeInvalidConfig {
			t.Errorf("%s=%q: %v", ConfigTimestampAfterMaxMs, v, err)
		}
	}
}

func TestLimitsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range Limits() {
		if seen[l.Name] || l.Default <= 0 || l.Doc == "" || (l.Scope != LimitScopeGateway && l.Scope != LimitScopeTopic && l.Scope != LimitScopeBroker) {
			t.Errorf("bad row %+v", l)
		}
		seen[l.Name] = true
		if l.Refusal != "" {
			if _, ok := table[l.Refusal]; !ok {
				t.Errorf("%s: refusal %s is not in the error table", l.Name, l.Refusal)
			}
		}
		spec, isConfig := configSpecs[l.Name]
		if isConfig != (l.Scope == LimitScopeTopic) {
			t.Errorf("%s: scope %s, but a topic config: %v", l.Name, l.Scope, isConfig)
		}
		if isConfig && spec.def != strconv.FormatInt(l.Default, 10) {
			t.Errorf("%s: default %d, but the topic config's is %s", l.Name, l.Default, spec.def)
		}
	}
}
