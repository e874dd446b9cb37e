INSERT INTO notes.note (body) VALUES ('first'), ('second');
