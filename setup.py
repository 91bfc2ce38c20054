"""Build hook: ship the top-level schema.sql inside the d1saver package.

The top-level schema.sql is the one source of truth (also run as is by
`wrangler d1 execute --file schema.sql`). Building copies it into the package, from a source
tree or from an sdist (MANIFEST.in puts it in the sdist), so no symlink has to survive git
checkouts, sdist tarballs or Windows. The packages are listed here: d1saver's, found, and
d1saver.compaction, which pyproject.toml's package-dir maps to the top-level compaction/ folder
(package discovery cannot find a package under a name other than its folder's). Everything
else is declared in pyproject.toml.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SCHEMA = ROOT / "schema.sql"
# The gateway Worker, shipped so that `d1saver gateway init DIR` can write it out for a pip user.
# With the pages of the docs its files name (d1saver/cli/gateway.py: DOCS, GUIDE).
GATEWAY = [*sorted((ROOT / "worker").glob("*.js")), *sorted((ROOT / "worker").glob("*.json")),
           ROOT / "wrangler.toml", ROOT / "schema.sql", ROOT / ".dev.vars.example",
           *(ROOT / "docs" / name for name in ("COMPACTION.md", "MIGRATIONS.md", "REAL_ENGINE.md")),
           ROOT / "docs" / "guide" / "gateway.md"]


class BuildWithSchema(build_py):
    """build_py that also copies schema.sql into d1saver/ of the build (package data)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:  # an editable install reads the top-level file itself
            self.mkpath(str(self._schema_target().parent))
            self.copy_file(str(SCHEMA), str(self._schema_target()), preserve_mode=False)
            for source, target in self._gateway_targets():
                self.mkpath(str(target.parent))
                self.copy_file(str(source), str(target), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = [] if self.editable_mode else [
            str(self._schema_target()), *(str(target) for _, target in self._gateway_targets())]
        return [*super().get_outputs(include_bytecode), *extra]

    def _gateway_targets(self) -> list[tuple[Path, Path]]:
        base = Path(self.build_lib, "d1saver", "gateway")
        return [(source, base / source.relative_to(ROOT)) for source in GATEWAY]

    def _schema_target(self) -> Path:
        return Path(self.build_lib, "d1saver", "schema.sql")


# Namespace packages too (d1saver/ui/templates, static: package data), as pyproject.toml's
# packages.find found them before.
PACKAGES = [*find_namespace_packages(include=["d1saver", "d1saver.*"]), "d1saver.compaction"]

setup(packages=PACKAGES, cmdclass={"build_py": BuildWithSchema})
