"""Read the statements as written and as sent: `python -m d1saver.sql [NAME ...]`.

With no name, every statement's name, the module that defines it and the bytes it sends; with
names (`SELECT_PAGE_THREAD`, `TRANSFER_PAGE_CHECKPOINTS`, `MIGRATIONS[6][2]`), each statement
as written, its named parts joined, then as sent with its parameters.
"""

from __future__ import annotations

import sys

from d1saver.sql import catalogue
from d1saver.sql.query import Query


def home(query: Query) -> str:
    """The file of the module that defines `query` (a migration step's: schema.py)."""
    for module in catalogue.MODULES:
        if any(s is query for s in module.STATEMENTS):
            return f"d1saver/sql/{module.__name__.rsplit('.', 1)[1]}.py"
    return "d1saver/sql/schema.py"


def show(query: Query) -> str:
    params = ", ".join(f"?{i} {name}" for i, name in enumerate(query.params, 1))
    return (f"-- {query.name} ({home(query)})\n{query.text.strip()}\n\n"
            f"-- as sent, {len(query.sql.encode())} bytes{', params ' + params if params else ''}:"
            f"\n{query.sql}\n")


def main(names: list[str]) -> int:
    by_name = {s.name: s for s in catalogue.STATEMENTS}
    if not names:
        for s in catalogue.STATEMENTS:
            print(f"{s.name:40} {home(s):32} {len(s.sql.encode()):6}")
        return 0
    unknown = [n for n in names if n not in by_name]
    if unknown:
        print(f"no statement named {', '.join(unknown)} (list them: python -m d1saver.sql)",
              file=sys.stderr)
        return 2
    print("\n".join(show(by_name[n]) for n in names), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
