package agentenv_test

import (
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentenv/agentenv"

// TestRootImportsOnlyTheStandardLibrary keeps the vocabulary free of dependencies: every other
// package builds on it.
func TestRootImportsOnlyTheStandardLibrary(t *testing.T) {
	for _, p := range deps(t, ".") {
		if p != module {
			t.Errorf("the root package depends on %s", p)
		}
	}
}

// importRule is an arrow the design forbids: no package matching from may link (import
// directly or through others) a package that forbidden reports, for the reason why.
type importRule struct {
	from      []string // go list patterns
	forbidden func(dep string) bool
	why       string
}

// importRules are the import graph's rules. Each says in one sentence why it exists.
var importRules = []importRule{
	{
		from:      []string{"./cmd/agentenv"},
		forbidden: isTestKit,
		why:       "the binary users run links only what runs for them: an emulator, fake, test kit or browser driver would cost every build and blur which backend is real",
	},
	{
		from: []string{"./provider/..."},
		forbidden: func(dep string) bool {
			return within(dep, module) && dep != module && !within(dep, module+"/internal") && !within(dep, module+"/provider") && dep != module+"/images"
		},
		why: "providers are the floor of the house, beside images (the runtime image, built on the engine): one that imported deploy, task or the gateway would tie a backend to what is built on backends",
	},
	{
		from: []string{"./internal/..."},
		forbidden: func(dep string) bool {
			return within(dep, module) && dep != module && !within(dep, module+"/internal")
		},
		why: "internal holds the plumbing under everything: a package there that reached up (a test kit importing images or a wire package) would make every floor depend on the one above it",
	},
	{
		from:      []string{"./deploy", "./task", "./eval", "./explorer"},
		forbidden: func(dep string) bool { return within(dep, module+"/provider") },
		why:       "they reach every backend through the lifecycle manager's one door, so that every call is ledgered and a new provider changes nothing above it",
	},
	{
		from:      []string{"./explorer"},
		forbidden: func(dep string) bool { return dep == module+"/gateway" },
		why:       "the explorer reads what runs recorded (envproto's types); it serves no env",
	},
	{
		from:      []string{"./deploy"},
		forbidden: func(dep string) bool { return dep == "github.com/moby/moby/client" },
		why:       "deploy drives sandboxes through the lifecycle; only the docker providers and image builds talk to an engine",
	},
	{
		from:      []string{"./deploy", "./task", "./eval", "./explorer"},
		forbidden: func(dep string) bool { return within(dep, "go.temporal.io") },
		why:       "a group runs the same whichever runner carries it: only package temporal, behind eval.Remote, knows Temporal exists",
	},
}

// TestImportRules checks every rule against what the packages link today.
func TestImportRules(t *testing.T) {
	for _, r := range importRules {
		for _, from := range r.from {
			for _, bad := range r.violations(deps(t, from)) {
				t.Errorf("%s links %s, which is forbidden: %s", from, bad, r.why)
			}
		}
	}
}

// TestImportRulesCatchTheArrowsTheyForbid: each rule reports the import it exists to forbid,
// added to what its packages link today, so a rule cannot silently match nothing.
func TestImportRulesCatchTheArrowsTheyForbid(t *testing.T) {
	forbidden := []string{
		module + "/provider/modal/modalemu",
		module + "/deploy",
		module + "/images",
		module + "/provider/pgstore",
		module + "/gateway",
		"github.com/moby/moby/client",
		"go.temporal.io/sdk/client",
	}
	for i, r := range importRules {
		got := r.violations(append(deps(t, r.from...), forbidden[i]))
		if !slices.Equal(got, []string{forbidden[i]}) {
			t.Errorf("rule for %s with %s added reports %v, want exactly it", r.from, forbidden[i], got)
		}
	}
	for _, kit := range []string{module + "/provider/docker/dockertest", module + "/agent/model/modeltest", module + "/provider/providertest", module + "/internal/emuvm", "github.com/chromedp/chromedp", "go.temporal.io/sdk/testsuite", module + "/internal/temporalserver", module + "/internal/registryserver", module + "/internal/testproc", "github.com/distribution/distribution/v3/registry"} {
		if !isTestKit(kit) {
			t.Errorf("isTestKit(%s) = false", kit)
		}
	}
}

func (r importRule) violations(deps []string) []string {
	var out []string
	for _, d := range deps {
		if r.forbidden(d) {
			out = append(out, d)
		}
	}
	return out
}

// isTestKit reports whether dep exists for tests: this module's emulators (a path element
// ending in "emu", internal/emu*), test kits (ending in "test") and fakes, browser drivers,
// Temporal's test environment and server, and the kits that start the test servers (Temporal,
// the OCI registry) and the registry itself.
func isTestKit(dep string) bool {
	if within(dep, "github.com/chromedp") || within(dep, "go.temporal.io/sdk/testsuite") || within(dep, "go.temporal.io/server") ||
		within(dep, "github.com/distribution/distribution") {
		return true
	}
	if within(dep, module+"/internal/temporalserver") || within(dep, module+"/internal/registryserver") || within(dep, module+"/internal/testproc") {
		return true
	}
	if !within(dep, module) {
		return false
	}
	for _, el := range strings.Split(strings.TrimPrefix(dep, module), "/") {
		if strings.HasSuffix(el, "emu") || strings.HasPrefix(el, "emu") || strings.HasSuffix(el, "test") || strings.Contains(el, "fake") {
			return true
		}
	}
	return false
}

// within reports whether package p is root or below it.
func within(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// deps returns the packages that the packages matching patterns link, the standard library
// excepted, and the packages themselves; tests' imports are not among them.
func deps(t *testing.T, patterns ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, patterns...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// TestTheMapNamesEveryPackage: ARCHITECTURE.md names every package, by its path or, beside its
// parent, by its last element, so that the map matches the house.
func TestTheMapNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range deps(t, "./...") {
		if !within(p, module) || p == module {
			continue
		}
		rel := strings.TrimPrefix(p, module+"/")
		if !strings.Contains(string(doc), "`"+rel+"`") && !strings.Contains(string(doc), "`"+path.Base(rel)+"`") {
			t.Errorf("ARCHITECTURE.md does not name package %s", rel)
		}
	}
}

// TestTheReadmeMapNamesEveryFolder: README's short map names every top-level folder that holds
// a package, at the start of one of its lines ("eval/", "envsdk/, envproto/").
func TestTheReadmeMapNamesEveryFolder(t *testing.T) {
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "\nagentenv (root)")
	code, _, _ := strings.Cut(rest, "```")
	named := map[string]bool{}
	for _, line := range strings.Split(code, "\n") {
		for _, f := range strings.Fields(line) {
			if !strings.HasSuffix(strings.TrimSuffix(f, ","), "/") {
				break
			}
			top, _, _ := strings.Cut(f, "/")
			named[top] = true
		}
	}
	for _, p := range deps(t, "./...") {
		if !within(p, module) || p == module {
			continue
		}
		top, _, _ := strings.Cut(strings.TrimPrefix(p, module+"/"), "/")
		if top != "internal" && !named[top] {
			t.Errorf("README.md's map does not name the folder %s/ (package %s)", top, p)
			named[top] = true // once
		}
	}
}

// TestEveryPackageHasADocComment: a stranger finds their way by the package docs.
func TestEveryPackageHasADocComment(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Doc}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, doc, _ := strings.Cut(line, "|")
		if strings.TrimSpace(doc) == "" {
			t.Errorf("package %s has no doc comment", path)
		}
	}
}

// registryClients are the only packages that may import oras-go: package bundle owns the
// bundle format, the cache and the transfer, and the CLI names the credential store's flags.
var registryClients = []string{module + "/bundle", module + "/cmd/agentenv"}

// TestOnlyBundleReachesRegistries: registries are reached in one place, so that a second
// client of them (with its own cache, credentials or media types) cannot grow elsewhere.
func TestOnlyBundleReachesRegistries(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, bad := range registryImporters(string(out)) {
		t.Errorf("%s imports oras-go: only %v may (the bundle format, cache and transfer are package bundle's)", bad, registryClients)
	}
	if got := registryImporters(module + "/eval oras.land/oras-go/v2/content\n" + module + "/bundle oras.land/oras-go/v2\n"); !slices.Equal(got, []string{module + "/eval"}) {
		t.Errorf("registryImporters of eval importing oras = %v, want eval reported", got)
	}
}

// registryImporters returns the packages of a go list answer (a package and its imports per
// line) that import oras-go without being registryClients.
func registryImporters(list string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || slices.Contains(registryClients, f[0]) {
			continue
		}
		if slices.ContainsFunc(f[1:], func(dep string) bool { return within(dep, "oras.land") }) {
			out = append(out, f[0])
		}
	}
	return out
}
