package tier

import (
	"encoding/binary"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// The remote offset index is a flat array of 16-byte big-endian entries, one
// per batch: absolute base offset (int64), byte position in the log object
// (int64). Exact (one entry per batch), so a cold read needs no scanning.
//
// Nothing read back from the bucket is trusted: an index is used only after
// decodeIndex checked it against its segment's record (which lives in the
// coordinator), and the bytes it points at are checked batch by batch
// (verifyRange) before they are served.
const remoteIndexEntry = 16

type indexEntry struct{ offset, pos int64 }

func encodeIndex(entries []indexEntry) []byte {
	b := make([]byte, len(entries)*remoteIndexEntry)
	for i, e := range entries {
		binary.BigEndian.PutUint64(b[i*remoteIndexEntry:], uint64(e.offset))
		binary.BigEndian.PutUint64(b[i*remoteIndexEntry+8:], uint64(e.pos))
	}
	return b
}

// maxIndexEntries is the most entries seg's index can hold: one per batch,
// and every batch takes at least a header's bytes and one offset.
func maxIndexEntries(seg RemoteSegment) int64 {
	return min(seg.Size/recordbatch.HeaderSize, seg.Next-seg.Base)
}

// checkRecord checks that a record describes a segment a reader can use,
// before anything is fetched on its word: a non-empty offset range, a log
// object that holds at least one batch, and an index size of whole entries
// that the log object could hold.
func checkRecord(seg RemoteSegment) error {
	switch {
	case seg.Base < 0 || seg.Next <= seg.Base:
		return corruptf("record %s: offsets [%d, %d) are not a range", seg.Key, seg.Base, seg.Next)
	case seg.Size < recordbatch.HeaderSize:
		return corruptf("record %s: a log object of %d bytes holds no batch", seg.Key, seg.Size)
	case seg.IndexSize < remoteIndexEntry || seg.IndexSize%remoteIndexEntry != 0:
		return corruptf("record %s: an index of %d bytes is not whole entries", seg.Key, seg.IndexSize)
	case seg.IndexSize/remoteIndexEntry > maxIndexEntries(seg):
		return corruptf("record %s: %d index entries for %d bytes and %d offsets", seg.Key, seg.IndexSize/remoteIndexEntry, seg.Size, seg.Next-seg.Base)
	}
	return nil
}

// decodeIndex parses seg's index object b and checks it against the record:
// the size the record states; one entry per batch, bounded by the log
// object's size and the offset range; the first entry at (Base, 0); offsets
// strictly increasing below Next; positions strictly increasing, each batch
// at least a header long, and the last one starting a header's length before
// the end of the log object. It allocates only for entries b holds, and only
// once b passed the size checks. Errors are REMOTE_CORRUPT.
func decodeIndex(b []byte, seg RemoteSegment) ([]indexEntry, error) {
	if err := checkRecord(seg); err != nil {
		return nil, err
	}
	if int64(len(b)) != seg.IndexSize {
		return nil, corruptf("%s holds %d bytes, its record says %d", seg.IndexKey(), len(b), seg.IndexSize)
	}
	out := make([]indexEntry, len(b)/remoteIndexEntry)
	for i := range out {
		e := indexEntry{int64(binary.BigEndian.Uint64(b[i*remoteIndexEntry:])), int64(binary.BigEndian.Uint64(b[i*remoteIndexEntry+8:]))}
		switch {
		case i == 0 && (e.offset != seg.Base || e.pos != 0):
			return nil, corruptf("%s starts at offset %d position %d, its segment at offset %d position 0", seg.IndexKey(), e.offset, e.pos, seg.Base)
		case e.offset >= seg.Next:
			return nil, corruptf("%s entry %d: offset %d is past the segment's end %d", seg.IndexKey(), i, e.offset, seg.Next)
		case e.pos < 0 || e.pos > seg.Size-recordbatch.HeaderSize:
			return nil, corruptf("%s entry %d: position %d is outside a log object of %d bytes", seg.IndexKey(), i, e.pos, seg.Size)
		case i > 0 && e.offset <= out[i-1].offset:
			return nil, corruptf("%s entry %d: offset %d does not follow %d", seg.IndexKey(), i, e.offset, out[i-1].offset)
		case i > 0 && e.pos-out[i-1].pos < recordbatch.HeaderSize:
			return nil, corruptf("%s entry %d: position %d leaves the batch at %d shorter than a header", seg.IndexKey(), i, e.pos, out[i-1].pos)
		}
		out[i] = e
	}
	return out, nil
}

// verifyRange checks ps, the log object's bytes from position start, as
// what the index entries idx say it holds: whole batches with good CRCs and
// known codecs, one per entry, each where its entry puts it and as long as
// the distance to the next entry (the last one reaching the range's end),
// with its base offset, and ending before the next entry's offset
// (following, after the last). It returns how many of the entries passed
// before the first that did not; errors are REMOTE_CORRUPT. A batch that
// straddles two chunks is copied to be checked; the others are checked in
// place.
func verifyRange(seg RemoteSegment, ps Pieces, start int64, idx []indexEntry, following int64) (int, error) {
	size := ps.Len()
	for k, e := range idx {
		lo, hi := e.pos-start, size
		next := following
		if k+1 < len(idx) {
			hi, next = idx[k+1].pos-start, idx[k+1].offset
		}
		if lo < 0 || hi > size || hi-lo < recordbatch.HeaderSize {
			return k, corruptf("%s: the batch at position %d is %d bytes, shorter than a batch header", seg.LogKey(), e.pos, max(hi-lo, 0))
		}
		h, err := recordbatch.Verify(ps.contiguous(lo, hi))
		switch {
		case err != nil:
			return k, corruptf("%s: the batch at position %d (offset %d), %d bytes by its index: %v", seg.LogKey(), e.pos, e.offset, hi-lo, err)
		case h.BaseOffset != e.offset:
			return k, corruptf("%s: the batch at position %d starts at offset %d, its index says %d", seg.LogKey(), e.pos, h.BaseOffset, e.offset)
		case h.NextOffset() > next:
			return k, corruptf("%s: the batch at position %d reaches offset %d, past the next batch's %d", seg.LogKey(), e.pos, h.LastOffset(), next)
		}
	}
	return len(idx), nil
}

func corruptf(format string, args ...any) error {
	return api.Errorf(api.CodeRemoteCorrupt, "tier: "+format, args...)
}
