package gateway

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/offsets"
	"github.com/sluice-io/sluice/push"
)

// The tests in this file keep openapi.yaml (the single source of truth for the
// public API) in step with the code: its routes with Routes, its error codes
// with the error table, its schemas with the wire types, and its parameter
// bounds with the handlers' constants.

const specPath = "../openapi.yaml"

// openAPIDoc is the part of openapi.yaml the tests read.
type openAPIDoc struct {
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Schemas    map[string]schemaDoc    `yaml:"schemas"`
		Responses  map[string]responseDoc  `yaml:"responses"`
		Parameters map[string]parameterDoc `yaml:"parameters"`
	} `yaml:"components"`
}

type operationDoc struct {
	ACL        string                 `yaml:"x-acl"`
	Parameters []parameterDoc         `yaml:"parameters"`
	Responses  map[string]responseDoc `yaml:"responses"`
}

type responseDoc struct {
	Ref        string   `yaml:"$ref"`
	ErrorCodes []string `yaml:"x-error-codes"`
}

type parameterDoc struct {
	Ref    string `yaml:"$ref"`
	Name   string `yaml:"name"`
	In     string `yaml:"in"`
	Schema struct {
		Default any    `yaml:"default"`
		Minimum *int64 `yaml:"minimum"`
		Maximum *int64 `yaml:"maximum"`
		Pattern string `yaml:"pattern"`
	} `yaml:"schema"`
}

type schemaDoc struct {
	Ref        string               `yaml:"$ref"`
	AllOf      []schemaDoc          `yaml:"allOf"`
	Enum       []string             `yaml:"enum"`
	Required   []string             `yaml:"required"`
	Properties map[string]yaml.Node `yaml:"properties"`
	ErrorTable []struct {
		Code        string `yaml:"code"`
		Status      int    `yaml:"status"`
		Retriable   bool   `yaml:"retriable"`
		Description string `yaml:"description"`
	} `yaml:"x-error-table"`
}

// httpMethods are the keys of an OpenAPI path item that are operations.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// pathItemFields are the other keys a path item may have.
var pathItemFields = []string{"$ref", "summary", "description", "servers", "parameters"}

// loadSpec reads openapi.yaml from the repository root, checks that the copy
// embedded in package sluice is the same file, and parses it.
func loadSpec(t *testing.T) *openAPIDoc {
	t.Helper()
	raw, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatalf("reading %s: %v", specPath, err)
	}
	if !bytes.Equal(raw, sluice.OpenAPI) {
		t.Fatalf("sluice.OpenAPI (%d bytes) differs from %s (%d bytes); the embedded copy is stale: rebuild", len(sluice.OpenAPI), specPath, len(raw))
	}
	var doc openAPIDoc
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("parsing %s: %v", specPath, err)
	}
	if len(doc.Paths) == 0 {
		t.Fatalf("%s has no paths", specPath)
	}
	return &doc
}

// operations returns the spec's operations keyed "METHOD /path".
func (d *openAPIDoc) operations(t *testing.T) map[string]operationDoc {
	t.Helper()
	out := map[string]operationDoc{}
	for path, item := range d.Paths {
		for key, node := range item {
			switch {
			case slices.Contains(httpMethods, key):
				var op operationDoc
				if err := node.Decode(&op); err != nil {
					t.Fatalf("%s %s: %v", strings.ToUpper(key), path, err)
				}
				out[strings.ToUpper(key)+" "+path] = op
			case slices.Contains(pathItemFields, key), strings.HasPrefix(key, "x-"):
			default:
				t.Errorf("openapi.yaml: path %s has key %q, which is neither an HTTP method nor a path item field", path, key)
			}
		}
	}
	return out
}

// response resolves a response that may be a $ref to components/responses.
func (d *openAPIDoc) response(t *testing.T, r responseDoc) responseDoc {
	t.Helper()
	const prefix = "#/components/responses/"
	if r.Ref == "" {
		return r
	}
	name, ok := strings.CutPrefix(r.Ref, prefix)
	res, found := d.Components.Responses[name]
	if !ok || !found {
		t.Fatalf("openapi.yaml: response $ref %q does not resolve", r.Ref)
	}
	return res
}

