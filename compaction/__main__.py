"""`python -m compaction ...`: the same commands as `d1saver compact|tag|untag|threads|history`."""

from compaction.cli import app

app(prog_name="python -m compaction")
