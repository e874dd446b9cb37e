package harbor

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
)

// rel strips the absolute test folder from an error's text, so expectations read as
// "testdata/bad/x/task.toml:4: ...".
func rel(t *testing.T, err error) string {
	t.Helper()
	wd, _ := os.Getwd()
	return strings.ReplaceAll(err.Error(), wd+string(filepath.Separator), "")
}

func TestLoadCorpus(t *testing.T) {
	type want struct {
		name, schema             string
		agent, verifier, build   time.Duration
		dockerfile, compose, img string
		cpus                     float64
		mem, storage             int
		internet                 bool
		steps, mcp               int
		expect                   string
		warnings                 []string
		check                    func(t *testing.T, task *Task)
	}
	df := "environment/Dockerfile"
	cases := map[string]want{
		"hello-file": {name: "agentenv/hello-file", schema: "1.1", agent: 120 * time.Second, verifier: time.Minute, build: 5 * time.Minute, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true,
			check: func(t *testing.T, task *Task) {
				if task.Instruction != "Create the file `/app/hello.txt` containing exactly the line `hello, harbor`.\n" {
					t.Errorf("instruction = %q", task.Instruction)
				}
				if task.Description != "Write a file with given content" || !reflect.DeepEqual(task.Keywords, []string{"trivial", "files"}) {
					t.Errorf("description, keywords = %q, %q", task.Description, task.Keywords)
				}
				if task.Metadata["difficulty"] != "easy" {
					t.Errorf("metadata = %v", task.Metadata)
				}
			}},
		"compose-volume": {name: "agentenv/compose-volume", schema: "1.4", agent: 2 * time.Minute, verifier: time.Minute, build: 5 * time.Minute, dockerfile: df, compose: "environment/docker-compose.yaml", cpus: 1, mem: 1024, storage: 10240, internet: true,
			check: func(t *testing.T, task *Task) {
				c := task.Environment.ComposeSpec
				if c == nil || !reflect.DeepEqual(c.Volumes, []string{"shared"}) || !reflect.DeepEqual(c.Services["main"].Volumes, []string{"shared:/shared:ro"}) {
					t.Fatalf("compose = %+v", c)
				}
			}},
		"prebuilt-image": {name: "prebuilt-image", schema: "1.2", agent: time.Minute, verifier: DefaultVerifierTimeout, build: DefaultBuildTimeout, img: "agentenv-debian:bookworm", cpus: 1, mem: 512, storage: 10240, internet: true},
		"compose-postgres": {name: "agentenv/compose-postgres", schema: "1.3", agent: 5 * time.Minute, verifier: 2 * time.Minute, build: 10 * time.Minute, dockerfile: df, compose: "environment/docker-compose.yaml", cpus: 1, mem: 1024, storage: 10240, internet: true,
			check: func(t *testing.T, task *Task) {
				c := task.Environment.ComposeSpec
				if c == nil || !reflect.DeepEqual(c.Order, []string{"main", "db"}) || c.Services["main"].DependsOn["db"] != ConditionHealthy {
					t.Fatalf("compose = %+v", c)
				}
				if task.Verifier.Env["PGHOST"] != "db" {
					t.Errorf("verifier env = %v", task.Verifier.Env)
				}
			}},
		"reward-json": {name: "agentenv/reward-json", schema: "1.4", agent: DefaultAgentTimeout, verifier: time.Minute, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true},
		"multi-step": {name: "agentenv/multi-step", schema: "1.4", agent: 2 * time.Minute, verifier: DefaultVerifierTimeout, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true, steps: 2,
			check: func(t *testing.T, task *Task) {
				if task.Instruction != "" || task.RewardStrategy != "mean" {
					t.Errorf("instruction, strategy = %q, %q", task.Instruction, task.RewardStrategy)
				}
				s0, s1 := task.Steps[0], task.Steps[1]
				if s0.Name != "01-create" || s0.Dir != filepath.Join(task.Dir, "steps", "01-create") || !strings.Contains(s0.Instruction, "`one`") {
					t.Errorf("step 0 = %+v", s0)
				}
				if s0.Agent.Timeout != time.Minute || s0.Verifier.Timeout != 30*time.Second || !reflect.DeepEqual(s0.MinReward, map[string]float64{"reward": 1}) {
					t.Errorf("step 0 agent, verifier, min_reward = %v, %v, %v", s0.Agent.Timeout, s0.Verifier.Timeout, s0.MinReward)
				}
				// unset values fall back to the task's: the agent's timeout, the verifier's env
				if s1.Agent.Timeout != 2*time.Minute || s1.Verifier.Timeout != 45*time.Second || s1.Verifier.Env["DATA_FILE"] != "/app/data.txt" || s1.MinReward != nil {
					t.Errorf("step 1 = %+v", s1)
				}
			}},
		"multi-step-gate": {name: "agentenv/multi-step-gate", schema: "1.4", agent: time.Minute, verifier: 30 * time.Second, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true, steps: 3,
			check: func(t *testing.T, task *Task) {
				if task.RewardStrategy != "final" {
					t.Errorf("strategy = %q", task.RewardStrategy)
				}
				var mins []map[string]float64
				for _, s := range task.Steps {
					mins = append(mins, s.MinReward)
				}
				if want := []map[string]float64{{"reward": 1}, {"lines": 1}, nil}; !reflect.DeepEqual(mins, want) {
					t.Errorf("min_reward = %v, want %v", mins, want)
				}
			}},
		"compose-init": {name: "agentenv/compose-init", schema: "1.4", agent: 2 * time.Minute, verifier: time.Minute, build: 10 * time.Minute, dockerfile: df, compose: "environment/docker-compose.yaml", cpus: 1, mem: 1024, storage: 10240, internet: true,
			check: func(t *testing.T, task *Task) {
				c, err := LoadCompose(filepath.Join(task.Dir, task.Environment.Compose))
				if err != nil {
					t.Fatal(err)
				}
				if got := c.Services["main"].DependsOn["init"]; got != ConditionCompleted {
					t.Errorf("main depends on init %q", got)
				}
			}},
		"mcp-http": {name: "agentenv/mcp-http", schema: "1.4", agent: 2 * time.Minute, verifier: time.Minute, build: 10 * time.Minute, dockerfile: df, compose: "environment/docker-compose.yaml", cpus: 1, mem: 2048, storage: 10240, internet: true, mcp: 2,
			check: func(t *testing.T, task *Task) {
				want := []MCPServer{{Name: "codes", Transport: "streamable-http", URL: "http://mcp-server:8000/mcp"}, {Name: "words", Transport: "sse", URL: "http://mcp-server:8000/sse"}}
				if !reflect.DeepEqual(task.MCPServers, want) {
					t.Errorf("mcp servers = %+v", task.MCPServers)
				}
			}},
		"mcp-stdio": {name: "agentenv/mcp-stdio", schema: "1.4", agent: 2 * time.Minute, verifier: DefaultVerifierTimeout, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true, mcp: 1,
			check: func(t *testing.T, task *Task) {
				want := MCPServer{Name: "vault", Transport: "stdio", Command: "/usr/local/bin/vault-mcp", Args: []string{"--vault", "/opt/vault"}}
				if !reflect.DeepEqual(task.MCPServers[0], want) {
					t.Errorf("mcp server = %+v", task.MCPServers[0])
				}
			}},
		"verifier-env-user": {name: "agentenv/verifier-env-user", schema: "1.4", agent: time.Minute, verifier: time.Minute, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true,
			check: func(t *testing.T, task *Task) {
				if task.Verifier.User != "checker" || task.Agent.User != "root" || !reflect.DeepEqual(task.Verifier.Env, map[string]string{"EXPECTED_GREETING": "bonjour"}) {
					t.Errorf("verifier = %+v, agent = %+v", task.Verifier, task.Agent)
				}
			}},
		"agent-timeout":      {name: "agent-timeout", schema: "1.4", agent: 2 * time.Second, verifier: 30 * time.Second, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true, expect: "agent_timeout"},
		"verifier-no-reward": {name: "verifier-no-reward", schema: "1.4", agent: DefaultAgentTimeout, verifier: 30 * time.Second, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true, expect: "verifier_error"},
		"build-error":        {name: "build-error", schema: "1.4", agent: DefaultAgentTimeout, verifier: DefaultVerifierTimeout, build: time.Minute, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true, expect: "build_error"},
		"dockerfile-arg":     {name: "agentenv/dockerfile-arg", schema: "1.4", agent: time.Minute, verifier: DefaultVerifierTimeout, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true},
		"workdir-copy":       {name: "agentenv/workdir-copy", schema: "1.4", agent: DefaultAgentTimeout, verifier: DefaultVerifierTimeout, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true},
		"fraction-checks":    {name: "agentenv/fraction-checks", schema: "1.4", agent: DefaultAgentTimeout, verifier: time.Minute, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true},
		"resources": {name: "agentenv/resources", schema: "1.4", agent: 90 * time.Second, verifier: 45500 * time.Millisecond, build: 2 * time.Minute, dockerfile: df, cpus: 2, mem: 1024, storage: 4096, internet: false,
			check: func(t *testing.T, task *Task) {
				if task.Environment.NetworkMode != NetworkNone || task.Environment.GPUs != 0 {
					t.Errorf("network, gpus = %q, %d", task.Environment.NetworkMode, task.Environment.GPUs)
				}
			}},
		"allowlist": {name: "agentenv/allowlist", schema: "1.4", agent: 2 * time.Minute, verifier: 3 * time.Minute, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true,
			check: func(t *testing.T, task *Task) {
				if task.Environment.NetworkMode != NetworkAllowlist || !reflect.DeepEqual(task.Environment.AllowedHosts, []string{"allowed.test", "*.allowed.test"}) {
					t.Errorf("network %q, allowed hosts %q", task.Environment.NetworkMode, task.Environment.AllowedHosts)
				}
			}},
		"phase-network": {name: "agentenv/phase-network", schema: "1.4", agent: 2 * time.Minute, verifier: 2 * time.Minute, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true,
			check: func(t *testing.T, task *Task) {
				if task.Agent.NetworkMode != NetworkAllowlist || !reflect.DeepEqual(task.Agent.AllowedHosts, []string{"*.agent.test"}) || task.Verifier.NetworkMode != NetworkNone || !phased(task) {
					t.Errorf("agent %+v, verifier network %q, phased %v", task.Agent, task.Verifier.NetworkMode, phased(task))
				}
			}},
		"no-internet": {name: "agentenv/no-internet", schema: "1.1", agent: DefaultAgentTimeout, verifier: DefaultVerifierTimeout, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: false},
		"legacy-v1": {name: "legacy-v1", schema: "1.0", agent: 2 * time.Minute, verifier: 2 * time.Minute, build: 10 * time.Minute, dockerfile: df, cpus: 1, mem: 1024, storage: 2048, internet: true,
			warnings: []string{
				"task.toml:1: key version: deprecated spelling, read as schema_version",
				"task.toml:19: key environment.memory: deprecated spelling; use memory_mb",
				"task.toml:20: key environment.storage: deprecated spelling; use storage_mb",
			},
			check: func(t *testing.T, task *Task) {
				if !reflect.DeepEqual(task.Metadata["tags"], []any{"legacy", "words"}) {
					t.Errorf("metadata tags = %#v", task.Metadata["tags"])
				}
			}},
		"healthcheck-env": {name: "agentenv/healthcheck-env", schema: "1.4", agent: DefaultAgentTimeout, verifier: DefaultVerifierTimeout, build: DefaultBuildTimeout, dockerfile: df, cpus: 1, mem: 2048, storage: 10240, internet: true,
			check: func(t *testing.T, task *Task) {
				want := &Healthcheck{Command: "test -d /app && test -r /app/seed.txt", Interval: time.Second, Timeout: 5 * time.Second, StartPeriod: 2 * time.Second, StartInterval: DefaultHealthStartInterval, Retries: 5}
				if !reflect.DeepEqual(task.Environment.Healthcheck, want) {
					t.Errorf("healthcheck = %+v", task.Environment.Healthcheck)
				}
				if !reflect.DeepEqual(task.Environment.Env, map[string]string{"APP_MODE": "test", "APP_HOME": "/app"}) || task.Solution.Env["SOLVER"] != "oracle" {
					t.Errorf("env = %v, solution env = %v", task.Environment.Env, task.Solution.Env)
				}
			}},
	}
	dirs, err := Dataset("testdata/corpus", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != len(cases) || len(dirs) < 15 {
		t.Fatalf("corpus has %d tasks, the test knows %d", len(dirs), len(cases))
	}
	for _, dir := range dirs {
		base := filepath.Base(dir)
		t.Run(base, func(t *testing.T) {
			w, ok := cases[base]
			if !ok {
				t.Fatalf("no expectations for corpus task %s", base)
			}
			task, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			env := task.Environment
			got := want{name: task.Name, schema: task.SchemaVersion, agent: task.Agent.Timeout, verifier: task.Verifier.Timeout, build: env.BuildTimeout,
				dockerfile: env.Dockerfile, compose: env.Compose, img: env.DockerImage, cpus: env.CPUs, mem: env.MemoryMB, storage: env.StorageMB,
				internet: env.AllowInternet, steps: len(task.Steps), mcp: len(task.MCPServers), warnings: task.Warnings}
			got.expect, _ = task.Metadata["expect"].(string)
			check := w.check
			w.check = nil
			if !reflect.DeepEqual(got, w) {
				t.Errorf("Load(%s) =\n %+v\nwant\n %+v", base, got, w)
			}
			if task.Dir != dir || !filepath.IsAbs(task.Dir) {
				t.Errorf("Dir = %q, want %q", task.Dir, dir)
			}
			if len(task.Steps) == 0 && task.Instruction == "" {
				t.Error("a single-step task without its instruction")
			}
			if check != nil {
				check(t, task)
			}
		})
	}
}

func TestLoadBad(t *testing.T) {
	cases := []struct {
		dir      string
		err      string // the whole error text, "" for none
		warnings []string
	}{
		{dir: "no-toml", err: "testdata/bad/no-toml/task.toml: missing: not a Harbor task folder"},
		{dir: "typo-key", warnings: []string{
			`task.toml:5: key environment.cpu: unknown key, ignored (did you mean "cpus"?)`,
			`task.toml:8: key verifier.timout_sec: unknown key, ignored (did you mean "timeout_sec"?)`,
		}},
		{dir: "wrong-type", err: "testdata/bad/wrong-type/task.toml:4: key agent.timeout_sec: want a number, got string \"ten minutes\"\n" +
			"testdata/bad/wrong-type/task.toml:8: key environment.memory_mb: want an integer, got float 1.5"},
		{dir: "malformed", err: "testdata/bad/malformed/task.toml:3:7: expected ']' to close table name"},
		{dir: "no-environment", err: "testdata/bad/no-environment/instruction.md: missing\n" +
			"testdata/bad/no-environment/environment: no Dockerfile, docker-compose.yaml or [environment].docker_image: nothing to run the task in"},
		{dir: "compose-refused", err: "testdata/bad/compose-refused/environment/docker-compose.yaml:4: services.main.privileged: not supported: privileged containers are not run\n" +
			"testdata/bad/compose-refused/environment/docker-compose.yaml:8: services.db.ports: not supported: no host port is published; services reach each other by name\n" +
			"testdata/bad/compose-refused/environment/docker-compose.yaml:10: services.db.volumes[0]: not supported: binds the host path \"./data\"; copy files in the Dockerfile or use a named volume"},
	}
	for _, c := range cases {
		t.Run(c.dir, func(t *testing.T) {
			task, err := Load(filepath.Join("testdata", "bad", c.dir))
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(task.Warnings, c.warnings) {
					t.Errorf("warnings =\n %q\nwant\n %q", task.Warnings, c.warnings)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load succeeded, want %q", c.err)
			}
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if got := rel(t, err); got != c.err {
				t.Errorf("error =\n%s\nwant\n%s", got, c.err)
			}
		})
	}
}

// parse reads task.toml text alone, without a folder.
func parse(t *testing.T, text string) (*Task, error) {
	t.Helper()
	return parseTask("", "task.toml", []byte(text))
}

func TestSchemaVersionsAndDeprecatedSpellings(t *testing.T) {
	cases := []struct {
		name, toml string
		check      func(t *testing.T, task *Task)
		warnings   []string
	}{
		{name: "1.0 version", toml: "version = \"1.0\"\n",
			check:    func(t *testing.T, task *Task) { eq(t, task.SchemaVersion, "1.0") },
			warnings: []string{"task.toml:1: key version: deprecated spelling, read as schema_version"}},
		{name: "both spellings: schema_version wins", toml: "schema_version = \"1.2\"\nversion = \"1.0\"\n",
			check:    func(t *testing.T, task *Task) { eq(t, task.SchemaVersion, "1.2") },
			warnings: []string{`task.toml:2: key version: deprecated spelling of schema_version, ignored: schema_version = "1.2" is set`}},
		{name: "unset", toml: "",
			check: func(t *testing.T, task *Task) {
				eq(t, task.SchemaVersion, "")
				eq(t, task.Agent.Timeout, DefaultAgentTimeout)
				eq(t, task.Verifier.Timeout, DefaultVerifierTimeout)
				eq(t, task.Environment.BuildTimeout, DefaultBuildTimeout)
				eq(t, task.Environment.MemoryMB, DefaultMemoryMB)
				eq(t, task.Environment.AllowInternet, true)
				eq(t, task.Verifier.EnvironmentMode, "shared")
			}},
		{name: "unknown version", toml: "schema_version = \"2.0\"\n",
			warnings: []string{`task.toml:1: key schema_version: schema version "2.0" is not one of 1.0, 1.1, 1.2, 1.3, 1.4; read as 1.4`}},
		{name: "1.0 memory and storage strings", toml: "version = \"1.0\"\n[environment]\nmemory = \"512M\"\nstorage = \"1.5G\"\n",
			check: func(t *testing.T, task *Task) {
				eq(t, task.Environment.MemoryMB, 512)
				eq(t, task.Environment.StorageMB, 1536)
			},
			warnings: []string{
				"task.toml:1: key version: deprecated spelling, read as schema_version",
				"task.toml:3: key environment.memory: deprecated spelling; use memory_mb",
				"task.toml:4: key environment.storage: deprecated spelling; use storage_mb",
			}},
		{name: "memory agreeing with memory_mb", toml: "[environment]\nmemory_mb = 2048\nmemory = \"2G\"\n",
			check:    func(t *testing.T, task *Task) { eq(t, task.Environment.MemoryMB, 2048) },
			warnings: []string{"task.toml:3: key environment.memory: deprecated spelling; use memory_mb"}},
		{name: "1.1 allow_internet is current", toml: "schema_version = \"1.1\"\n[environment]\nallow_internet = false\n",
			check: func(t *testing.T, task *Task) {
				eq(t, task.Environment.AllowInternet, false)
				eq(t, task.Environment.NetworkMode, NetworkNone)
			}},
		{name: "1.4 allow_internet is deprecated", toml: "schema_version = \"1.4\"\n[environment]\nallow_internet = false\n",
			check:    func(t *testing.T, task *Task) { eq(t, task.Environment.AllowInternet, false) },
			warnings: []string{`task.toml:3: key environment.allow_internet: deprecated since schema 1.4; use network_mode = "public" or "no-network"`}},
		{name: "1.4 network_mode wins over allow_internet", toml: "schema_version = \"1.4\"\n[environment]\nnetwork_mode = \"public\"\nallow_internet = false\n",
			check: func(t *testing.T, task *Task) { eq(t, task.Environment.AllowInternet, true) },
			warnings: []string{
				`task.toml:4: key environment.allow_internet: deprecated since schema 1.4; use network_mode = "public" or "no-network"`,
				`task.toml:4: key environment.allow_internet: ignored: network_mode = "public" is set`,
			}},
		{name: "allowed_hosts implies allowlist", toml: "[environment]\nallowed_hosts = [\"PyPI.org.\"]\n",
			check: func(t *testing.T, task *Task) {
				eq(t, task.Environment.NetworkMode, NetworkAllowlist)
				eq(t, task.Environment.AllowedHosts[0], "pypi.org")
				eq(t, task.Environment.AllowInternet, true)
			}},
		{name: "1.2 multi_step_reward_mode dropped", toml: "schema_version = \"1.2\"\nmulti_step_reward_mode = \"sum\"\n",
			check:    func(t *testing.T, task *Task) { eq(t, task.RewardStrategy, "") },
			warnings: []string{"task.toml:2: key multi_step_reward_mode: deprecated (before schema 1.3) and dropped, as Harbor drops it; use multi_step_reward_strategy"}},
		{name: "1.3 steps with final strategy", toml: "schema_version = \"1.3\"\nmulti_step_reward_strategy = \"final\"\n[[steps]]\nname = \"a\"\nmin_reward = { reward = 0.5, style = 1 }\n[steps.agent]\nuser = 1000\n[[steps]]\nname = \"b\"\n",
			check: func(t *testing.T, task *Task) {
				eq(t, task.RewardStrategy, "final")
				eq(t, len(task.Steps), 2)
				eq(t, task.Steps[0].Agent.User, "1000")
				if !reflect.DeepEqual(task.Steps[0].MinReward, map[string]float64{"reward": 0.5, "style": 1}) {
					t.Errorf("min_reward = %v", task.Steps[0].MinReward)
				}
			}},
		{name: "a step verifier takes the task's user and env, not its collect hooks", toml: "[verifier]\nuser = \"v\"\nenv = { A = \"1\" }\nnetwork_mode = \"no-network\"\n[[verifier.collect]]\ncommand = \"c\"\n[[steps]]\nname = \"s\"\n",
			check: func(t *testing.T, task *Task) {
				v := task.Steps[0].Verifier
				eq(t, v.User, "v")
				eq(t, v.Env["A"], "1")
				eq(t, len(v.Collect), 0)
				eq(t, v.NetworkMode, "")
				eq(t, v.Timeout, DefaultVerifierTimeout)
			},
			warnings: []string{"task.toml:5: key verifier.collect: " + notCollected}},
		{name: "mcp http is streamable-http, sse is the default", toml: "[[environment.mcp_servers]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://a:8000/mcp\"\n[[environment.mcp_servers]]\nname = \"b\"\nurl = \"http://b:8000/sse\"\n",
			check: func(t *testing.T, task *Task) {
				eq(t, task.MCPServers[0].Transport, "streamable-http")
				eq(t, task.MCPServers[1].Transport, "sse")
			}},
		{name: "verifier separate environment, collect hooks, artifacts", toml: "artifacts = [\"/app/out\", { source = \"/var/log/db.log\", service = \"db\" }]\n[verifier]\n[verifier.environment]\ncpus = 0.5\n[[verifier.collect]]\ncommand = \"pg_dump > /tmp/d\"\nservice = \"db\"\n",
			check: func(t *testing.T, task *Task) {
				eq(t, task.Verifier.EnvironmentMode, "separate")
				eq(t, task.Verifier.Environment.CPUs, 0.5)
				eq(t, task.Verifier.Collect[0], CollectHook{Command: "pg_dump > /tmp/d", Service: "db", Timeout: DefaultCollectTimeout})
				eq(t, len(task.Artifacts), 2)
				eq(t, task.Artifacts[1].Service, "db")
			},
			warnings: []string{"task.toml:3: key verifier.environment: " + notSeparate, "task.toml:5: key verifier.collect: " + notCollected}},
		{name: "an artifact's destination and exclude are named and not applied", toml: "artifacts = [{ source = \"/app/out\", destination = \"out\", exclude = [\"*.tmp\"] }]\n",
			check: func(t *testing.T, task *Task) { eq(t, task.Artifacts[0].Destination, "out") },
			warnings: []string{
				"task.toml:1: key artifacts[0].destination: not applied: agentenv keeps an artifact under its path in the sandbox",
				"task.toml:1: key artifacts[0].exclude: not applied: every file of the folder is kept",
			}},
		{name: "a separate verifier is named and not applied", toml: "[verifier]\nenvironment_mode = \"separate\"\n",
			check:    func(t *testing.T, task *Task) { eq(t, task.Verifier.EnvironmentMode, "separate") },
			warnings: []string{"task.toml:2: key verifier.environment_mode: " + notSeparate}},
		{name: "gpus parsed", toml: "[environment]\ngpus = 2\ngpu_types = [\"H100\"]\n",
			check: func(t *testing.T, task *Task) {
				eq(t, task.Environment.GPUs, 2)
				eq(t, task.Environment.GPUTypes[0], "H100")
			}},
		{name: "unknown keys everywhere", toml: "schema_versoin = \"1.4\"\n[task]\nname = \"o/n\"\nlicense = \"MIT\"\n[agent]\nmodel = \"x\"\n[environment.healthcheck]\ncommand = \"true\"\nretry = 2\n[tpu]\n",
			warnings: []string{
				`task.toml:1: key schema_versoin: unknown key, ignored (did you mean "schema_version"?)`,
				`task.toml:4: key task.license: unknown key, ignored`,
				`task.toml:6: key agent.model: unknown key, ignored`,
				`task.toml:9: key environment.healthcheck.retry: unknown key, ignored`,
				`task.toml:10: key tpu: unknown key, ignored`,
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task, err := parse(t, c.toml)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(task.Warnings, c.warnings) && (len(task.Warnings) > 0 || len(c.warnings) > 0) {
				t.Errorf("warnings =\n %q\nwant\n %q", task.Warnings, c.warnings)
			}
			if c.check != nil {
				c.check(t, task)
			}
		})
	}
}

func eq[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestErrors(t *testing.T) {
	cases := []struct{ toml, err string }{
		{"[agent]\ntimeout_sec = \"10\"\n", `task.toml:2: key agent.timeout_sec: want a number, got string "10"`},
		{"[agent]\ntimeout_sec = -1\n", `task.toml:2: key agent.timeout_sec: want a number of seconds from 0 to 1e9, got -1`},
		{"[verifier]\nenv = { A = 1 }\n", `task.toml:2: key verifier.env.A: want a string, got integer 1`},
		{"[verifier]\nuser = true\n", `task.toml:2: key verifier.user: want a user name or uid, got boolean true`},
		{"[environment]\ncpus = 0\n", `task.toml:2: key environment.cpus: want more than 0, got 0`},
		{"[environment]\ngpus = -1\n", `task.toml:2: key environment.gpus: want 0 or more, got -1`},
		{"[environment]\nmemory = \"lots\"\n", `task.toml:2: key environment.memory: want a size such as "2G" or "512M", got "lots"`},
		{"[environment]\nmemory = \"1G\"\nmemory_mb = 2048\n", `task.toml:2: key environment.memory: "1G" (1024 MB) conflicts with memory_mb = 2048`},
		{"[environment]\nnetwork_mode = \"none\"\n", `task.toml:2: key environment.network_mode: want "public", "no-network" or "allowlist", got "none"`},
		{"[environment]\nnetwork_mode = \"public\"\nallowed_hosts = [\"a.com\"]\n", `task.toml:3: key environment.allowed_hosts: only valid with network_mode = "allowlist"`},
		{"[environment.healthcheck]\ninterval_sec = 1\n", `task.toml:1: key environment.healthcheck.command: a healthcheck needs a command`},
		{"environment = 3\n", `task.toml:1: key environment: want a table, got integer 3`},
		{"metadata = \"x\"\n", `task.toml:1: key metadata: want a table, got string "x"`},
		{"[[environment.mcp_servers]]\nname = \"m\"\ntransport = \"sse\"\n", `task.toml:1: key environment.mcp_servers[0].url: required for transport "sse"`},
		{"[[environment.mcp_servers]]\nname = \"m\"\ntransport = \"stdio\"\n", `task.toml:1: key environment.mcp_servers[0].command: required for transport "stdio"`},
		{"[[environment.mcp_servers]]\nname = \"m\"\ntransport = \"ws\"\nurl = \"x\"\n", `task.toml:3: key environment.mcp_servers[0].transport: want "sse", "streamable-http" or "stdio", got "ws"`},
		{"environment.mcp_servers = [{ name = \"m\", url = 5 }]\n", `task.toml:1: key environment.mcp_servers[0].url: want a string, got integer 5`},
		{"[[steps]]\nname = \"a\"\n[[steps]]\nname = \"a\"\n", `task.toml:4: key steps[1].name: step "a" declared twice (first at steps[0])`},
		{"[[steps]]\nname = \"../x\"\n", `task.toml:2: key steps[0].name: "../x" cannot be a folder name under steps/`},
		{"[[steps]]\nname = \"a\"\n[steps.verifier]\ntimeout_sec = \"x\"\n", `task.toml:4: key steps[0].verifier.timeout_sec: want a number, got string "x"`},
		{"[[steps]]\nname = \"a\"\nmin_reward = \"high\"\n", `task.toml:3: key steps[0].min_reward: want a number or a table of numbers, got string "high"`},
		{"multi_step_reward_strategy = \"max\"\n", `task.toml:1: key multi_step_reward_strategy: want "mean" or "final", got "max"`},
		{"[verifier]\nenvironment_mode = \"shared\"\n[verifier.environment]\ncpus = 1\n", `task.toml:3: key verifier.environment: environment_mode = "shared" conflicts with [verifier.environment]: omit one`},
		{"artifacts = [\"../etc\"]\n", `task.toml:1: key artifacts[0]: source "../etc" must not contain ..`},
		{"[task]\nname = \"\"\n", `task.toml:2: key task.name: must not be empty`},
		{"a = 1\na = 2\n", `task.toml:2:1: key a: key a is already defined`},
	}
	for _, c := range cases {
		_, err := parse(t, c.toml)
		if err == nil {
			t.Errorf("%q: no error, want %q", c.toml, c.err)
			continue
		}
		if !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%q: %v does not wrap ErrInvalid", c.toml, err)
		}
		if err.Error() != c.err {
			t.Errorf("%q:\n got %s\nwant %s", c.toml, err, c.err)
		}
	}
}

func TestDataset(t *testing.T) {
	all, err := Dataset("testdata/corpus", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := func(dirs []string) string {
		var out []string
		for _, d := range dirs {
			out = append(out, filepath.Base(d))
		}
		return strings.Join(out, ",")
	}
	if !strings.HasPrefix(names(all), "agent-timeout,allowlist,build-error,compose-init,compose-postgres,") {
		t.Errorf("not sorted: %s", names(all))
	}
	cases := []struct {
		dir              string
		include, exclude []string
		want, err        string
	}{
		{dir: "testdata/corpus", include: []string{"multi-*", "mcp-*"}, want: "mcp-http,mcp-stdio,multi-step,multi-step-gate"},
		{dir: "testdata/corpus", include: []string{"*-*"}, exclude: []string{"*e*"}, want: "mcp-http,mcp-stdio,workdir-copy"},
		{dir: "testdata/corpus", include: []string{"verifier-*"}, exclude: []string{"*-user"}, want: "verifier-no-reward"},
		{dir: "testdata/corpus/hello-file", want: "hello-file"},
		{dir: "testdata/corpus/hello-file", exclude: []string{"hello-*"}, err: "no task folder"},
		{dir: "testdata/corpus", include: []string{"nothing-*"}, err: "no task folder"},
		{dir: "testdata/bad/no-toml", err: "no task folder"},
		{dir: "testdata/corpus", include: []string{"[x"}, err: `glob "[x"`},
		{dir: "testdata/absent", err: "no such file"},
	}
	for _, c := range cases {
		got, err := Dataset(c.dir, c.include, c.exclude)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("Dataset(%s, %q, %q) = %v, want ErrInvalid with %q", c.dir, c.include, c.exclude, err, c.err)
			}
			continue
		}
		if err != nil || names(got) != c.want {
			t.Errorf("Dataset(%s, %q, %q) = %s, %v; want %s", c.dir, c.include, c.exclude, names(got), err, c.want)
		}
	}
}

