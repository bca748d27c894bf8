package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/kafka"
)

// limitFlags collects `--limit name=value` (repeatable) and SLUICE_LIMITS
// ("name=value,name=value", applied first, so flags win): the limits
// table's names (api.Limits) of the process's scopes, so every limit can be
// set without a flag of its own.
type limitFlags struct {
	scopes []string
	values map[string]int64
	envErr error
}

func addLimitFlags(fs *flag.FlagSet, scopes ...string) *limitFlags {
	l := &limitFlags{scopes: scopes, values: map[string]int64{}}
	var names []string
	for _, lim := range api.Limits() {
		if slices.Contains(scopes, lim.Scope) {
			names = append(names, lim.Name)
		}
	}
	if env := envOr("SLUICE_LIMITS", ""); env != "" {
		for _, kv := range strings.Split(env, ",") {
			if err := l.set(strings.TrimSpace(kv)); err != nil {
				l.envErr = fmt.Errorf("SLUICE_LIMITS: %w", err)
				break
			}
		}
	}
	fs.Func("limit", "set a limit, name=value (repeatable; env SLUICE_LIMITS=name=value,...): "+strings.Join(names, ", "), l.set)
	return l
}

// set takes one name=value.
func (l *limitFlags) set(kv string) error {
	name, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("%q: want name=value", kv)
	}
	for _, lim := range api.Limits() {
		if lim.Name == name && slices.Contains(l.scopes, lim.Scope) {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("%s=%q: want a positive integer (%s)", name, v, lim.Unit)
			}
			l.values[name] = n
			return nil
		}
	}
	return fmt.Errorf("%q is not a limit here (scopes %v)", name, l.scopes)
}

// err is what reading SLUICE_LIMITS found wrong.
func (l *limitFlags) err() error { return l.envErr }

// applyGateway sets the gateway limits given (zero fields keep the defaults).
func (l *limitFlags) applyGateway(o *gateway.Options) {
	ms := func(name string) time.Duration { return time.Duration(l.values[name]) * time.Millisecond }
	o.MaxBodyBytes = l.values[api.LimitMaxRequestBytes]
	o.Limits = gateway.Limits{
		MaxRecordsPerRequest: int(l.values[api.LimitMaxRecordsPerRequest]),
		MaxHeadersPerRecord:  int(l.values[api.LimitMaxHeadersPerRecord]),
		ProduceMemoryBytes:   l.values[api.LimitProduceMemoryBytes],
		Acks0MaxInFlight:     int(l.values[api.LimitAcks0MaxInFlight]),
		ReadTimeout:          ms(api.LimitReadTimeoutMs),
	}
	o.Streams = gateway.StreamLimits{
		WriteTimeout:        ms(api.LimitWriteTimeoutMs),
		PingInterval:        ms(api.LimitWSPingIntervalMs),
		IdleTimeout:         ms(api.LimitWSIdleTimeoutMs),
		MaxConnections:      int(l.values[api.LimitWSMaxConnections]),
		MaxConnectionsPerIP: int(l.values[api.LimitWSMaxConnectionsPerIP]),
	}
}

// maxGroupsPerCoordinator is max.groups.per.coordinator (zero: the default).
func (l *limitFlags) maxGroupsPerCoordinator() int {
	return int(l.values[api.LimitMaxGroupsPerCoord])
}

// maxPartitionsPerBroker is max.partitions.per.broker (zero: the default).
func (l *limitFlags) maxPartitionsPerBroker() int {
	return int(l.values[api.LimitMaxPartitionsPerBroker])
}

// kafkaLimits are the Kafka listener's limits given (zero fields keep the
// defaults).
func (l *limitFlags) kafkaLimits() kafka.Limits {
	return kafka.Limits{
		MaxRequestBytes:           int32(min(l.values[api.LimitKafkaMaxRequestBytes], math.MaxInt32)),
		MaxRequestBytesBeforeAuth: int32(min(l.values[api.LimitKafkaMaxRequestBeforeAuth], math.MaxInt32)),
		MaxConnections:            int(l.values[api.LimitKafkaMaxConnections]),
		MaxConnectionsPerIP:       int(l.values[api.LimitKafkaMaxConnectionsPerIP]),
		IdleTimeout:               time.Duration(l.values[api.LimitKafkaIdleTimeoutMs]) * time.Millisecond,
	}
}
