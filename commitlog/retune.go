package commitlog

// Retune replaces the options a topic config governs while the log is open
// (an altered topic config): SegmentBytes, SegmentAge, IndexIntervalBytes,
// FlushMessages, FlushInterval, RetentionAge and RetentionBytes, zero fields
// taking their defaults as in Open. ProducerIDExpiration, Files, Logger and Now
// stay as opened. The active segment rolls by the new sizes at its next
// append, the next ApplyRetention uses the new retention, and a flush timer
// already armed keeps its old delay. A clean in progress keeps the index
// interval it started with. Errors are those of Options.Validate and
// ErrClosed; on error nothing changes.
func (l *Log) Retune(o Options) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	n := l.opts
	n.SegmentBytes, n.SegmentAge, n.IndexIntervalBytes = o.SegmentBytes, o.SegmentAge, o.IndexIntervalBytes
	n.FlushMessages, n.FlushInterval = o.FlushMessages, o.FlushInterval
	n.RetentionAge, n.RetentionBytes = o.RetentionAge, o.RetentionBytes
	n = n.WithDefaults()
	if err := n.Validate(); err != nil {
		return err
	}
	l.opts = n
	return nil
}
