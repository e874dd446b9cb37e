-- Records: one row per sandbox, VM or network, written before the provider is called.
-- Times are TEXT in RFC 3339 with nanoseconds in UTC (fixed width, so they sort as text);
-- NULL stands for the zero time. Labels and attrs are JSON objects.
CREATE TABLE records (
	id          TEXT PRIMARY KEY,
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
	owner_start INTEGER NOT NULL,
	lease_until TEXT,
	expires     TEXT,
	error       TEXT NOT NULL,
	labels      TEXT NOT NULL,
	attrs       TEXT NOT NULL,
	created     TEXT NOT NULL,
	updated     TEXT NOT NULL
);
CREATE INDEX records_state ON records (state);
CREATE INDEX records_run ON records (run);
CREATE INDEX records_deployment ON records (deployment);
CREATE INDEX records_provider ON records (provider);
CREATE INDEX records_owner ON records (owner_host, owner_pid, owner_start);
CREATE INDEX records_created ON records (created);

-- Documents: deployments and runs, a JSON doc with its id, state and times beside it.
CREATE TABLE deployments (
	id      TEXT PRIMARY KEY,
	state   TEXT NOT NULL,
	created TEXT NOT NULL,
	updated TEXT NOT NULL,
	doc     TEXT NOT NULL
);
CREATE INDEX deployments_created ON deployments (created);
CREATE INDEX deployments_state ON deployments (state, created);

CREATE TABLE runs (
	id      TEXT PRIMARY KEY,
	state   TEXT NOT NULL,
	created TEXT NOT NULL,
	updated TEXT NOT NULL,
	doc     TEXT NOT NULL
);
CREATE INDEX runs_created ON runs (created);
CREATE INDEX runs_state ON runs (state, created);
