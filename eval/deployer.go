package eval

import (
	"context"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/spec"
	"github.com/agentenv/agentenv/task"
)

// EnvDeployer deploys the env files of task steps through package deploy, with the defaults of
// the command that runs them. A deployment stays owned by the running process: the run tears it
// down, or gc does if the process dies.
type EnvDeployer struct {
	Deployer *deploy.Deployer
	// Defaults are the options of every deploy: Provider and TTL where a step sets none,
	// PassEnv, the gateway caps and Store always. Run and Own are the step's.
	Defaults deploy.Options
}

// Deploy loads envFile and deploys it for the step's run, owned by this process.
func (d EnvDeployer) Deploy(ctx context.Context, envFile string, o task.DeployOptions) (task.DeployedEnv, error) {
	env, err := spec.Load(envFile)
	if err != nil {
		return task.DeployedEnv{}, err
	}
	opts := d.Defaults
	opts.Run, opts.Own = o.Run, true
	if o.Provider != "" {
		opts.Provider = o.Provider
	}
	if o.TTL != 0 {
		opts.TTL = o.TTL
	}
	opts.Pinned, opts.Logins = o.Pinned, o.Logins
	res, err := d.Deployer.Deploy(ctx, env, opts)
	if err != nil {
		return task.DeployedEnv{}, err
	}
	return task.DeployedEnv{ID: res.Doc.ID, GatewayURL: res.GatewayURL, Token: res.Token, Tokens: res.Tokens,
		DatabaseURL: res.DatabaseURL, Records: res.Records, Queued: res.Queued, Ready: res.Ready}, nil
}

// Teardown tears the deployment id down with a verified receipt.
func (d EnvDeployer) Teardown(ctx context.Context, id string) (agentenv.Receipt, error) {
	return d.Deployer.Teardown(ctx, id)
}
