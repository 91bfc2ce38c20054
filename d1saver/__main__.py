"""`python -m d1saver ...`: the `d1saver` command (as 0.2.0's `python -m compaction` ran the
maintenance commands, which `d1saver` mounts)."""

from d1saver.cli import main

main()
