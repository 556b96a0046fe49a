package api

import (
	"cmp"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// openAPI is the part of openapi.yaml the tests check.
type openAPI struct {
	OpenAPI    string                          `yaml:"openapi"`
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components map[string]map[string]yaml.Node `yaml:"components"`
	Security   []map[string][]string           `yaml:"security"`
}

type operation struct {
	Security *[]map[string][]string `yaml:"security"`
}

func loadOpenAPI(t *testing.T) (*openAPI, []byte) {
	t.Helper()
	raw, err := os.ReadFile("openapi.yaml")
	require.NoError(t, err)
	var doc openAPI
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), "an OpenAPI 3 document")
	return &doc, raw
}

// TestOpenAPIMatchesRoutes keeps openapi.yaml true: it documents exactly
// the routes the server registers, and exactly the open ones skip the
// bearer token.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	var documented, served []string
	open := map[string]bool{}
	for path, item := range doc.Paths {
		for method, node := range item {
			if method == "parameters" {
				continue
			}
			op := strings.ToUpper(method) + " " + path
			documented = append(documented, op)
			var o operation
			require.NoError(t, node.Decode(&o), op)
			open[op] = o.Security != nil && len(*o.Security) == 0
		}
	}
	for _, rt := range routes {
		served = append(served, rt.pattern())
		require.Equal(t, rt.open, open[rt.pattern()], "%s: open in the router and the document alike", rt.pattern())
	}
	slices.Sort(documented)
	slices.Sort(served)
	require.Equal(t, served, documented, "openapi.yaml and the route table disagree")
	require.NotEmpty(t, doc.Security, "routes need a token unless they say otherwise")
}

// TestOpenAPIRefsResolve checks that every $ref names a component the
// document defines.
func TestOpenAPIRefsResolve(t *testing.T) {
	t.Parallel()
	doc, raw := loadOpenAPI(t)
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(raw, &root))
	var refs []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for i := 0; i < len(n.Content); i++ {
			c := n.Content[i]
			if n.Kind == yaml.MappingNode && i%2 == 0 && c.Value == "$ref" {
				refs = append(refs, n.Content[i+1].Value)
			}
			walk(c)
		}
	}
	walk(&root)
	require.NotEmpty(t, refs)
	for _, ref := range refs {
		parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
		require.Len(t, parts, 2, ref)
		_, ok := doc.Components[parts[0]][parts[1]]
		require.True(t, ok, "%s is not defined", ref)
	}
}

// TestOpenAPISchemasMatchTypes keeps the document's schemas true to what
// the handlers read and write: each names exactly the JSON fields of the Go
// type behind it, so a field added to an answer is documented too.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	types := map[string]reflect.Type{
		"Request":      reflect.TypeFor[notify.Request](),
		"Notification": reflect.TypeFor[notify.Notification](),
		"Attempt":      reflect.TypeFor[notify.Attempt](),
		"Endpoint":     reflect.TypeFor[endpoint.Endpoint](),
		"EndpointView": reflect.TypeFor[endpoint.View](),
		"TopicStats":   reflect.TypeFor[store.TopicStats](),
		"PauseAnswer":  reflect.TypeFor[pauseAnswer](),
		"Pause":        reflect.TypeFor[client.Pause](),
		"Error":        reflect.TypeFor[Error](),
		"AckRequest":   reflect.TypeFor[ackRequest](),
		"NackRequest":  reflect.TypeFor[nackRequest](),
	}
	for name, typ := range types {
		t.Run(name, func(t *testing.T) {
			node, ok := doc.Components["schemas"][name]
			require.True(t, ok, "schema %s is not defined", name)
			var schema struct {
				Properties map[string]yaml.Node `yaml:"properties"`
			}
			require.NoError(t, node.Decode(&schema))
			var fields []string
			for f := range typ.Fields() {
				tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if tag != "-" && f.IsExported() {
					fields = append(fields, cmp.Or(tag, f.Name))
				}
			}
			slices.Sort(fields)
			require.Equal(t, fields, slices.Sorted(maps.Keys(schema.Properties)), "the fields of %s and schema %s", typ, name)
		})
	}
}

// TestErrorCodesDocumented: every error code in errors.go is in the
// OpenAPI document's list and in the package documentation's, which
// clients go by.
func TestErrorCodesDocumented(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	require.NoError(t, err)
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && strings.HasPrefix(vs.Names[0].Name, "Code") {
			code, err := strconv.Unquote(vs.Values[0].(*ast.BasicLit).Value)
			require.NoError(t, err)
			codes = append(codes, code)
		}
		return true
	})
	require.Contains(t, codes, CodeStaleReceipt)

	doc, _ := loadOpenAPI(t)
	var schema struct {
		Properties struct {
			Code struct {
				Enum []string `yaml:"enum"`
			} `yaml:"code"`
		} `yaml:"properties"`
	}
	node := doc.Components["schemas"]["Error"]
	require.NoError(t, node.Decode(&schema))
	require.ElementsMatch(t, codes, schema.Properties.Code.Enum, "errors.go and openapi.yaml's Error.code")

	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(src), "# Errors")
	require.True(t, ok)
	for _, code := range codes {
		require.Regexp(t, regexp.MustCompile(`\b`+code+`\b`), section, "doc.go's # Errors names %s", code)
	}
}
