package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

func TestRecordFormat(t *testing.T) {
	full := shownRecord{Topic: "orders", Partition: 2, Offset: 41, Timestamp: 1767225600000, Key: []byte("k"), Value: []byte("v"),
		Headers: []recordbatch.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}}
	null := shownRecord{Topic: "orders", Offset: 7, Timestamp: -1}
	binary := shownRecord{Topic: "t", Key: []byte{0xff}, Value: []byte{0x00, 0xfe}}
	for _, tc := range []struct {
		name, format string
		rec          shownRecord
		want         string
	}{
		{"every field", `%t %p %o %T %k %K %v %s %S %h\n`, full, "orders 2 41 1767225600000 k 1 v v 1 a=1,b=2\n"},
		{"escapes", `a\tb\\c\r%%\n`, full, "a\tb\\c\r%\n"},
		{"null key and value", `[%k|%K|%v|%S|%h|%T]`, null, "[|-1||-1||-1]"},
		{"empty template", ``, full, ""},
		{"json", "json", full, `{"topic":"orders","partition":2,"offset":41,"timestamp":1767225600000,"key":"k","value_b64":"dg==","headers":{"a":"1","b":"2"}}` + "\n"},
		{"json of a JSON value", "json", shownRecord{Topic: "t", Value: []byte(`{"n": 1}`)}, `{"topic":"t","partition":0,"offset":0,"timestamp":0,"value":{"n":1}}` + "\n"},
		{"json of binary", "json", binary, `{"topic":"t","partition":0,"offset":0,"timestamp":0,"key_b64":"/w==","value_b64":"AP4="}` + "\n"},
		{"raw binary", `%k%v`, binary, "\xff\x00\xfe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFormat(tc.format)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := f.write(&b, &tc.rec); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

func TestRecordFormatErrors(t *testing.T) {
	for _, tc := range []struct{ format, want string }{
		{"%x", "unknown escape %x"},
		{"abc%", "lone %"},
		{`abc\`, "lone backslash"},
		{`\q`, `unknown escape \q`},
	} {
		if _, err := parseFormat(tc.format); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFormat(%q) = %v, want an error with %q", tc.format, err, tc.want)
		}
	}
}

func TestShownFromGroup(t *testing.T) {
	k, vb := "user", "AP4="
	r := api.GroupRecord{Topic: "t", Partition: 1, FetchedRecord: api.FetchedRecord{Offset: 3, Timestamp: 9, Key: &k, ValueB64: &vb, Headers: map[string]string{"z": "1", "a": "2"}}}
	s, err := shownFromGroup(&r)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := parseFormat(`%t %p %o %T %k %S %h`)
	var b bytes.Buffer
	_ = f.write(&b, &s)
	if b.String() != "t 1 3 9 user 2 a=2,z=1" || !bytes.Equal(s.Value, []byte{0, 0xfe}) {
		t.Fatalf("got %q, value %x", b.String(), s.Value)
	}
	bad := "!!"
	r.ValueB64 = &bad
	if _, err := shownFromGroup(&r); err == nil {
		t.Fatal("bad base64 accepted")
	}
}

// A topic whose replicas cannot all serve lists them, with the reason and
// the disk error, under its partition table.
func TestPrintTopicOfflineReplicas(t *testing.T) {
	tp := api.Topic{Name: "df", ReplicationFactor: 3, Partitions: []api.PartitionInfo{
		{Partition: 0, Leader: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{2, 3},
			OfflineReplicas: []api.OfflineReplica{{Broker: 1, Reason: api.ReasonStorageError, Error: "STORAGE_ERROR: df-0: no space left on device"}}},
		{Partition: 1, Leader: 3, Replicas: []int32{2, 3, 1}, ISR: []int32{3, 1}, OfflineReplicas: []api.OfflineReplica{{Broker: 2, Reason: api.ReasonBrokerDown}}},
	}}
	var b strings.Builder
	if err := printTopic(&b, tp); err != nil {
		t.Fatal(err)
	}
	want := "\noffline replicas:\n  partition 0, broker 1: storage_error: STORAGE_ERROR: df-0: no space left on device\n  partition 1, broker 2: broker_down\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Fatalf("got\n%s\nwant it to end with\n%s", b.String(), want)
	}
	b.Reset()
	tp.Partitions[0].OfflineReplicas, tp.Partitions[1].OfflineReplicas = nil, nil
	if err := printTopic(&b, tp); err != nil || strings.Contains(b.String(), "offline replicas") {
		t.Fatalf("a topic whose replicas all serve: %q, %v", b.String(), err)
	}
}
