"""What `d1saver serve` (and `python -m d1saver.local.server`) use unless told otherwise: in a
module of its own, so that the command line's help reads them without loading the engine."""

# Not 8787, Wrangler's default, so that `wrangler dev` can run beside the local D1.
DEFAULT_PORT = 8799
# What the served command line creates unless told otherwise (`--database NAME`).
DEFAULT_DATABASE = "local"
