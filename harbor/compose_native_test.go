package harbor

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// nativeSteps loads the task folder dir, checks that Native makes a task of it, and returns
// its compose steps by id, with the ids in order.
func nativeSteps(t *testing.T, dir string) (map[string]step, []string) {
	t.Helper()
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Native(tk, Options{}); err != nil {
		t.Fatalf("Native(%s) = %v", dir, err)
	}
	steps, err := composeSteps(tk)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]step{}
	var ids []string
	for _, s := range steps {
		id := s["id"].(string)
		byID[id] = s
		ids = append(ids, id)
	}
	return byID, ids
}

func deepEq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", what, got, want)
	}
}

// TestComposePostgresSteps: the corpus task's compose file becomes a network, the db service
// with its healthcheck, and main built from environment/ depending on db (service_healthy).
func TestComposePostgresSteps(t *testing.T) {
	steps, ids := nativeSteps(t, "testdata/corpus/compose-postgres")
	deepEq(t, "ids", ids, []string{"network", "svc_db", "container"})
	deepEq(t, "network", steps["network"], step{"id": "network", "type": task.TypeDeployNetwork})
	db := steps["svc_db"]
	deepEq(t, "db.image", db["image"], "postgres:16")
	deepEq(t, "db.network", db["network"], "network")
	deepEq(t, "db.aliases", db["aliases"], []string{"db"})
	deepEq(t, "db.depends_on", db["depends_on"], []string{"network"})
	deepEq(t, "db.env", db["env"], map[string]string{"POSTGRES_PASSWORD": "harbor"})
	deepEq(t, "db.healthcheck", db["healthcheck"], map[string]any{"command": "pg_isready -U postgres -h 127.0.0.1",
		"interval_sec": 2.0, "timeout_sec": 5.0, "start_period_sec": 5.0, "retries": 30})
	if _, ok := db["command"]; ok {
		t.Errorf("db has a command %v: want the image's", db["command"])
	}
	main := steps["container"]
	deepEq(t, "main.build", main["build"], map[string]any{"context": "environment", "dockerfile": "Dockerfile"})
	deepEq(t, "main.aliases", main["aliases"], []string{"main"})
	deepEq(t, "main.depends_on", main["depends_on"], []string{"network", "svc_db"})
	deepEq(t, "main.command", main["command"], []string{"sleep", "infinity"})
	deepEq(t, "main.memory_mb", main["memory_mb"], 1024)
	deepEq(t, "main.env.PGHOST", main["env"].(map[string]string)["PGHOST"], "db")
}

