package client_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testwait"
)

// polledRecord is one record as a group member sees it, in bytes.
type polledRecord struct {
	ts         int64
	key, value []byte
	headers    map[string]string
}

func jsonRecordBytes(t *testing.T, r api.FetchedRecord) polledRecord {
	t.Helper()
	pr := polledRecord{ts: r.Timestamp, headers: r.Headers}
	var err error
	switch {
	case r.Key != nil:
		pr.key = []byte(*r.Key)
	case r.KeyB64 != nil:
		if pr.key, err = base64.StdEncoding.DecodeString(*r.KeyB64); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case r.Value != nil:
		pr.value = []byte(r.Value)
	case r.ValueB64 != nil:
		if pr.value, err = base64.StdEncoding.DecodeString(*r.ValueB64); err != nil {
			t.Fatal(err)
		}
	}
	return pr
}

// drainGroup polls a fresh member of group until n records came, each once,
// keyed topic/partition/offset.
func drainGroup(t *testing.T, cl *client.Client, group string, raw bool, n int) map[string]polledRecord {
	t.Helper()
	g := cl.NewGroupConsumer(group, client.GroupConsumerOptions{Topics: []string{"mixed"}, MaxRecords: 5, MaxWait: 100 * time.Millisecond, Raw: raw})
	if err := g.Join(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(testCtx(t)) })
	got := map[string]polledRecord{}
	add := func(k string, r polledRecord) {
		if _, dup := got[k]; dup {
			t.Fatalf("%s polled twice by %s", k, group)
		}
		got[k] = r
	}
	testwait.Check(t, 30*time.Second, fmt.Sprintf("%d records in %s", n, group), func() error {
		b, err := g.Poll(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if raw && len(b.Records) != 0 {
			t.Fatalf("a raw poll returned %d JSON records", len(b.Records))
		}
		for _, r := range b.Records {
			add(fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), jsonRecordBytes(t, r.FetchedRecord))
		}
		for _, p := range b.Partitions {
			recs, err := p.Records()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				pr := polledRecord{ts: r.Timestamp, key: r.Key, value: r.Value}
				if len(r.Headers) > 0 {
					pr.headers = map[string]string{}
					for _, h := range r.Headers {
						pr.headers[h.Key] = string(h.Value)
					}
				}
				add(fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, r.Offset), pr)
			}
		}
		if len(got) < n {
			return fmt.Errorf("%d of %d", len(got), n)
		}
		return nil
	})
	if len(got) != n {
		t.Fatalf("%s polled %d records, want %d", group, len(got), n)
	}
	return got
}

// A raw group poll returns what the JSON poll returns, record for record:
// the same offsets, keys, values (JSON and binary), headers and
// timestamps; and the same cursor polled again returns the same bytes.
func TestRawGroupPollEqualsJSONPoll(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "mixed", 3)
	const n = 60
	recs := make([]client.Record, n)
	for i := range recs {
		switch i % 4 {
		case 0:
			recs[i] = client.Record{Key: []byte(fmt.Sprintf("k%d", i)), JSON: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		case 1:
			recs[i] = client.Record{Key: []byte{0xff, byte(i)}, Value: []byte{0, 1, byte(i)}, Headers: map[string]string{"h": fmt.Sprint(i), "z": "y"}}
		case 2:
			recs[i] = client.Record{Value: []byte(fmt.Sprintf("text %d", i))}
		default:
			recs[i] = client.Record{Key: []byte("tomb"), Partition: client.Partition(int32(i % 3))}
		}
	}
	for i := 0; i < n; i += 7 { // several batches per partition
		if _, err := cl.Produce(ctx, "mixed", recs[i:min(i+7, n)], client.ProduceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	viaJSON := drainGroup(t, cl, "by-json", false, n)
	viaRaw := drainGroup(t, cl, "by-raw", true, n)
	for k, j := range viaJSON {
		r, ok := viaRaw[k]
		switch {
		case !ok:
			t.Fatalf("%s polled as JSON, not raw", k)
		case j.ts != r.ts || !bytes.Equal(j.key, r.key) || (j.key == nil) != (r.key == nil) ||
			!bytes.Equal(j.value, r.value) || (j.value == nil) != (r.value == nil) || !maps.Equal(j.headers, r.headers):
			t.Fatalf("%s: JSON poll %+v, raw poll %+v", k, j, r)
		}
	}

	// The same cursor twice: the same answer, byte for byte.
	g := cl.NewGroupConsumer("cursor", client.GroupConsumerOptions{Topics: []string{"mixed"}, MaxRecords: 5, Raw: true})
	if err := g.Join(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close(ctx) }()
	first, err := cl.PollGroupBatches(ctx, "cursor", g.MemberID(), client.PollOptions{MaxRecords: 5})
	if err != nil {
		t.Fatal(err)
	}
	again := func() client.GroupBatches {
		b, err := cl.PollGroupBatches(ctx, "cursor", g.MemberID(), client.PollOptions{MaxRecords: 5, Cursor: first.Cursor})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := again(), again()
	if len(a.Partitions) == 0 {
		t.Fatal("a poll after the first one's cursor returned nothing")
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the same cursor polled twice answered differently:\n%+v\n%+v", a, b)
	}
	for _, p := range a.Partitions {
		recs, err := p.Records()
		if err != nil || len(recs) == 0 || recs[0].Offset != p.From {
			t.Fatalf("%s/%d from %d: %d records, %v", p.Topic, p.Partition, p.From, len(recs), err)
		}
	}
}
