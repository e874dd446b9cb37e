package agentenv

import "time"

// Deployment is the ledger's document for one deployed env. The sandboxes it owns are Records
// whose Deployment field names it; the document holds what is not per sandbox. It never holds the
// gateway token in clear.
type Deployment struct {
	ID         string          `json:"id"`
	Env        string          `json:"env"`             // env name
	EnvFile    string          `json:"env_file"`        // path it was deployed from
	EnvDigest  string          `json:"env_digest"`      // sha256 of the env file
	Provider   string          `json:"provider"`        // as asked (may be a chain)
	Winner     string          `json:"winner"`          // the chain member that made it
	Mode       string          `json:"mode"`            // vm or container
	VM         string          `json:"vm,omitempty"`    // deploy --into: the caller's VM record, never torn down by the deployment
	InVM       []string        `json:"in_vm,omitempty"` // VM mode: the components it starts in its VM (or, with --into, the caller's, removed by its teardown)
	State      DeploymentState `json:"state"`
	Run        string          `json:"run,omitempty"`
	Owner      Owner           `json:"owner,omitzero"` // the deploying process; zero once live
	GatewayURL string          `json:"gateway_url,omitempty"`
	TokenHash  string          `json:"token_hash,omitempty"` // sha256 of the admin bearer token
	// TokenHashes maps each role to the sha256 of its role-bound token; the tokens themselves
	// are never stored.
	TokenHashes map[string]string `json:"token_hashes,omitempty"`
	Servers     []string          `json:"servers,omitempty"`
	Tools       int               `json:"tools,omitempty"`
	URLs        map[string]string `json:"urls,omitempty"` // db_web, db_mcp, ... (no secrets)
	Error       string            `json:"error,omitempty"`
	Receipt     *Receipt          `json:"receipt,omitempty"`
	Created     time.Time         `json:"created"`
	Expires     time.Time         `json:"expires"`
	Updated     time.Time         `json:"updated"`
}

// DocID implements Doc.
func (d Deployment) DocID() string { return d.ID }

// DocState implements Doc.
func (d Deployment) DocState() string { return string(d.State) }

// DocCreated implements Doc.
func (d Deployment) DocCreated() time.Time { return d.Created }

// DeploymentState is where a deployment document stands.
type DeploymentState string

// Deployment states.
const (
	DeploymentDeploying DeploymentState = "deploying" // its deploy is under way
	DeploymentLive      DeploymentState = "live"      // deployed, until its teardown or TTL
	DeploymentFailed    DeploymentState = "failed"    // its deploy failed and was undone
	DeploymentTornDown  DeploymentState = "torn_down" // torn down, with a clean receipt
)