func TestDigest(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/corpus/workdir-copy")); err != nil {
		t.Fatal(err)
	}
	task, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	d0, err := task.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := task.Digest(); again != d0 || !strings.HasPrefix(d0, "sha256:") || len(d0) != len("sha256:")+64 {
		t.Fatalf("digest %q then %q", d0, again)
	}
	data := filepath.Join(dir, "environment", "data", "numbers.txt")
	changes := []struct {
		name   string
		change func() error
	}{
		{"content", func() error { return os.WriteFile(data, []byte("1\n2\n"), 0o644) }},
		{"mode", func() error { return os.Chmod(data, 0o600) }},
		{"rename", func() error { return os.Rename(data, data+".bak") }},
		{"new file", func() error { return os.WriteFile(filepath.Join(dir, "tests", "extra.txt"), nil, 0o644) }},
		{"empty folder", func() error { return os.Mkdir(filepath.Join(dir, "solution", "more"), 0o755) }},
	}
	seen := map[string]string{d0: "original"}
	for _, c := range changes {
		if err := c.change(); err != nil {
			t.Fatal(err)
		}
		d, err := DigestDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[d]; dup {
			t.Errorf("after the %s change the digest is that of %s", c.name, prev)
		}
		seen[d] = c.name
	}
}

func TestLoadCompose(t *testing.T) {
	c, err := LoadCompose("testdata/corpus/compose-postgres/environment/docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	main, db := c.Services["main"], c.Services["db"]
	eq(t, c.Main, "main")
	if !reflect.DeepEqual(main.Build, &Build{Context: ".", Dockerfile: "Dockerfile"}) || !reflect.DeepEqual(main.Command, []string{"sleep", "infinity"}) {
		t.Errorf("main = %+v", main)
	}
	eq(t, main.Environment["PGHOST"], "db")
	eq(t, db.Image, "postgres:16")
	want := &ComposeHealthcheck{Test: []string{"CMD-SHELL", "pg_isready -U postgres -h 127.0.0.1"}, Interval: 2 * time.Second, Timeout: 5 * time.Second, StartPeriod: 5 * time.Second, StartInterval: 5 * time.Second, Retries: 30}
	if !reflect.DeepEqual(db.Healthcheck, want) {
		t.Errorf("db healthcheck = %+v", db.Healthcheck)
	}

	harborStyle := `services:
  main:
    build:
      context: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    command: sh -c "sleep infinity"
    environment:
      - TEST_DIR=${TEST_DIR}
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
      - cache:/cache
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
    depends_on: [redis]
  redis:
    image: redis:7
    healthcheck:
      test: redis-cli ping
    restart: always
volumes:
  cache:
`
	c, err = parseCompose("docker-compose.yaml", []byte(harborStyle))
	if err != nil {
		t.Fatal(err)
	}
	main = c.Services["main"]
	if !reflect.DeepEqual(main.Command, []string{"sh", "-c", "sleep infinity"}) || main.Build.Context != "${CONTEXT_DIR}" || main.CPUs != "${CPUS}" || main.Memory != "${MEMORY}" {
		t.Errorf("main = %+v", main)
	}
	eq(t, main.Environment["TEST_DIR"], "${TEST_DIR}")
	eq(t, len(main.Volumes), 2)
	eq(t, main.DependsOn["redis"], ConditionStarted)
	eq(t, c.Services["redis"].Healthcheck.Test[1], "redis-cli ping")

	bad := []struct{ yaml, err string }{
		{"services:\n  db:\n    user: x\n", `f.yaml:2: services.db: a service needs image or build`},
		{"services:\n  db:\n    image: x\n    environment: [A]\n", `f.yaml:4: services.db.environment[0]: not supported: "A" takes its value from the host; write A=VALUE`},
		{"services:\n  db:\n    image: x\n    network_mode: host\n", `f.yaml:4: services.db.network_mode: not supported: services share the deployment's private network`},
		{"services:\n  db:\n    image: x\n    imgae: y\n", `f.yaml:4: services.db.imgae: unknown field (did you mean "image"?)`},
		{"services:\n  db:\n    image: x\n    depends_on: [cache]\n", `f.yaml:4: services.db.depends_on.cache: no service "cache" in this file`},
		{"services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n", `f.yaml:1: services: depends_on makes a cycle: a -> b -> a`},
		{"services:\n  db:\n    image: x\n    depends_on:\n      main:\n        condition: service_ready\n", `f.yaml:6: services.db.depends_on.main.condition: want service_started, service_healthy or service_completed_successfully, got "service_ready"`},
		{"services:\n  db:\n    image: x\n    healthcheck:\n      test: [\"RUN\", \"x\"]\n", `f.yaml:5: services.db.healthcheck.test: want a list starting with CMD, CMD-SHELL or NONE, or a shell command string`},
		{"services:\n  db:\n    image: x\n    healthcheck:\n      test: true\n      interval: 5\n", `f.yaml:6: services.db.healthcheck.interval: want a duration such as "5s" or "1m30s", got "5"`},
		{"services:\n  db:\n    image: x\n    volumes: [data:/d]\n", `f.yaml:4: services.db.volumes[0]: volume "data" is not declared under the top-level volumes`},
		{"services:\n  db:\n    image: x\nnetworks:\n  n: {}\n", `f.yaml:5: networks: not supported: services share the deployment's private network`},
		{"version: \"3\"\n", `f.yaml:1: services: a compose file needs services`},
		{"services:\n  db:\n    image: x\n    command: \"echo 'x\"\n", `f.yaml:4: services.db.command: unterminated quote or escape in "echo 'x"`},
	}
	for _, b := range bad {
		_, err := parseCompose("f.yaml", []byte(b.yaml))
		if err == nil || err.Error() != b.err || !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%q:\n got %v\nwant %s", b.yaml, err, b.err)
		}
	}
}

