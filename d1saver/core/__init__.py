"""The shared vocabulary: the error tree, statements and results as pure data, the actions an
operation yields, id and settings validation. Imports nothing else of d1saver."""
