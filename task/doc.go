// Package task runs tasks: DAGs of typed steps (deploy an env or a bare sandbox, load data, let
// an agent act through the gateway, verify, aggregate, tear down) executed as graded episodes,
// each recorded in the ledger and always ending with the teardown of everything it made.
//
// A task file is YAML or JSON, decoded strictly (an unknown field is an error naming its file,
// line and field, with a suggestion) and described by the JSON Schema [Schema]:
//
//	name: hello
//	score: all_pass                # all_pass, any_pass, weighted_average or min
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
// Verifiers score in [0,1] with rows of what they checked; an errored verifier, and every
// verifier after a failed agent, scores 0. The task's score combines the verifiers no
// aggregate step consumes. [Runner.Run] runs K episodes per seeds row and summarises them with
// the mean score and pass@k.
package task
