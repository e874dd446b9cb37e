package task

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Step is the implementation of one step type. A fresh value is decoded from a step's fields
// (after placeholders and output references are filled in) each time the step runs, so an
// implementation holds its configuration and nothing else.
type Step interface {
	// Check reports what decoding alone cannot: fields that exclude or need each other, enum
	// values, patterns that do not compile.
	Check() error

	// Refs names the steps this one reads from through its fields (a sandbox, an env, the
	// verifiers of an aggregate). Each must exist, be of one of the listed types and be a
	// transitive dependency.
	Refs() []Ref

	// Run does the step's work within ctx, which carries the step's timeout and is cancelled
	// when the run is. It returns the step's outputs and, for a verifier, its score and rows.
	// An error fails the step (a verifier's error scores 0); a partial Result is still recorded.
	Run(ctx context.Context, sc *scope) (Result, error)
}

// Ref is one step's reference to another by id.
type Ref struct {
	Field string   // the field that names it
	ID    string   // the step it names
	Types []string // the step types it may name
}

// OutputType is the type of a declared step output. Outputs are recorded as strings; the type
// says how to read them.
type OutputType string

// Output types. A secret output is held in memory for the episode's later steps and recorded
// as "[redacted]".
const (
	OutputString OutputType = "string"
	OutputInt    OutputType = "int"
	OutputBool   OutputType = "bool"
	OutputFloat  OutputType = "float"
	OutputJSON   OutputType = "json"
	OutputSecret OutputType = "secret"
)

// Output declares one output of a step type.
type Output struct {
	Name string     `json:"name"`
	Type OutputType `json:"type"`
}

// Result is what a step's Run returns.
type Result struct {
	Outputs map[string]string // by declared output name
	Score   *float64          // verifiers only: in [0,1]
	Rows    []Row             // verifiers only: what was checked
	// Gate is why a verifier's own gate closed (a reward step's min_rewards), "" if it is
	// open: the steps that depend on the verifier are skipped, as for a score below its
	// min_score. A closed gate is a scored result, never an error.
	Gate string
}

// Row is one check a verifier made.
type Row struct {
	Check    string `json:"check"`
	Expected string `json:"expected,omitempty"`
	Got      string `json:"got,omitempty"`
	Pass     bool   `json:"pass"`
}

// kind is a registered step type.
type kind struct {
	new      func() Step
	outputs  []Output
	verifier bool          // writes a score; outputs score and rows are added
	timeout  time.Duration // default per-step timeout
}

// verifierOutputs are the outputs every verifier writes.
var verifierOutputs = []Output{{"score", OutputFloat}, {"rows", OutputJSON}}

// outputsOf returns the declared outputs of k, including the verifier outputs.
func (k kind) outputsOf() []Output {
	if k.verifier {
		return append(append([]Output(nil), k.outputs...), verifierOutputs...)
	}
	return k.outputs
}

// output returns the declared output name of k.
func (k kind) output(name string) (Output, bool) {
	for _, o := range k.outputsOf() {
		if o.Name == name {
			return o, true
		}
	}
	return Output{}, false
}

// Step type names.
const (
	TypeDeploySandbox     = "deploy_sandbox"
	TypeDeployNetwork     = "deploy_network"
	TypeDeployVolume      = "deploy_volume"
	TypeDeployEnv         = "deploy_env"
	TypeExec              = "exec"
	TypeWriteFile         = "write_file"
	TypeLoadData          = "load_data"
	TypeCallTool          = "call_tool"
	TypePromptAgent       = "prompt_agent"
	TypeFileContains      = "file_contains"
	TypeCommandSucceeds   = "command_succeeds"
	TypeResponseMatches   = "response_matches"
	TypeToolResult        = "tool_result"
	TypeSQL               = "sql"
	TypeDataGet           = "data_get"
	TypeAggregate         = "aggregate"
	TypeTeardownSandboxes = "teardown_sandboxes"
	TypeUpload            = "upload"
	TypeServeTools        = "serve_tools"
)

