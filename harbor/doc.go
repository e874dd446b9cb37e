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
//
// Native makes a task agentenv steps, which package task runs. A multi-step task runs its
// steps in turn in one container, each step's agent then its tests (under either strategy).
// Its score is multi_step_reward_strategy's: "mean" (Harbor's default) is the mean over
// all the steps, a step that did not run counting 0; "final" is the last step's reward, the
// others' recorded (each step's outputs keep its rewards) with weight 0. A step's min_reward
// gates the rest, as Harbor's trial stops early: when its reward (min_reward a number) or one
// of the named metrics of its reward.json (a table; a metric the file does not name counts as
// below) is below the minimum, the steps after it are not run, neither their agents nor their
// tests, and the task scores as above ("final": 0, since the last step never ran). An early
// stop is a scored outcome, never an error. In agentenv terms: each step's reward verifier has
// min_rewards, and "final" gives all but the last weight 0 (package task).
//
// # Artifacts
//
// After the last verifier, Native collects what Harbor collects after a trial (artifactSteps):
// LogArtifactsDir and every artifacts entry, from the container or the compose service it
// names, with collect_files steps that skip what is missing and leave the outcome alone. An
// entry's destination and exclude, a separate verifier environment and [[verifier.collect]]
// hooks are warned about when the task is read, and not applied.
//
// # Networks
//
// Native maps [environment].network_mode onto the steps' networks. "public" is the provider's
// ordinary network. "no-network" (allow_internet = false) puts the container, and every compose
// service, on an isolated deploy_network: no route out (docker's internal network), no names
// outside it. "allowlist" does the same, and adds two steps before the container: a
// deploy_network with a route out (egress_network) and a deploy_sandbox (egress) of agentenv's
// runtime image, spec.DefaultImage as the run's image map maps it, running `agentenv serve
// egress-proxy --allow HOSTS` (package egressproxy) on that network and joined to the task's
// as ProxyAlias. The container and the services start after it, with HTTP_PROXY, HTTPS_PROXY,
// http_proxy and https_proxy set to ProxyURL and NO_PROXY, no_proxy to localhost, 127.0.0.1,
// ::1 and the task's own sandboxes' names, each unless the task sets it itself.
//
// The proxy tunnels CONNECT host:port and forwards absolute http:// requests when the host is
// in allowed_hosts (an exact name, *.NAME for NAME's subdomains only, case-insensitive; an IP
// literal only when an address or CIDR prefix of the list holds it), and answers anything
// else 403 with a one-line reason. So what honours those variables reaches the allowed hosts
// (curl, wget, pip, Python's urllib and requests, git over https://, Go's net/http, apt-get's
// http and https methods), and nothing else gets out: a raw socket, ssh, git://, UDP and DNS
// fail for want of a route, and names resolve only through the proxy. Node's built-in http and
// fetch ignore the variables (unless NODE_USE_ENV_PROXY=1), as does any client whose own proxy
// setting overrides them.
//
// [agent] and [verifier] network modes (a step's too) hold for their phase. When a phase's
// differs from [environment]'s (phased), the task runs behind the proxy whatever its own mode,
// the proxy starting with [environment]'s policy ("public": every host, through it) and reading
// each phase's from PolicyFile; an exec step in the proxy's sandbox (network_agent,
// network_verify; `agentenv serve egress-policy`) writes it before each agent phase and each
// verifier and ends once the proxy has applied it, its tunnels and forwarded requests to hosts
// the phase does not allow closed.
// The proxy is a step like any other, so the lifecycle manager records, labels, tears down and
// collects it; a provider that cannot join a sandbox to two networks fails the egress step.
package harbor