// TestComposeVolumeSteps: the corpus task's named volume becomes a deploy_volume step, which
// the writer service mounts as it is and main read-only, each depending on it; a volume no
// service mounts makes no step.
func TestComposeVolumeSteps(t *testing.T) {
	steps, ids := nativeSteps(t, "testdata/corpus/compose-volume")
	deepEq(t, "ids", ids, []string{"network", "vol_shared", "svc_writer", "container"})
	deepEq(t, "vol_shared", steps["vol_shared"], step{"id": "vol_shared", "type": task.TypeDeployVolume, "depends_on": []string{}})
	w := steps["svc_writer"]
	deepEq(t, "writer.volumes", w["volumes"], []map[string]any{{"volume": "vol_shared", "path": "/out"}})
	deepEq(t, "writer.depends_on", w["depends_on"], []string{"network", "vol_shared"})
	deepEq(t, "writer.wait_exit", w["wait_exit"], true)
	main := steps["container"]
	deepEq(t, "main.volumes", main["volumes"], []map[string]any{{"volume": "vol_shared", "path": "/shared", "read_only": true}})
	deepEq(t, "main.depends_on", main["depends_on"], []string{"network", "vol_shared", "svc_writer"})

	long := strings.Repeat("v", 61)
	src := "services:\n  main:\n    build: .\n    volumes: ['${HOST_LOGS}:/logs', 'data:/a', '" + long + ":/b:rw']\nvolumes:\n  data:\n  " + long + ":\n  unused:\n"
	dir := t.TempDir()
	c, err := parseCompose(filepath.Join(dir, "environment", "docker-compose.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	tk := &Task{Dir: dir, Environment: Environment{Compose: "environment/docker-compose.yaml", ComposeSpec: c, Dockerfile: "environment/Dockerfile", CPUs: 1, MemoryMB: 1024}}
	if _, err := composeSteps(tk); err == nil || !strings.Contains(err.Error(), "volumes."+long+": the volume's name makes the step id") {
		t.Errorf("a volume whose step id is too long: %v", err)
	}
	c.Services["main"].Volumes = []string{"${HOST_LOGS}:/logs", "data:/a"}
	got, err := composeSteps(tk)
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs []string
	for _, s := range got {
		gotIDs = append(gotIDs, s["id"].(string))
	}
	deepEq(t, "ids", gotIDs, []string{"network", "vol_data", "container"})
	deepEq(t, "main.volumes", got[2]["volumes"], []map[string]any{{"volume": "vol_data", "path": "/a"}})
}

// TestComposeDepsSteps: depends_on order, healthy conditions, Harbor's variables filled in,
// build contexts relative to the compose file, limits, entrypoint and command, ${MAIN_IMAGE_NAME}.
func TestComposeDepsSteps(t *testing.T) {
	t.Setenv("LEVEL", "")
	steps, ids := nativeSteps(t, "testdata/compose/deps")
	deepEq(t, "ids", ids, []string{"network", "svc_cache", "svc_db", "svc_api", "container", "svc_sidecar"})
	api := steps["svc_api"]
	deepEq(t, "api.depends_on", api["depends_on"], []string{"network", "svc_cache", "svc_db"})
	deepEq(t, "api.build", api["build"], map[string]any{"context": "environment/api", "dockerfile": "Dockerfile", "args": map[string]string{"LEVEL": "debug"}})
	deepEq(t, "api.build_timeout_sec", api["build_timeout_sec"], 300.0)
	abs, _ := filepath.Abs("testdata/compose/deps/environment")
	deepEq(t, "api.env", api["env"], map[string]string{"DB_URL": "postgres://db:5432/app", "CONTEXT": abs, "MEM": "4096M"})
	deepEq(t, "api.healthcheck", api["healthcheck"], map[string]any{"command": "curl -f 'http://localhost:8080/health check'",
		"interval_sec": 1.0, "timeout_sec": 30.0, "retries": 5})
	deepEq(t, "api.cpus", api["cpus"], 0.5)
	deepEq(t, "api.memory_mb", api["memory_mb"], 512)
	deepEq(t, "cache.command", steps["svc_cache"]["command"], []string{"redis-server", "--save", ""})
	db := steps["svc_db"]
	deepEq(t, "db.healthcheck", db["healthcheck"], map[string]any{"command": "pg_isready -U postgres",
		"interval_sec": 2.0, "timeout_sec": 3.0, "start_period_sec": 10.0, "retries": 10})
	// start period 10s + 11 tries of 2s+3s, and 2 minutes for the create: the default 10m is more.
	deepEq(t, "db.timeout", db["timeout"], "10m0s")

	main := steps["container"]
	deepEq(t, "main.depends_on", main["depends_on"], []string{"network", "svc_api"})
	deepEq(t, "main.build", main["build"], map[string]any{"context": "environment", "dockerfile": "Dockerfile"})
	deepEq(t, "main.env", main["env"], map[string]string{"TEST_DIR": "/tests", "LOGS": "/logs/agent", "API": "http://api:8080"})
	deepEq(t, "main.workdir", main["workdir"], "/work")
	deepEq(t, "main.command", main["command"], []string{"sh", "-c", "sleep infinity"})
	deepEq(t, "main.cpus", main["cpus"], 2.0)
	deepEq(t, "main.memory_mb", main["memory_mb"], 4096)

	side := steps["svc_sidecar"]
	deepEq(t, "sidecar.depends_on", side["depends_on"], []string{"network", "container"})
	deepEq(t, "sidecar.build", side["build"], main["build"]) // main's image, cached by its build digest
	deepEq(t, "sidecar.command", side["command"], []string{"/bin/sh", "-c", "echo $HOME; sleep infinity"})
}

// TestComposeNoMain: without a main service, main is environment/Dockerfile on the network, and
// [environment.healthcheck] is its step's healthcheck; without compose too.
func TestComposeNoMain(t *testing.T) {
	steps, ids := nativeSteps(t, "testdata/compose/no-main")
	deepEq(t, "ids", ids, []string{"network", "svc_cache", "container"})
	main := steps["container"]
	deepEq(t, "main.aliases", main["aliases"], []string{"main"})
	deepEq(t, "main.depends_on", main["depends_on"], []string{"network"})
	deepEq(t, "main.healthcheck", main["healthcheck"], map[string]any{"command": "redis-cli -h cache ping", "interval_sec": 1.0, "timeout_sec": 30.0, "retries": 4})

	tk, err := Load("testdata/corpus/healthcheck-env")
	if err != nil {
		t.Fatal(err)
	}
	s := containerStep(tk)
	deepEq(t, "healthcheck-env healthcheck", s["healthcheck"], map[string]any{"command": "test -d /app && test -r /app/seed.txt",
		"interval_sec": 1.0, "timeout_sec": 5.0, "start_period_sec": 2.0, "retries": 5})
}

// TestComposeInit: a service others depend on with service_completed_successfully is a step
// that waits for its exit (wait_exit) instead of a healthcheck, whatever else depends on it
// how, and its dependents depend on that step; a service's user (interpolated) is its step's.
func TestComposeInit(t *testing.T) {
	const src = "services:\n  main:\n    build: .\n    depends_on:\n      init:\n        condition: service_completed_successfully\n" +
		"  init:\n    image: x\n    user: '${SETUP_USER:-postgres}'\n    command: [sh, -c, 'echo setup']\n    healthcheck:\n      test: [CMD, 'true']\n" +
		"  api:\n    image: y\n    depends_on:\n      init:\n        condition: service_healthy\n"
	dir := t.TempDir()
	file := filepath.Join(dir, "environment", "docker-compose.yaml")
	c, err := parseCompose(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	tk := &Task{Dir: dir, Environment: Environment{Compose: "environment/docker-compose.yaml", ComposeSpec: c, Dockerfile: "environment/Dockerfile", CPUs: 1, MemoryMB: 1024}}
	steps, err := composeSteps(tk)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]step{}
	for _, s := range steps {
		byID[s["id"].(string)] = s
	}
	init := byID["svc_init"]
	if init["wait_exit"] != true || init["healthcheck"] != nil || init["user"] != "postgres" {
		t.Errorf("init's step %v: want wait_exit, no healthcheck and user postgres", init)
	}
	deepEq(t, "main.depends_on", byID["container"]["depends_on"], []string{"network", "svc_init"})
	deepEq(t, "api.depends_on", byID["svc_api"]["depends_on"], []string{"network", "svc_init"})
	if byID["svc_api"]["wait_exit"] != nil || byID["container"]["wait_exit"] != nil {
		t.Error("a service nothing waits to complete got wait_exit")
	}
}

// TestComposeRefused: what agentenv cannot run is an error naming the file and the key.
func TestComposeRefused(t *testing.T) {
	for _, tc := range []struct{ yaml, err string }{
		{"services:\n  db:\n    image: x\n    volumes: [data:/var/lib/data:z]\nvolumes:\n  data:\n",
			`services.db.volumes[0]: volume "data": mode "z": not supported; want ro or rw`},
		{"services:\n  db:\n    image: x\n    volumes: [data:var/lib]\nvolumes:\n  data:\n",
			`services.db.volumes[0]: volume "data": want an absolute path other than / to mount it at, got "var/lib"`},
		{"services:\n  main:\n    build: .\n    user: postgres\n", "services.main.user: not supported on main"},
		{"services:\n  main:\n    build: .\n  init:\n    image: x\n    depends_on:\n      main:\n        condition: service_completed_successfully\n",
			"services.init.depends_on.main.condition: service_completed_successfully: the main container is the agent's"},
		{"services:\n  main:\n    build: .\n    depends_on:\n      db:\n        condition: service_healthy\n  db:\n    image: x\n",
			"services.main.depends_on.db.condition: service_healthy, but service db has no healthcheck"},
		{"services:\n  db:\n    build:\n      context: .\n      target: dev\n", "services.db.build.target: not supported"},
		{"services:\n  db:\n    build: ../..\n", `services.db.build.context: "../.." is outside the task folder`},
		{"services:\n  db:\n    image: x\n    deploy:\n      resources:\n        limits:\n          memory: lots\n", `services.db.deploy.resources.limits.memory: want a size such as "512m"`},
	} {
		dir := t.TempDir()
		file := filepath.Join(dir, "environment", "docker-compose.yaml")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		c, err := parseCompose(file, []byte(tc.yaml))
		if err != nil {
			t.Fatalf("parseCompose(%q) = %v", tc.yaml, err)
		}
		tk := &Task{Dir: dir, Environment: Environment{Compose: "environment/docker-compose.yaml", ComposeSpec: c, CPUs: 1, MemoryMB: 1024}}
		_, err = composeSteps(tk)
		if err == nil || !strings.Contains(err.Error(), file+": "+tc.err) || !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("compose %q: error %v, want %q naming the file, wrapping ErrInvalid", tc.yaml, err, tc.err)
		}
	}
}

// TestMemoryMB reads compose's memory sizes.
func TestMemoryMB(t *testing.T) {
	for in, want := range map[string]int{"512m": 512, "1g": 1024, "1.5GB": 1536, "2048M": 2048, "1048576": 1, "100k": 1, "2gb": 2048} {
		if got, err := memoryMB(in); err != nil || got != want {
			t.Errorf("memoryMB(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "m", "-1g", "1x", "0"} {
		if _, err := memoryMB(in); err == nil {
			t.Errorf("memoryMB(%q) = nil error", in)
		}
	}
}