// builtinKinds returns the step types a task may use, by name. It is a plain map built on each
// call: there is no registration and nothing to mutate.
func builtinKinds() map[string]kind {
	const short, long = 2 * time.Minute, 10 * time.Minute
	sandboxOut := []Output{{"sandbox_id", OutputString}, {"record", OutputString}, {"provider", OutputString}}
	return map[string]kind{
		TypeDeploySandbox: {new: func() Step { return &deploySandbox{} }, timeout: long, outputs: append(sandboxOut[:len(sandboxOut):len(sandboxOut)],
			Output{"image", OutputString}, Output{"built", OutputBool}, Output{"endpoints", OutputJSON},
			Output{"exit_code", OutputInt})},
		TypeDeployNetwork: {new: func() Step { return &deployNetwork{} }, timeout: short, outputs: []Output{
			{"network", OutputString}, {"provider", OutputString}}},
		TypeDeployVolume: {new: func() Step { return &deployVolume{} }, timeout: short, outputs: []Output{
			{"volume", OutputString}, {"provider", OutputString}}},
		TypeDeployEnv: {new: func() Step { return &deployEnv{} }, timeout: long, outputs: []Output{
			{"deployment_id", OutputString}, {"gateway_url", OutputString},
			{"database_url", OutputSecret}, {"records", OutputJSON}}},
		TypeExec: {new: func() Step { return &execStep{} }, timeout: short, outputs: []Output{
			{"exit_code", OutputInt}, {"stdout", OutputString}, {"stderr", OutputString}}},
		TypeWriteFile: {new: func() Step { return &writeFile{} }, timeout: short, outputs: []Output{{"bytes", OutputInt}}},
		TypeUpload: {new: func() Step { return &upload{} }, timeout: short, outputs: []Output{
			{"files", OutputInt}, {"bytes", OutputInt}}},
		TypeCollectFiles: {new: func() Step { return &collectFiles{} }, timeout: short, outputs: []Output{
			{"artifacts", OutputJSON}, {"files", OutputInt}, {"bytes", OutputInt}, {"missing", OutputJSON}}},
		TypeServeTools: {new: func() Step { return &serveTools{} }, timeout: short, outputs: []Output{
			{"gateway_url", OutputString}, {"servers", OutputJSON}}},
		TypeLoadData: {new: func() Step { return &loadData{} }, timeout: short, outputs: []Output{{"parts", OutputInt}}},
		TypeCallTool: {new: func() Step { return &callTool{} }, timeout: short, outputs: []Output{
			{"text", OutputString}, {"json", OutputJSON}, {"is_error", OutputBool}}},
		TypePromptAgent: {new: func() Step { return &promptAgent{} }, timeout: long, outputs: []Output{
			{"response", OutputString}, {"trajectory", OutputString}, {"turns", OutputInt}, {"tool_calls", OutputInt},
			{"stop", OutputString}, {"input_tokens", OutputInt}, {"output_tokens", OutputInt}, {"cost_usd", OutputFloat}}},
		TypeDeployAgent: {new: func() Step { return &deployAgent{} }, timeout: long, outputs: append(sandboxOut,
			Output{"url", OutputString}, Output{"gateway_url", OutputString}, Output{"name", OutputString})},
		TypeFileContains:    {new: func() Step { return &fileContains{} }, verifier: true, timeout: short},
		TypeCommandSucceeds: {new: func() Step { return &commandSucceeds{} }, verifier: true, timeout: short},
		TypeResponseMatches: {new: func() Step { return &responseMatches{} }, verifier: true, timeout: short},
		TypeToolResult:      {new: func() Step { return &toolResult{} }, verifier: true, timeout: short},
		TypeSQL:             {new: func() Step { return &sqlCheck{} }, verifier: true, timeout: short},
		TypeDataGet:         {new: func() Step { return &dataGet{} }, verifier: true, timeout: short},
		TypeAggregate:       {new: func() Step { return &aggregate{} }, verifier: true, timeout: short},
		TypeJudge: {new: func() Step { return &judge{} }, verifier: true, timeout: short, outputs: []Output{
			{"prompt", OutputString}, {"answer", OutputString}, {"reasons", OutputString}, {"model", OutputString},
			{"input_tokens", OutputInt}, {"output_tokens", OutputInt}}},
		TypeScript: {new: func() Step { return &script{} }, verifier: true, timeout: long, outputs: []Output{
			{"exit_code", OutputInt}, {"stdout", OutputString}, {"stderr", OutputString}, {"results", OutputJSON}}},
		TypeReward: {new: func() Step { return &reward{} }, verifier: true, timeout: long, outputs: []Output{
			{"exit_code", OutputInt}, {"stdout", OutputString}, {"stderr", OutputString}, {"rewards", OutputJSON}}},
		TypeTeardownSandboxes: {new: func() Step { return &teardownSandboxes{} }, timeout: long, outputs: []Output{
			{"receipt", OutputJSON}, {"terminated", OutputInt}}},
		TypeGatewayTrajectory: {new: func() Step { return &gatewayTrajectory{} }, verifier: true, timeout: short},
		TypeSetClock: {new: func() Step { return &setClock{} }, timeout: short, outputs: []Output{
			{"virtual_time", OutputString}, {"state", OutputJSON}}},
		TypeRegisterTriggers: {new: func() Step { return &registerTriggers{} }, timeout: short, outputs: []Output{{"ids", OutputJSON}}},
		TypeSetToolAccess:    {new: func() Step { return &setToolAccess{} }, timeout: short, outputs: []Output{{"rules", OutputJSON}}},
		TypeCallExtension: {new: func() Step { return &callExtension{} }, timeout: short, outputs: []Output{
			{"status", OutputInt}, {"body", OutputString}, {"json", OutputJSON}}},
		TypeApplyServerConfig: {new: func() Step { return &applyServerConfig{} }, timeout: short, outputs: []Output{
			{"applied", OutputJSON}, {"skipped", OutputJSON}}},
	}
}

// scoreRows is the fraction of rows that passed, as a verifier's score (0 with no rows).
func scoreRows(rows []Row) *float64 {
	s := 0.0
	if len(rows) > 0 {
		n := 0
		for _, r := range rows {
			if r.Pass {
				n++
			}
		}
		s = float64(n) / float64(len(rows))
	}
	return &s
}

// verdict is the Result of a verifier from its rows.
func verdict(rows []Row) Result {
	b, _ := json.Marshal(rows)
	s := scoreRows(rows)
	return Result{Score: s, Rows: rows, Outputs: map[string]string{"rows": string(b), "score": formatScore(*s)}}
}

func formatScore(s float64) string { return fmt.Sprintf("%.4g", s) }
