-- Tables of the full test env. Runs after the servers' schemas exist.
CREATE TABLE IF NOT EXISTS notes.note (id serial PRIMARY KEY, body text NOT NULL);