func FuzzParseTask(f *testing.F) {
	dirs, _ := Dataset("testdata/corpus", nil, nil)
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "task.toml")); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		task, err := parseTask("", "task.toml", data)
		if err != nil {
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, w := range task.Warnings {
			if !strings.HasPrefix(w, "task.toml:") {
				t.Fatalf("warning %q does not name task.toml", w)
			}
		}
		if task.Agent.Timeout < 0 || task.Verifier.Timeout < 0 || task.Environment.MemoryMB < 0 || task.Environment.GPUs < 0 {
			t.Fatalf("negative value read: %+v", task)
		}
	})
}

func TestKeyLines(t *testing.T) {
	doc := "a = 1\n[[steps]]\nname = \"x\"\n[[steps.verifier.collect]]\ncommand = \"c\"\n[steps.agent]\ntimeout_sec = 1\n[[steps]]\nname = \"y\"\n" +
		"[environment]\nmcp_servers = [\n  { name = \"m\",\n    url = \"u\" },\n]\nenv.\"A.B\" = \"v\"\n"
	got := keyLines([]byte(doc))
	want := map[string]int{
		"a": 1, "steps[0]": 2, "steps[0].name": 3, "steps[0].verifier.collect[0]": 4, "steps[0].verifier.collect[0].command": 5,
		"steps[0].agent": 6, "steps[0].agent.timeout_sec": 7, "steps[1]": 8, "steps[1].name": 9, "environment": 10,
		"environment.mcp_servers": 11, "environment.mcp_servers[0].name": 12, "environment.mcp_servers[0].url": 13, `environment.env."A.B"`: 15,
	}
	for k, l := range want {
		if got[k] != l {
			t.Errorf("line of %s = %d, want %d", k, got[k], l)
		}
	}
}