// parameter finds an operation's parameter by name, resolving $refs.
func (d *openAPIDoc) parameter(t *testing.T, op operationDoc, name string) parameterDoc {
	t.Helper()
	const prefix = "#/components/parameters/"
	for _, p := range op.Parameters {
		if p.Ref != "" {
			ref, ok := strings.CutPrefix(p.Ref, prefix)
			res, found := d.Components.Parameters[ref]
			if !ok || !found {
				t.Fatalf("openapi.yaml: parameter $ref %q does not resolve", p.Ref)
			}
			p = res
		}
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("openapi.yaml: the operation has no parameter %q", name)
	return parameterDoc{}
}

// objectShape returns the property names and required list of an object
// schema, merging its allOf members (each inline or a $ref to
// components/schemas), as a Go struct embedding another is encoded.
func (d *openAPIDoc) objectShape(t *testing.T, s schemaDoc) (props, required []string) {
	t.Helper()
	const prefix = "#/components/schemas/"
	if s.Ref != "" {
		name, ok := strings.CutPrefix(s.Ref, prefix)
		res, found := d.Components.Schemas[name]
		if !ok || !found {
			t.Fatalf("openapi.yaml: schema $ref %q does not resolve", s.Ref)
		}
		s = res
	}
	for n := range s.Properties {
		props = append(props, n)
	}
	required = append(required, s.Required...)
	for _, sub := range s.AllOf {
		p, r := d.objectShape(t, sub)
		props = append(props, p...)
		required = append(required, r...)
	}
	return props, required
}

// routerRoutes walks the gateway's router and returns "METHOD /pattern" for
// every route except the dashboard's files under /ui/.
func routerRoutes(t *testing.T) map[string]bool {
	t.Helper()
	// Routes reads only g.log and g.metrics and takes method values; no
	// handler runs.
	g := &Gateway{
		log:     slog.New(slog.DiscardHandler),
		metrics: newGatewayMetrics(),
	}
	rt, ok := g.Routes().(chi.Routes)
	if !ok {
		t.Fatalf("Routes returned %T, not a chi.Routes", g.Routes())
	}
	out := map[string]bool{}
	err := chi.Walk(rt, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if route == "/ui" || strings.HasPrefix(route, "/ui/") {
			return nil // the dashboard's files, not part of the API (GET / documents them)
		}
		out[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatalf("walking the router: %v", err)
	}
	if len(out) == 0 {
		t.Fatal("the router has no routes")
	}
	return out
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadSpec(t)
	routes := routerRoutes(t)
	ops := doc.operations(t)

	var missing, extra []string
	for r := range routes {
		if _, ok := ops[r]; !ok {
			missing = append(missing, r)
		}
	}
	for op := range ops {
		if !routes[op] {
			extra = append(extra, op)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	var msg strings.Builder
	if len(missing) > 0 {
		fmt.Fprintf(&msg, "\nroutes the router serves that openapi.yaml does not document:\n\t%s", strings.Join(missing, "\n\t"))
	}
	if len(extra) > 0 {
		fmt.Fprintf(&msg, "\noperations openapi.yaml documents that the router does not serve:\n\t%s", strings.Join(extra, "\n\t"))
	}
	if msg.Len() > 0 {
		t.Fatalf("openapi.yaml and Gateway.Routes disagree (%d routes, %d documented operations):%s", len(routes), len(ops), msg.String())
	}
	// Every /v1/ operation states the authorization it needs.
	for name, op := range ops {
		if strings.Contains(name, " /v1/") && op.ACL == "" {
			t.Errorf("openapi.yaml: %s has no x-acl", name)
		}
	}
}

func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadSpec(t)
	codeSchema, ok := doc.Components.Schemas["ErrorCode"]
	if !ok {
		t.Fatal("openapi.yaml has no components/schemas/ErrorCode")
	}

	want := map[string]bool{}
	for _, c := range api.Codes() {
		want[string(c)] = true
	}
	diffSets := func(what string, got []string) {
		t.Helper()
		seen := map[string]bool{}
		var dup, unknown, missing []string
		for _, c := range got {
			if seen[c] {
				dup = append(dup, c)
			}
			seen[c] = true
			if !want[c] {
				unknown = append(unknown, c)
			}
		}
		for c := range want {
			if !seen[c] {
				missing = append(missing, c)
			}
		}
		sort.Strings(missing)
		var msg strings.Builder
		if len(missing) > 0 {
			fmt.Fprintf(&msg, "\n\tin the error table, not documented: %v", missing)
		}
		if len(unknown) > 0 {
			fmt.Fprintf(&msg, "\n\tdocumented, not in the error table: %v", unknown)
		}
		if len(dup) > 0 {
			fmt.Fprintf(&msg, "\n\tlisted twice: %v", dup)
		}
		if msg.Len() > 0 {
			t.Errorf("%s disagrees with api.Codes():%s", what, msg.String())
		}
	}
	diffSets("ErrorCode.enum", codeSchema.Enum)

	var tableCodes []string
	for _, row := range codeSchema.ErrorTable {
		tableCodes = append(tableCodes, row.Code)
		if !want[row.Code] {
			continue // reported by diffSets
		}
		spec := api.Lookup(api.Code(row.Code))
		if row.Status != spec.Status || row.Retriable != spec.Retriable || row.Description != spec.Description {
			t.Errorf("ErrorCode.x-error-table row %s = {status %d, retriable %t, %q}; api.Lookup says {status %d, retriable %t, %q}",
				row.Code, row.Status, row.Retriable, row.Description, spec.Status, spec.Retriable, spec.Description)
		}
	}
	diffSets("ErrorCode.x-error-table", tableCodes)

	// Each response that lists error codes must list codes of its own status.
	check := func(where, status string, r responseDoc) {
		t.Helper()
		st, err := strconv.Atoi(status)
		if err != nil {
			t.Errorf("%s: response key %q is not a status", where, status)
			return
		}
		for _, c := range r.ErrorCodes {
			if !want[c] {
				t.Errorf("%s %s: x-error-codes lists %s, which is not in the error table", where, status, c)
				continue
			}
			if got := api.Lookup(api.Code(c)).Status; got != st {
				t.Errorf("%s: x-error-codes lists %s under %s, but its status is %d", where, c, status, got)
			}
		}
		if len(r.ErrorCodes) > 0 && st < 400 {
			t.Errorf("%s: a %s response lists error codes", where, status)
		}
	}
	ops := doc.operations(t)
	for name, op := range ops {
		for status, r := range op.Responses {
			check(name, status, doc.response(t, r))
		}
	}
}

// jsonFields returns the JSON names of t's fields (embedded structs
// flattened) and which of them are omitempty.
func jsonFields(t reflect.Type) (names []string, optional map[string]bool) {
	optional = map[string]bool{}
	for f := range t.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			n, o := jsonFields(f.Type)
			names = append(names, n...)
			for k := range o {
				optional[k] = true
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
		if slices.Contains(strings.Split(opts, ","), "omitempty") {
			optional[name] = true
		}
	}
	return names, optional
}

func TestOpenAPIWireShapes(t *testing.T) {
	doc := loadSpec(t)
	tests := []struct {
		v      any
		schema string
		// checkRequired: the schema's required list must be exactly the
		// fields that are always encoded (response shapes; request shapes
		// document what a client must send instead).
		checkRequired bool
		// omit lists Go fields the schema leaves out on purpose.
		omit []string
	}{
		{api.ClusterInfo{}, "ClusterInfo", true, nil},
		{api.BrokerStatus{}, "BrokerStatus", true, nil},
		{api.PartitionHealth{}, "PartitionHealth", true, nil},
		{api.FollowerPosition{}, "FollowerPosition", true, nil},
		{api.CreateTopicRequest{}, "CreateTopicRequest", false, nil},
		{api.AlterTopicConfigRequest{}, "AlterTopicConfigRequest", false, nil},
		{api.Topic{}, "Topic", true, nil},
		{api.TopicList{}, "TopicList", true, nil},
		{api.PartitionInfo{}, "PartitionInfo", true, nil},
		{api.ProduceRecord{}, "ProduceRecord", false, nil},
		{api.ProduceRequest{}, "ProduceRequest", false, nil},
		{api.RecordOffset{}, "RecordOffset", true, nil},
		// A successful produce never carries error; a failed one is ProduceErrorBody.
		{api.ProduceResponse{}, "ProduceResponse", true, []string{"error"}},
		{api.ProduceResponse{}, "ProduceErrorBody", false, nil},
		{api.FetchedRecord{}, "FetchedRecord", true, nil},
		{api.FetchResponse{}, "FetchResponse", true, nil},
		{api.Credit{}, "Credit", false, nil},
		{api.InitProducerRequest{}, "InitProducerRequest", false, nil},
		{api.ProducerIdentity{}, "ProducerIdentity", true, nil},
		{api.ErrorBody{}, "ErrorBody", true, nil},
		{api.ErrorDetail{}, "ErrorDetail", true, nil},
		{brokerapi.OffsetsResult{}, "Offsets", true, nil},
		{api.TopicPartition{}, "TopicPartition", true, nil},
		{api.JoinGroupRequest{}, "JoinGroupRequest", false, nil},
		{api.JoinGroupResponse{}, "JoinGroupResponse", true, nil},
		{api.GroupRecord{}, "GroupRecord", true, nil},
		{api.GroupPollResponse{}, "GroupPollResponse", true, nil},
		{api.HeartbeatResponse{}, "HeartbeatResponse", true, nil},
		{api.PartitionOffset{}, "PartitionOffset", true, nil},
		{api.CommitRequest{}, "CommitRequest", false, nil},
		{api.CommitResponse{}, "CommitResponse", true, nil},
		{api.ResetOffsetsRequest{}, "ResetOffsetsRequest", false, nil},
		{api.GroupMember{}, "GroupMember", true, nil},
		{api.GroupPartitionLag{}, "GroupPartitionLag", true, nil},
		{api.GroupDescription{}, "GroupDescription", true, nil},
		{api.GroupSummary{}, "GroupSummary", true, nil},
		{api.GroupList{}, "GroupList", true, nil},
		{api.CreateTokenRequest{}, "CreateTokenRequest", false, nil},
		{api.CreateSessionRequest{}, "CreateSessionRequest", false, nil},
		{api.Session{}, "Session", true, nil},
		{api.Token{}, "Token", true, nil},
		{api.TokenList{}, "TokenList", true, nil},
		{api.ACL{}, "ACL", false, nil},
		{api.ACLList{}, "ACLList", true, nil},
		{api.Quota{}, "Quota", false, nil},
		{api.QuotaList{}, "QuotaList", true, nil},
		{api.PushConfig{}, "PushConfig", false, nil},
		{api.PushConfig{}, "PushCreateRequest", false, nil},
		{api.PushBatch{}, "PushBatch", false, nil},
		{api.PushRetry{}, "PushRetry", false, nil},
		{api.PushDeadLetter{}, "PushDeadLetter", false, nil},
		{api.PushRate{}, "PushRate", false, nil},
		{api.PushOutage{}, "PushOutage", false, nil},
		{api.PushSubscription{}, "PushSubscription", true, nil},
		{api.PushList{}, "PushList", true, nil},
		{api.PushPartition{}, "PushPartition", true, nil},
		{api.PushStatus{}, "PushStatus", true, nil},
		{api.PushDelivery{}, "PushDelivery", true, nil},
		{api.PushDeliveries{}, "PushDeliveries", true, nil},
		{api.PushStateRequest{}, "PushStateRequest", false, nil},
		{api.PushSeekRequest{}, "PushSeekRequest", false, nil},
		{api.PushRotateRequest{}, "PushRotateRequest", false, nil},
		// The answer of POST /v1/push/{name}/test, as served and as read.
		{push.TestResult{}, "PushTestResult", true, nil},
		{client.PushTestResult{}, "PushTestResult", true, nil},
		// The frames of a WebSocket group member.
		{wsRecordsFrame{}, "GroupRecordsFrame", true, nil},
		{wsAssignmentFrame{}, "HeartbeatResponse", true, nil},
		{wsCommittedFrame{}, "GroupCommittedFrame", true, nil},
		{wsCommitErrorFrame{}, "GroupCommitErrorFrame", true, nil},
		{wsGroupFrame{}, "GroupClientFrame", false, nil},
	}
	for _, tt := range tests {
		typ := reflect.TypeOf(tt.v)
		t.Run(tt.schema, func(t *testing.T) {
			s, ok := doc.Components.Schemas[tt.schema]
			if !ok {
				t.Fatalf("openapi.yaml has no schema %s (for %s)", tt.schema, typ)
			}
			names, optional := jsonFields(typ)
			var goFields, goRequired []string
			for _, n := range names {
				if slices.Contains(tt.omit, n) {
					continue
				}
				goFields = append(goFields, n)
				if !optional[n] {
					goRequired = append(goRequired, n)
				}
			}
			specFields, specRequired := doc.objectShape(t, s)
			sort.Strings(goFields)
			sort.Strings(specFields)
			if !slices.Equal(goFields, specFields) {
				t.Errorf("schema %s has properties %v; %s encodes %v", tt.schema, specFields, typ, goFields)
			}
			if tt.checkRequired {
				req := specRequired
				sort.Strings(req)
				sort.Strings(goRequired)
				if !slices.Equal(req, goRequired) {
					t.Errorf("schema %s requires %v; %s always encodes %v", tt.schema, req, typ, goRequired)
				}
			}
		})
	}

	t.Run("TopicConfigs", func(t *testing.T) {
		s := doc.Components.Schemas["TopicConfigs"]
		var got []string
		for n := range s.Properties {
			got = append(got, n)
		}
		sort.Strings(got)
		if want := api.ConfigNames(); !slices.Equal(got, want) {
			t.Errorf("schema TopicConfigs documents %v; api.ConfigNames() is %v", got, want)
		}
	})
}

func TestOpenAPIParameterBounds(t *testing.T) {
	doc := loadSpec(t)
	ops := doc.operations(t)
	op := func(key string) operationDoc {
		o, ok := ops[key]
		if !ok {
			t.Fatalf("openapi.yaml has no operation %s", key)
		}
		return o
	}
	const (
		records = "GET /v1/topics/{topic}/partitions/{partition}/records"
		ws      = "GET /v1/topics/{topic}/partitions/{partition}/ws"
		produce = "POST /v1/topics/{topic}/records"
		poll    = "GET /v1/groups/{group}/members/{member}/records"
		groupWS = "GET /v1/groups/{group}/ws"
	)
	tests := []struct {
		op, name string
		def      any
		lo, hi   int64
	}{
		{records, "max_records", defaultMaxRecords, 1, maxMaxRecords},
		{records, "max_bytes", defaultMaxBytes, 1, maxMaxBytes},
		{records, "max_wait_ms", 0, 0, maxWait.Milliseconds()},
		{ws, "max_bytes", defaultMaxBytes, 1, maxMaxBytes},
		{ws, "credit", 0, 0, maxCredit},
		{produce, "timeout_ms", defaultProduceTimeout.Milliseconds(), 1, 300_000},
		{poll, "max_records", defaultMaxRecords, 1, maxMaxRecords},
		{poll, "max_bytes", defaultMaxBytes, 1, maxMaxBytes},
		{poll, "max_wait_ms", 0, 0, maxWait.Milliseconds()},
		{groupWS, "credit", 0, 0, maxCredit},
		{groupWS, "session_timeout_ms", offsets.DefaultSessionTimeout.Milliseconds(), offsets.MinSessionTimeout.Milliseconds(), offsets.MaxSessionTimeout.Milliseconds()},
	}
	for _, tt := range tests {
		p := doc.parameter(t, op(tt.op), tt.name)
		s := p.Schema
		if s.Minimum == nil || s.Maximum == nil || *s.Minimum != tt.lo || *s.Maximum != tt.hi || fmt.Sprint(s.Default) != fmt.Sprint(tt.def) {
			t.Errorf("%s ?%s: documented default %v, range [%s, %s]; the code uses default %v, range [%d, %d]",
				tt.op, tt.name, s.Default, ptrString(s.Minimum), ptrString(s.Maximum), tt.def, tt.lo, tt.hi)
		}
	}
	if d := doc.parameter(t, op(records), "offset").Schema.Default; d != "earliest" {
		t.Errorf("offset: documented default %v; parseFetchParams defaults to earliest", d)
	}
	if d := doc.parameter(t, op(produce), "acks").Schema.Default; d != "all" {
		t.Errorf("acks: documented default %v; handleProduce defaults to all", d)
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

// propertyDoc is the part of a schema property the bounds checks read.
type propertyDoc struct {
	Default   any      `yaml:"default"`
	Minimum   *int64   `yaml:"minimum"`
	Maximum   *int64   `yaml:"maximum"`
	MinItems  *int64   `yaml:"minItems"`
	MaxItems  *int64   `yaml:"maxItems"`
	MaxLength *int64   `yaml:"maxLength"`
	Enum      []string `yaml:"enum"`
	Pattern   string   `yaml:"pattern"`
}

// property finds property name of schema, in its own properties or its
// allOf members (inline or $refs).
func (d *openAPIDoc) property(t *testing.T, schema, name string) propertyDoc {
	t.Helper()
	const prefix = "#/components/schemas/"
	var find func(s schemaDoc) (yaml.Node, bool)
	find = func(s schemaDoc) (yaml.Node, bool) {
		if ref, ok := strings.CutPrefix(s.Ref, prefix); ok {
			s = d.Components.Schemas[ref]
		}
		if n, ok := s.Properties[name]; ok {
			return n, true
		}
		for _, sub := range s.AllOf {
			if n, ok := find(sub); ok {
				return n, true
			}
		}
		return yaml.Node{}, false
	}
	s, ok := d.Components.Schemas[schema]
	if !ok {
		t.Fatalf("openapi.yaml has no schema %s", schema)
	}
	n, ok := find(s)
	if !ok {
		t.Fatalf("openapi.yaml: schema %s has no property %s", schema, name)
	}
	var p propertyDoc
	if err := n.Decode(&p); err != nil {
		t.Fatalf("openapi.yaml: %s.%s: %v", schema, name, err)
	}
	return p
}

// TestOpenAPIPushSettings checks the documented bounds, defaults and
// choices of a push subscription's settings against push.Normalize: the
// bounds are accepted, one past them is refused, 0 takes the documented
// default, and every documented choice (and no other) is accepted.
func TestOpenAPIPushSettings(t *testing.T) {
	doc := loadSpec(t)
	base := func() api.PushConfig {
		return api.PushConfig{Name: "orders-hook", Topics: []string{"orders"}, Endpoint: "https://hooks.example.com/orders"}
	}
	normalize := func(change func(*api.PushConfig)) (api.PushConfig, error) {
		c := base()
		change(&c)
		return push.Normalize(c)
	}

	numbers := []struct {
		schema, name string
		set          func(c *api.PushConfig, v int64)
		get          func(c api.PushConfig) int64
	}{
		{"PushConfig", "max_in_flight",
			func(c *api.PushConfig, v int64) { c.Ordering, c.MaxInFlight = api.PushOrderNone, int(v) },
			func(c api.PushConfig) int64 { return int64(c.MaxInFlight) }},
		{"PushConfig", "timeout_ms",
			func(c *api.PushConfig, v int64) { c.TimeoutMs = v },
			func(c api.PushConfig) int64 { return c.TimeoutMs }},
		{"PushBatch", "max_records",
			func(c *api.PushConfig, v int64) { c.Batch.MaxRecords = int(v) },
			func(c api.PushConfig) int64 { return int64(c.Batch.MaxRecords) }},
		{"PushBatch", "max_bytes",
			func(c *api.PushConfig, v int64) { c.Batch.MaxBytes = v },
			func(c api.PushConfig) int64 { return c.Batch.MaxBytes }},
		{"PushBatch", "max_wait_ms",
			func(c *api.PushConfig, v int64) { c.Batch.MaxWaitMs = v },
			func(c api.PushConfig) int64 { return c.Batch.MaxWaitMs }},
		{"PushRetry", "min_backoff_ms",
			func(c *api.PushConfig, v int64) { c.Retry.MinBackoffMs = v },
			func(c api.PushConfig) int64 { return c.Retry.MinBackoffMs }},
		{"PushRetry", "max_backoff_ms",
			// The lowest bound is min_backoff_ms: make that 1.
			func(c *api.PushConfig, v int64) { c.Retry.MinBackoffMs, c.Retry.MaxBackoffMs = 1, v },
			func(c api.PushConfig) int64 { return c.Retry.MaxBackoffMs }},
		{"PushRetry", "max_attempts",
			func(c *api.PushConfig, v int64) { c.Retry.MaxAttempts = int(v) },
			func(c api.PushConfig) int64 { return int64(c.Retry.MaxAttempts) }},
		{"PushRetry", "retry_after_max_ms",
			func(c *api.PushConfig, v int64) { c.Retry.RetryAfterMaxMs = v },
			func(c api.PushConfig) int64 { return c.Retry.RetryAfterMaxMs }},
		{"PushRate", "max_per_second",
			func(c *api.PushConfig, v int64) { c.Rate.MaxPerSecond = float64(v) },
			func(c api.PushConfig) int64 { return int64(c.Rate.MaxPerSecond) }},
		{"PushOutage", "disable_after_ms",
			func(c *api.PushConfig, v int64) { c.Outage.DisableAfterMs = v },
			func(c api.PushConfig) int64 { return c.Outage.DisableAfterMs }},
	}
	for _, tt := range numbers {
		t.Run(tt.schema+"."+tt.name, func(t *testing.T) {
			p := doc.property(t, tt.schema, tt.name)
			if p.Minimum == nil || p.Default == nil {
				t.Fatalf("documents minimum %s and default %v; both are needed", ptrString(p.Minimum), p.Default)
			}
			try := func(v int64) error {
				_, err := normalize(func(c *api.PushConfig) { tt.set(c, v) })
				return err
			}
			lo := *p.Minimum
			if err := try(lo); err != nil {
				t.Errorf("the documented minimum %d is refused: %v", lo, err)
			}
			below := lo - 1
			if below == 0 {
				below = -1 // 0 means the default
			}
			if try(below) == nil {
				t.Errorf("%d, below the documented minimum %d, is accepted", below, lo)
			}
			if p.Maximum == nil {
				if try(math.MaxInt32) != nil {
					t.Errorf("no maximum is documented, but %d is refused", math.MaxInt32)
				}
			} else {
				hi := *p.Maximum
				if err := try(hi); err != nil {
					t.Errorf("the documented maximum %d is refused: %v", hi, err)
				}
				if try(hi+1) == nil {
					t.Errorf("%d, past the documented maximum %d, is accepted", hi+1, hi)
				}
			}
			c, err := normalize(func(c *api.PushConfig) { tt.set(c, 0) })
			if err != nil {
				t.Fatalf("0 (the default) is refused: %v", err)
			}
			if got := tt.get(c); fmt.Sprint(p.Default) != strconv.FormatInt(got, 10) {
				t.Errorf("documented default %v; 0 normalizes to %d", p.Default, got)
			}
		})
	}

	choices := []struct {
		name string
		set  func(c *api.PushConfig, v string)
		get  func(c api.PushConfig) string
		enum []string // the choices api/push.go names; nil: a free string
	}{
		{"format", func(c *api.PushConfig, v string) { c.Format = v }, func(c api.PushConfig) string { return c.Format },
			[]string{api.PushFormatBinary, api.PushFormatStructured, api.PushFormatJSON, api.PushFormatRaw}},
		{"ordering", func(c *api.PushConfig, v string) { c.Ordering = v }, func(c api.PushConfig) string { return c.Ordering },
			[]string{api.PushOrderPartition, api.PushOrderKey, api.PushOrderNone}},
		{"start", func(c *api.PushConfig, v string) { c.Start = v }, func(c api.PushConfig) string { return c.Start }, nil},
		{"type", func(c *api.PushConfig, v string) { c.Type = v }, func(c api.PushConfig) string { return c.Type }, nil},
	}
	for _, tt := range choices {
		t.Run("PushConfig."+tt.name, func(t *testing.T) {
			p := doc.property(t, "PushConfig", tt.name)
			if !slices.Equal(p.Enum, tt.enum) {
				t.Errorf("documents the choices %v; api/push.go names %v", p.Enum, tt.enum)
			}
			for _, v := range p.Enum {
				if _, err := normalize(func(c *api.PushConfig) { tt.set(c, v) }); err != nil {
					t.Errorf("the documented choice %q is refused: %v", v, err)
				}
			}
			if len(p.Enum) > 0 {
				if _, err := normalize(func(c *api.PushConfig) { tt.set(c, "undocumented") }); err == nil {
					t.Errorf("%q, not among the documented %v, is accepted", "undocumented", p.Enum)
				}
			}
			c, err := normalize(func(c *api.PushConfig) { tt.set(c, "") })
			if err != nil {
				t.Fatalf("absent (the default) is refused: %v", err)
			}
			if got := tt.get(c); fmt.Sprint(p.Default) != got {
				t.Errorf("documented default %v; absent normalizes to %q", p.Default, got)
			}
		})
	}

	t.Run("lengths", func(t *testing.T) {
		typ := doc.property(t, "PushConfig", "type")
		endpoint := doc.property(t, "PushConfig", "endpoint")
		topics := doc.property(t, "PushConfig", "topics")
		if typ.MaxLength == nil || endpoint.MaxLength == nil || topics.MinItems == nil || topics.MaxItems == nil {
			t.Fatal("type and endpoint document maxLength, topics minItems and maxItems")
		}
		url := func(n int64) string {
			const prefix = "https://hooks.example.com/"
			return prefix + strings.Repeat("a", int(n)-len(prefix))
		}
		names := func(n int64) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = "t" + strconv.Itoa(i)
			}
			return out
		}
		tests := []struct {
			what   string
			set    func(c *api.PushConfig)
			accept bool
		}{
			{"type at maxLength", func(c *api.PushConfig) { c.Type = strings.Repeat("t", int(*typ.MaxLength)) }, true},
			{"type past maxLength", func(c *api.PushConfig) { c.Type = strings.Repeat("t", int(*typ.MaxLength)+1) }, false},
			{"endpoint at maxLength", func(c *api.PushConfig) { c.Endpoint = url(*endpoint.MaxLength) }, true},
			{"endpoint past maxLength", func(c *api.PushConfig) { c.Endpoint = url(*endpoint.MaxLength + 1) }, false},
			{"topics at minItems", func(c *api.PushConfig) { c.Topics = names(*topics.MinItems) }, true},
			{"topics below minItems", func(c *api.PushConfig) { c.Topics = names(*topics.MinItems - 1) }, false},
			{"topics at maxItems", func(c *api.PushConfig) { c.Topics = names(*topics.MaxItems) }, true},
			{"topics past maxItems", func(c *api.PushConfig) { c.Topics = names(*topics.MaxItems + 1) }, false},
		}
		for _, tt := range tests {
			if _, err := normalize(tt.set); (err == nil) != tt.accept {
				t.Errorf("%s: accepted %t (%v), documented %t", tt.what, err == nil, err, tt.accept)
			}
		}
	})

	t.Run("name", func(t *testing.T) {
		p := doc.property(t, "PushConfig", "name")
		for path, item := range doc.Paths {
			if !strings.HasPrefix(path, "/v1/push/{name}") {
				continue
			}
			var params []parameterDoc
			node := item["parameters"]
			if err := node.Decode(&params); err != nil {
				t.Fatalf("%s: parameters: %v", path, err)
			}
			param := doc.parameter(t, operationDoc{Parameters: params}, "name")
			if param.In != "path" || param.Schema.Pattern != p.Pattern {
				t.Errorf("%s: the name parameter (in %s) has pattern %q; PushConfig.name's is %q", path, param.In, param.Schema.Pattern, p.Pattern)
			}
		}
		re, err := regexp.Compile(p.Pattern)
		if err != nil {
			t.Fatalf("PushConfig.name's pattern %q: %v", p.Pattern, err)
		}
		for _, name := range []string{"a", "orders-hook", "A.b_c-9", strings.Repeat("n", 200), strings.Repeat("n", 201), "", "a/b", "a b", "ü"} {
			if documented, valid := re.MatchString(name), push.ValidateName(name) == nil; documented != valid {
				t.Errorf("name %q: the pattern matches %t, ValidateName accepts %t", name, documented, valid)
			}
		}
	})

	t.Run("states", func(t *testing.T) {
		if got, want := doc.property(t, "PushStateRequest", "state").Enum, []string{api.PushActive, api.PushPaused}; !slices.Equal(got, want) {
			t.Errorf("PushStateRequest.state documents %v; handlePushState takes %v", got, want)
		}
		got := doc.property(t, "PushSubscription", "state").Enum
		want := []string{api.PushActive, api.PushPaused, api.PushBackingOff, api.PushDisabled}
		if !slices.Equal(got, want) {
			t.Errorf("PushSubscription.state documents %v; the states are %v", got, want)
		}
	})

	t.Run("grace_seconds", func(t *testing.T) {
		p := doc.property(t, "PushRotateRequest", "grace_seconds")
		def, hi := int64(push.DefaultRotationGrace/time.Second), int64(push.MaxRotationGrace/time.Second)
		if p.Minimum == nil || p.Maximum == nil || *p.Minimum != 0 || *p.Maximum != hi || fmt.Sprint(p.Default) != strconv.FormatInt(def, 10) {
			t.Errorf("documented default %v, range [%s, %s]; handlePushRotate uses default %d, range [0, %d]",
				p.Default, ptrString(p.Minimum), ptrString(p.Maximum), def, hi)
		}
	})
}
