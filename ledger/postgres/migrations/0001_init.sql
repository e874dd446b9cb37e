-- Records: one row per sandbox, VM or network, written before the provider is called.
-- NULL stands for the zero time; seq orders records with the same created time.
CREATE TABLE agentenv_records (
	id          TEXT PRIMARY KEY,
	seq         BIGSERIAL NOT NULL,
	kind        TEXT NOT NULL,
	provider    TEXT NOT NULL,
	sandbox_id  TEXT NOT NULL,
	image       TEXT NOT NULL,
	run         TEXT NOT NULL,
	deployment  TEXT NOT NULL,
	role        TEXT NOT NULL,
	state       TEXT NOT NULL,
	owner_host  TEXT NOT NULL,
	owner_pid   INTEGER NOT NULL,
	owner_start BIGINT NOT NULL,
	lease_until TIMESTAMPTZ,
	expires     TIMESTAMPTZ,
	error       TEXT NOT NULL,
	labels      JSONB NOT NULL,
	attrs       JSONB NOT NULL,
	created     TIMESTAMPTZ NOT NULL,
	updated     TIMESTAMPTZ NOT NULL
);
CREATE INDEX agentenv_records_state ON agentenv_records (state);
CREATE INDEX agentenv_records_run ON agentenv_records (run);
CREATE INDEX agentenv_records_deployment ON agentenv_records (deployment);
CREATE INDEX agentenv_records_provider ON agentenv_records (provider);
CREATE INDEX agentenv_records_owner ON agentenv_records (owner_host, owner_pid, owner_start);
CREATE INDEX agentenv_records_created ON agentenv_records (created, seq);

-- Documents: deployments and runs, a JSON doc with its id, state and times beside it.
CREATE TABLE agentenv_deployments (
	id      TEXT PRIMARY KEY,
	seq     BIGSERIAL NOT NULL,
	state   TEXT NOT NULL,
	created TIMESTAMPTZ NOT NULL,
	updated TIMESTAMPTZ NOT NULL,
	doc     JSONB NOT NULL
);
CREATE INDEX agentenv_deployments_created ON agentenv_deployments (created, seq);
CREATE INDEX agentenv_deployments_state ON agentenv_deployments (state, created);

CREATE TABLE agentenv_runs (
	id      TEXT PRIMARY KEY,
	seq     BIGSERIAL NOT NULL,
	state   TEXT NOT NULL,
	created TIMESTAMPTZ NOT NULL,
	updated TIMESTAMPTZ NOT NULL,
	doc     JSONB NOT NULL
);
CREATE INDEX agentenv_runs_created ON agentenv_runs (created, seq);
CREATE INDEX agentenv_runs_state ON agentenv_runs (state, created);
