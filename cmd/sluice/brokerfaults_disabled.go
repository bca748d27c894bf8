//go:build !sluice_failpoints

package main

import (
	"context"
	"log/slog"

	"github.com/sluice-io/sluice/commitlog"
)

// brokerFaultFS is nil in a build without failpoints: the broker opens its
// data directory itself, and SLUICE_BROKER_FAULTFS is not read (see
// brokerfaults_enabled.go).
func brokerFaultFS(context.Context, string, *slog.Logger) (commitlog.FS, func(), error) {
	return nil, func() {}, nil
}
