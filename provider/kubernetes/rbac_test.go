package kubernetes

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPermissionsCoverTheCalls reads the package's own source for the requests it makes, a typed
// client's method on one of API's kinds (api.Pods(ns).Create(...)) and a subresource of a REST
// request (.Resource("pods")...SubResource("portforward") on a Post), and checks that
// Permissions lists each, and nothing it does not make.
func TestPermissionsCoverTheCalls(t *testing.T) {
	kinds := map[string]string{} // API method -> resource
	for m := range reflect.TypeFor[API]().Methods() {
		kinds[m.Name] = strings.ToLower(m.Name)
	}
	verbs := map[string]string{"Get": "get", "List": "list", "Watch": "watch", "Create": "create", "Delete": "delete", "Patch": "patch"}
	methods := map[string]string{"Get": "get", "Post": "create", "Put": "update", "Patch": "patch", "Delete": "delete"}

	made := map[string]bool{} // "resource verb"
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			// kind(...).Verb(...)
			if verb, ok := verbs[sel.Sel.Name]; ok {
				if inner, ok := sel.X.(*ast.CallExpr); ok {
					if isel, ok := inner.Fun.(*ast.SelectorExpr); ok {
						if res, ok := kinds[isel.Sel.Name]; ok {
							made[res+" "+verb] = true
						}
					}
				}
			}
			// ....Resource("r")...SubResource("s") on a request made by Post(), Get()...
			if sel.Sel.Name == "SubResource" && len(call.Args) == 1 {
				sub := stringLit(t, call.Args[0])
				var res, verb string
				for x := sel.X; ; {
					c, ok := x.(*ast.CallExpr)
					if !ok {
						break
					}
					s, ok := c.Fun.(*ast.SelectorExpr)
					if !ok {
						break
					}
					if s.Sel.Name == "Resource" && len(c.Args) == 1 {
						res = stringLit(t, c.Args[0])
					}
					if v, ok := methods[s.Sel.Name]; ok && len(c.Args) == 0 {
						verb = v
					}
					x = s.X
				}
				if res == "" || verb == "" {
					t.Errorf("%s: a SubResource(%q) request whose resource or method this test cannot read", fset.Position(call.Pos()), sub)
				}
				made[res+"/"+sub+" "+verb] = true
			}
			return true
		})
	}
	if len(made) == 0 {
		t.Fatal("found no request in the package's source: the test no longer reads the calls")
	}
	listed := map[string]bool{}
	for _, p := range Permissions() {
		for _, v := range p.Verbs {
			listed[p.Resource+" "+v] = true
		}
		if want := map[string]string{"networkpolicies": "networking.k8s.io"}[p.Resource]; p.Group != want {
			t.Errorf("Permissions: %s in group %q, want %q", p.Resource, p.Group, want)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(made)) {
		if !listed[k] {
			t.Errorf("the provider requests %s, which Permissions does not list", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(listed)) {
		if !made[k] {
			t.Errorf("Permissions lists %s, which the provider never requests", k)
		}
	}
}

func stringLit(t *testing.T, e ast.Expr) string {
	t.Helper()
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
