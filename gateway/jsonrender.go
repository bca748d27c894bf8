package gateway

import (
	"encoding/json"
	"strconv"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apijson"
)

// The JSON answers that carry records (GET .../records, WebSocket frames,
// group polls, Server-Sent Events) are written by hand (package apijson)
// instead of by encoding/json, values copied as stored: toFetched already
// checked that each is valid JSON. Tests decode both encodings and compare.

// renderFetchResponse encodes res as json.Marshal would, with values
// copied as stored.
func renderFetchResponse(dst []byte, res *api.FetchResponse) []byte {
	if res.Records == nil {
		dst = append(dst, `{"records":null`...)
	} else {
		dst = appendFetchedRecords(dst, res.Records)
	}
	dst = append(dst, `,"next_offset":`...)
	dst = strconv.AppendInt(dst, res.NextOffset, 10)
	dst = append(dst, `,"high_watermark":`...)
	dst = strconv.AppendInt(dst, res.HighWatermark, 10)
	return append(dst, '}')
}

// appendFetchedRecords writes {"records":[...] (the object left open).
func appendFetchedRecords(dst []byte, recs []api.FetchedRecord) []byte {
	dst = append(dst, `{"records":[`...)
	for i := range recs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		dst = apijson.AppendRecordFields(dst, &recs[i])
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// renderGroupPoll encodes a group poll's answer; the fields other than the
// records are small and go through encoding/json.
func renderGroupPoll(dst []byte, res *api.GroupPollResponse) ([]byte, error) {
	dst = append(dst, `{"records":`...)
	if res.Records == nil {
		dst = append(dst, "null"...)
	} else {
		dst = apijson.AppendGroupRecords(dst, res.Records)
	}
	rest, err := json.Marshal(struct {
		Cursor      string               `json:"cursor"`
		MemberEpoch int32                `json:"member_epoch"`
		Assignment  []api.TopicPartition `json:"assignment"`
		Grants      []api.PartitionGrant `json:"grants"`
	}{res.Cursor, res.MemberEpoch, res.Assignment, res.Grants})
	if err != nil {
		return nil, err
	}
	dst = append(dst, ',')
	return append(dst, rest[1:]...), nil // rest without its '{'
}

// renderGroupRecordsFrame encodes a group WebSocket's records frame
// (wsRecordsFrame).
func renderGroupRecordsFrame(dst []byte, recs []api.GroupRecord, cursor string) []byte {
	dst = append(dst, `{"records":`...)
	if recs == nil {
		dst = append(dst, "null"...)
	} else {
		dst = apijson.AppendGroupRecords(dst, recs)
	}
	dst = append(dst, `,"cursor":`...)
	dst = apijson.AppendString(dst, cursor)
	return append(dst, '}')
}
