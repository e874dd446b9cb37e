// Package spec loads and validates env files: the YAML that declares an environment's MCP
// servers, its optional PostgreSQL service DB with sidecars, and its gateway.
//
//	env, err := spec.Load("examples/notes/env.yaml")
//
// Decoding is strict and every problem is reported at once, each as an [*Error] that names the
// file, line and field path and wraps agentenv.ErrInvalid:
//
//	examples/notes/env.yaml:12: servers[0].imgae: unknown field (did you mean "image"?)
//
// [Env.Components] lays an env out as the components a deployer starts, in order, and
// [RenderCompose] renders the same stack as a docker compose file. [EnvSchema] is the
// published JSON Schema of the format; README.md documents it.
package spec
