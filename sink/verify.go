package sink

import (
	"context"
	"fmt"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// Kinds of archive problem VerifyArchive reports.
const (
	ProblemGap        = "gap"        // offsets of the log in no object
	ProblemOverlap    = "overlap"    // offsets in more than one object
	ProblemBeyondLog  = "beyond-log" // an object past the log's high watermark
	ProblemBadObject  = "bad-object" // unreadable, or its lines disagree with its name
	ProblemMismatched = "mismatch"   // its offsets are not the log's offsets of its range
)

// ArchiveProblem is one defect of a partition's archive; First..Last are
// the offsets concerned.
type ArchiveProblem struct {
	Partition int32  `json:"partition"`
	Kind      string `json:"kind"`
	First     int64  `json:"first"`
	Last      int64  `json:"last"`
	Detail    string `json:"detail,omitempty"`
	Key       string `json:"key,omitempty"`
	OtherKey  string `json:"other_key,omitempty"`
}

func (p ArchiveProblem) String() string {
	s := fmt.Sprintf("partition %d: %s at offsets %d-%d", p.Partition, p.Kind, p.First, p.Last)
	if p.Key != "" {
		s += " (" + p.Key
		if p.OtherKey != "" {
			s += ", " + p.OtherKey
		}
		s += ")"
	}
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

// ArchivePartition sums up one partition's archive against its log.
type ArchivePartition struct {
	Partition     int32 `json:"partition"`
	Objects       int   `json:"objects"`
	Bytes         int64 `json:"bytes"`
	LogStart      int64 `json:"log_start_offset"`
	HighWatermark int64 `json:"high_watermark"`
	// ArchivedEnd is the offset after the last object's range (-1: none).
	ArchivedEnd int64 `json:"archived_end"`
}

// ArchiveReport is what VerifyArchive found. OK means no problem.
type ArchiveReport struct {
	Topic      string             `json:"topic"`
	Partitions []ArchivePartition `json:"partitions"`
	Problems   []ArchiveProblem   `json:"problems"`
}

// OK reports whether the archive has no gap, overlap or bad object.
func (r ArchiveReport) OK() bool { return len(r.Problems) == 0 }

// VerifyArchive lists topic's objects under prefix, partition by partition,
// and checks them against the log read through c: consecutive objects must
// meet with neither a gap nor an overlap, the first must start at or below
// the log start offset, none may reach past the high watermark. Records
// between the last object and the high watermark are not a problem (the
// sink may be behind). With deep, every object is also read: its lines
// must have its name's first and last offsets and, between them, exactly
// the log's offsets.
func VerifyArchive(ctx context.Context, objs Objects, c *client.Client, prefix, topic string, deep bool) (ArchiveReport, error) {
	t, err := c.GetTopic(ctx, topic)
	if err != nil {
		return ArchiveReport{}, err
	}
	rep := ArchiveReport{Topic: topic, Problems: []ArchiveProblem{}}
	read := ClientLog(c)
	for p := range len(t.Partitions) {
		tp := api.TopicPartition{Topic: topic, Partition: int32(p)}
		// The objects first, then the log's offsets: a sink running
		// meanwhile only archives records below the high watermark it
		// read, so every listed object is below the one read after.
		list, err := ListArchive(ctx, objs, prefix, tp)
		if err != nil {
			return rep, err
		}
		offs, err := c.ListOffsets(ctx, topic, tp.Partition, client.Earliest)
		if err != nil {
			return rep, err
		}
		part := ArchivePartition{Partition: tp.Partition, Objects: len(list), LogStart: offs.LogStartOffset, HighWatermark: offs.HighWatermark, ArchivedEnd: -1}
		problem := func(kind string, first, last int64, o *ArchivedObject, other *ArchivedObject, detail string) {
			pr := ArchiveProblem{Partition: tp.Partition, Kind: kind, First: first, Last: last, Detail: detail}
			if o != nil {
				pr.Key = o.Key
			}
			if other != nil {
				pr.OtherKey = other.Key
			}
			rep.Problems = append(rep.Problems, pr)
		}
		for i := range list {
			o := &list[i]
			part.Bytes += o.Size
			switch {
			case i == 0 && o.First > offs.LogStartOffset:
				problem(ProblemGap, offs.LogStartOffset, o.First-1, o, nil, "before the first object")
			case i > 0 && o.First > list[i-1].Last+1:
				problem(ProblemGap, list[i-1].Last+1, o.First-1, &list[i-1], o, "between objects")
			case i > 0 && o.First <= list[i-1].Last:
				problem(ProblemOverlap, o.First, min(o.Last, list[i-1].Last), &list[i-1], o, "")
			}
			if o.Last >= offs.HighWatermark {
				problem(ProblemBeyondLog, max(o.First, offs.HighWatermark), o.Last, o, nil, fmt.Sprintf("the high watermark is %d", offs.HighWatermark))
			}
			part.ArchivedEnd = max(part.ArchivedEnd, o.Last+1)
			if deep && o.Last < offs.HighWatermark {
				if err := checkObject(ctx, objs, read, tp, o, offs.LogStartOffset, problem); err != nil {
					return rep, err
				}
			}
		}
		rep.Partitions = append(rep.Partitions, part)
	}
	return rep, nil
}

// checkObject reads one object and compares its offsets with its name and
// with the log's. Only a failure to reach the store or the log is an error.
func checkObject(ctx context.Context, objs Objects, read ReadLogFunc, tp api.TopicPartition, o *ArchivedObject, logStart int64,
	problem func(kind string, first, last int64, o, other *ArchivedObject, detail string)) error {
	data, _, err := objs.ReadObject(ctx, o.Key)
	if err != nil {
		return err
	}
	got, err := DecodeArchiveObject(data)
	if err != nil {
		problem(ProblemBadObject, o.First, o.Last, o, nil, err.Error())
		return nil
	}
	if len(got) == 0 || got[0].Offset != o.First || got[len(got)-1].Offset != o.Last {
		problem(ProblemBadObject, o.First, o.Last, o, nil, fmt.Sprintf("%d lines whose offsets do not span the name's range", len(got)))
		return nil
	}
	if o.First < logStart {
		return nil // below the log's start: nothing to compare with
	}
	want, err := read(ctx, tp, o.First, o.Last)
	if err != nil {
		return err
	}
	if len(want) != len(got) {
		problem(ProblemMismatched, o.First, o.Last, o, nil, fmt.Sprintf("%d lines, the log has %d records", len(got), len(want)))
		return nil
	}
	for i := range want {
		if want[i].Offset != got[i].Offset {
			problem(ProblemMismatched, o.First, o.Last, o, nil, fmt.Sprintf("line %d has offset %d, the log %d", i+1, got[i].Offset, want[i].Offset))
			return nil
		}
	}
	return nil
}
