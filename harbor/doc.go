// Package harbor reads Harbor task folders, the format Terminal-Bench 2 ships in, into Go
// values: task.toml (schema 1.0 to 1.4, deprecated spellings included), instruction.md, the
// environment (environment/Dockerfile, environment/docker-compose.yaml or a prebuilt
// [environment].docker_image), the steps of a multi-step task (steps/NAME/), and folders of
// tasks (datasets).
//
// It reads and checks; it runs nothing. Load is strict where Harbor would fail later (a wrong
// type, a missing instruction, an environment it cannot make) and lenient where Harbor is (an
// unknown key is ignored, with a warning naming its line). Every error names the file, line
// and key and wraps agentenv.ErrInvalid.
//
// The layout, as Harbor reads it:
//
//	task.toml            configuration ([task], [metadata], [agent], [verifier], [environment], [solution], [[steps]])
//	instruction.md       the instruction (optional for a multi-step task)
//	environment/         Dockerfile, or docker-compose.yaml whose service "main" is the agent's container
//	tests/test.sh        the verifier: writes /logs/verifier/reward.txt (a number) or reward.json (named metrics)
//	solution/solve.sh    the reference solution (optional)
//	steps/NAME/          per step of a multi-step task: instruction.md, tests/, solution/
package harbor
