package config

import (
	"bytes"
	_ "embed"
)

// schemaJSON is embedded so tests and tools validate against exactly the
// file operators are pointed to; binaries that never call Schema drop it.
//
//go:embed schema.json
var schemaJSON []byte

// Schema returns the JSON Schema (draft 2020-12) of the plugin configuration.
// The schema accepts a superset of what Parse accepts: Parse also checks
// rules a schema cannot state (unique names, replaces targets and cycles,
// cost against capacity, cost.max against cost.default, duration ranges,
// duplicate JSON keys).
func Schema() []byte { return bytes.Clone(schemaJSON) }
