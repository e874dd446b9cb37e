// Package task runs tasks: DAGs of typed steps (deploy an env or a bare sandbox, load data, let
// an agent act through the gateway, verify, aggregate, tear down) executed as graded episodes,
// each recorded in the ledger and always ending with the teardown of everything it made.
//
// A task file is YAML or JSON, decoded strictly (an unknown field is an error naming its file,
// line and field, with a suggestion) and described by the JSON Schema [Schema]:
//
//	name: hello
//	score: all_pass                # all_pass, any_pass, weighted_average or min (the default: all_pass on pass/fail verifiers, a grade kept)
//	steps:
//	  - id: sandbox
//	    type: deploy_sandbox
//	    provider: process
//	  - id: greeting
//	    type: write_file
//	    sandbox: sandbox           # a step this one depends on
//	    path: greeting.txt
//	    content: "hello <who>\n"   # <who> comes from a seeds CSV column
//	  - id: check
//	    type: file_contains
//	    sandbox: sandbox
//	    path: greeting.txt
//	    contains: hello
//
// A step without depends_on waits for all earlier steps; depends_on: [] waits for none. Steps
// with no edge between them run concurrently. A failing step stops the episode, cancelling and
// draining the steps in flight, unless it says fail_task_on_error: false. Steps read earlier
// steps' declared outputs as ${steps.<id>.outputs.<name>}; a step may only read the steps it
// (transitively) depends on. Everything that can be checked before anything runs (the DAG,
// references, outputs, placeholders) is.
//
// Substituted values are text, except where text would let a value rewrite the step that uses
// it (bind.go): in an sql step's query each placeholder or output reference becomes a query
// parameter ($N, after the step's own args; a reference inside a '...' or $$...$$ literal makes
// the whole literal one parameter), and in the script of sh -c (bash, dash ...) each value is
// shell-quoted for where it stands. A reference inside a quoted identifier, an E'...' literal
// or an SQL comment, or inside backquotes, $((...)), ${...}, a comment or a here-document of a
// shell script, is refused when the task is loaded, naming the file, line and field. Argv
// elements that no shell reads, and files written by write_file, take values as they are.
//
// Steps may drive a deployed env's gateway mid-episode with its admin token: set_clock arms
// (or clears) the virtual clock, register_triggers registers triggers (a tool call pattern, a
// turn count or a virtual time firing a message, a tool call, a tool access change or a data
// plane call, with an optional barrier), set_tool_access disables and enables tools for a role,
// call_extension calls a server's own route through /svc/<server>/ and checks its status and
// JSON, and apply_server_config sends servers config through the extensions their cards
// advertise. Every change is in the gateway's trajectory, which the gateway_trajectory
// verifier grades record by record (examples/triggers-task).
//
// A serve_tools step serves a deploy_sandbox step's tools behind a gateway in this process:
// stdio MCP servers run in the sandbox (servers: [{name, command}], attached through the
// lifecycle manager and bridged here) and, with terminal: true, the sandbox's terminal tools as
// the server "terminal". It is an env to the steps that take one (prompt_agent hands an agent
// its default role token), its trajectory is kept as a deployed env's, and it is closed at the
// episode's end whatever ends it.
//
// A collect_files step copies named files (paths: [...]; a path ending in / is a folder, whose
// regular files `find` run in the sandbox lists) out of a deploy_sandbox step's sandbox, or an
// env component's (env, component), through the lifecycle manager into the run's folder
// (artifacts/STEP/PATH, beside its trajectories), and lists each in its output artifacts
// ([Artifact]: path, stored name, file, size, sha256); the files are bounded by max_bytes
// summed (16 MiB by default) and MaxCollectFiles: past them, or for a missing file or folder,
// the step fails as the agent's error naming the path, and stores nothing. With optional, a
// path is a file or a folder whatever its spelling, and one the sandbox lacks is skipped and
// listed in the output missing (Harbor's artifacts).
//
// Verifiers score in [0,1] with rows of what they checked; an errored verifier, and every
// verifier after a failed agent, scores 0. The task's score combines the verifiers no
// aggregate step consumes, each with its weight (weight: N, 1 by default, used by
// weighted_average); a verifier of weight 0 runs and is recorded but left out of the score in
// every mode. A verifier's gate stops a branch of the episode early: with min_score: X, a score
// below X (and, on a reward step, min_rewards: {METRIC: X}, a named metric of its reward file
// below X or missing) ends the verifier passed with its score and its output gate saying why,
// and every step that depends on it is skipped; a skipped verifier scores 0 and counts in the
// task's score, so stopping early never raises it. A closed gate is a scored outcome, not an
// error: nothing is retried. Two verifiers grade open-ended work: judge (a rubric or
// rubric_file graded by the model of [model.judge], inputs filled from step outputs, and with
// screenshot: STEP the last image that prompt_agent step's trajectory kept, such as a
// browser's screenshot, as an image part of its message; its
// answer is read as a score in [0,1] with reasons, from JSON in a code block, bare JSON or a
// bare number, and its prompt, raw answer and usage are outputs) and script (a command run in
// a deploy_sandbox step's sandbox, or in a component of a deploy_env step's env in container
// mode (env, component), with files of the task's folder copied in first; a stdout
// {"score": x, "results": [...]} decides, else the exit code; stdout and stderr are kept to
// their last 64 KiB). A task with a judge and no [model.judge] is refused before anything runs.
//
// Every failed step records whose failure it is (error_kind): agent (agent.ErrAgent, an A2A
// task failed with agentenv.error_kind=agent, a prompt step out of its timeout, an SQL check
// the service DB refused) or infra (everything else: deploys, providers, ports, a model
// endpoint's 5xx or timeout, a verifier that could not run, a judge that gave no score). An
// episode whose fatal error is infra, or with a verifier that failed on one, has outcome
// error: no sample, left out of the mean and pass@k. retries: {infra: N} on the task (or
// RunOptions.Retries, `agentenv run --retries N`) runs such an episode again from scratch,
// after tearing down what it made; a step's retry: {max: N, from: STEP_ID} re-runs only the
// span of STEP_ID and every step that depends on it, after tearing down what the span made,
// when that step fails on an infra error. Every retried attempt is kept in the run document
// (Run.Attempts) with its error and receipt.
//
// [Runner.Run] runs K episodes per seeds row and summarises them ([Summarize]) with the mean
// score, its 95% interval and pass@k for k = 1..K, over the finished episodes.
package task
