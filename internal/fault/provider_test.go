package fault_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/fault"
)

func TestParseProviders(t *testing.T) {
	known := []string{"docker", "process"}
	plans, err := fault.ParseProviders("docker/create:2:error, docker/terminate:*:lost,process/exec:1:hang", known)
	if err != nil {
		t.Fatal(err)
	}
	if got := plans["docker"].Ops(); !slices.Equal(got, []string{"create", "terminate"}) || len(plans) != 2 {
		t.Errorf("plans = %v (docker's ops %v), want docker's create and terminate and process's exec", plans, got)
	}
	for _, c := range []struct{ spec, want string }{
		{"docker/craete:1:error", `docker/craete: unknown operation (did you mean "create"?) (want one of create, get, terminate,`},
		{"docker/explode:1:error", "unknown operation (want one of create,"},
		{"dokcer/create:1:error", `provider "dokcer" is not configured (did you mean "docker"?) (have docker, process)`},
		{"create:1:error", "want PROVIDER/OP:CALL:ACTION"},
		{"docker/create:0:error", "call must be a positive number or *"},
		{"docker/create:1:explode", "action must be error, hang, panic or lost"},
	} {
		if _, err := fault.ParseProviders(c.spec, known); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseProviders(%q) = %v, want an error naming %q", c.spec, err, c.want)
		}
	}
}

// TestREADMEListsEveryOperation: the README quotes the list of operations the parser checks
// (as `agentenv --help` does, from agentenv.Ops itself).
func TestREADMEListsEveryOperation(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "`AGENTENV_FAULTS` makes a provider misbehave")
	para, _, _ := strings.Cut(after, "\n\n")
	if !ok {
		t.Fatal("README has no AGENTENV_FAULTS paragraph")
	}
	_, ops, _ := strings.Cut(para, "operation (")
	ops, _, _ = strings.Cut(ops, ";")
	var listed []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(ops, -1) {
		listed = append(listed, m[1])
	}
	if !slices.Equal(listed, agentenv.Ops()) {
		t.Errorf("README lists the operations %v, want agentenv.Ops() %v", listed, agentenv.Ops())
	}
}
