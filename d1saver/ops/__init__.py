"""The operations, written once without I/O as Op generators: put, read, list, delete, prune,
copy, tags, rekey and transfer, with the statements they build and the rows they decode.
Imports d1saver.core, d1saver.sql and d1saver.storage."""
