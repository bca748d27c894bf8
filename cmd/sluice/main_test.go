package main

import (
	"os"
	"testing"

	"github.com/sluice-io/sluice/internal/faulttest"
)

// TestMain removes the sluice binary the process tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	faulttest.RemoveBinary()
	os.Exit(code)
}
