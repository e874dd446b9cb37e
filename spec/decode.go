package spec

import "github.com/agentenv/agentenv/internal/yamlfile"

// decoder walks a yaml.Node tree into an Env with the strict decoder the task files share
// (internal/yamlfile): an unknown field is an error with a suggestion, the line of every field
// path is recorded for later checks, and one pass reports every problem.
type decoder struct{ *yamlfile.Decoder }

func newDecoder(file string) *decoder { return &decoder{yamlfile.NewDecoder(file)} }
