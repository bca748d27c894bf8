package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// readSubscription decodes a JoinGroup protocol's ConsumerMemberMetadata.
// segmentio/kafka-go's group code labels its subscription version 1 but
// writes the version 0 layout (topics and user data, no owned partitions):
// a subscription that does not decode at its own version is read again as
// version 0, and keeps the version it announced.
func readSubscription(meta *kmsg.ConsumerMemberMetadata, b []byte) error {
	err := meta.ReadFrom(b)
	if err == nil || len(b) < 2 || (b[0] == 0 && b[1] == 0) {
		return err
	}
	v0 := append([]byte{0, 0}, b[2:]...)
	var m kmsg.ConsumerMemberMetadata
	if m.ReadFrom(v0) != nil {
		return err
	}
	m.Version = int16(b[0])<<8 | int16(b[1])
	*meta = m
	return nil
}
