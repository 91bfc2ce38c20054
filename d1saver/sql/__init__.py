"""The SQL d1saver sends: the schema, the forward-only migrations and every named statement,
one module per concern, statements that share text joined from named parts (parts.py);
catalogue.py aggregates them (docs/SQL.md). Pure text; imports nothing else of d1saver."""
