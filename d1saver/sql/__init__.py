"""The SQL d1saver sends: the schema, the forward-only migrations and every named statement.
Pure text; imports nothing else of d1saver."""
