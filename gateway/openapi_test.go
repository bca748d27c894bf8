package gateway

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-io/sluice"
	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/offsets"
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
