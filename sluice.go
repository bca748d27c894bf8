// Package sluice holds the files that belong to the whole product, embedded so
// that every binary serves them: the public API's OpenAPI description.
package sluice

import _ "embed"

// OpenAPI is openapi.yaml, the single source of truth for the public HTTP API.
//
//go:embed openapi.yaml
var OpenAPI []byte
