"""Many databases: which database a thread lives in, one driver per database, and the
operations run across them (fan-out, merge, moves). Imports every layer below it."""