func TestLoadFolders(t *testing.T) {
	write := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, text := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	cases := []struct {
		name  string
		files map[string]string
		err   string // a suffix of the error's text after the folder, "" for none
	}{
		{"compose without main and no Dockerfile", map[string]string{"task.toml": "", "instruction.md": "x",
			"environment/docker-compose.yaml": "services:\n  db:\n    image: postgres:16\n"},
			`/environment/docker-compose.yaml: key services: no service "main", and no environment/Dockerfile or docker_image to make it from`},
		{"compose without main, main from the Dockerfile", map[string]string{"task.toml": "", "instruction.md": "x",
			"environment/docker-compose.yml": "services:\n  db:\n    image: postgres:16\n", "environment/Dockerfile": "FROM ubuntu:24.04\n"}, ""},
		{"step without its folder", map[string]string{"task.toml": "[environment]\ndocker_image = \"i\"\n[[steps]]\nname = \"one\"\n"},
			`/task.toml:4: key steps[0].name: no folder steps/one/ for this step`},
		{"step without its instruction", map[string]string{"task.toml": "[environment]\ndocker_image = \"i\"\n[[steps]]\nname = \"one\"\n", "steps/one/tests/test.sh": ""},
			`/steps/one/instruction.md: missing`},
		{"instruction is a folder", map[string]string{"task.toml": "[environment]\ndocker_image = \"i\"\n", "instruction.md/x": ""},
			`/instruction.md: not a regular file`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := write(t, c.files)
			task, err := Load(dir)
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if task.Environment.Compose != "environment/docker-compose.yml" || task.Environment.ComposeSpec.Services["db"] == nil {
					t.Errorf("environment = %+v", task.Environment)
				}
				return
			}
			if err == nil || !errors.Is(err, agentenv.ErrInvalid) || err.Error() != dir+c.err {
				t.Errorf("Load = %v\nwant %s", err, dir+c.err)
			}
		})
	}
}

// Group hands the caller every task's warnings, each naming the task's task.toml and line.
func TestGroupWarns(t *testing.T) {
	f, warns, err := Group("testdata/bad/typo-key", Selection{}, Options{}, 1, 1, eval.Overrides{})
	if err != nil || len(f.Tasks) != 1 {
		t.Fatalf("Group: %v", err)
	}
	want := []string{
		`testdata/bad/typo-key/task.toml:5: key environment.cpu: unknown key, ignored (did you mean "cpus"?)`,
		`testdata/bad/typo-key/task.toml:8: key verifier.timout_sec: unknown key, ignored (did you mean "timeout_sec"?)`,
	}
	wd, _ := os.Getwd()
	for i := range warns {
		warns[i] = strings.TrimPrefix(warns[i], wd+string(filepath.Separator))
	}
	if !reflect.DeepEqual(warns, want) {
		t.Errorf("warnings =\n %q\nwant\n %q", warns, want)
	}
}
