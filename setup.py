"""The build step pyproject.toml cannot say: the judge rubrics and the reviser prompt, edited as data in
the checkout's judges/ folder, are copied into the built package as pats/judges_data/, so a wheel
carries them and an installed pats finds them (pats.lm.prompts.own_prompt reads either place). An
editable install skips the copy: it reads the checkout's judges/ itself. Everything else is in
pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

JUDGES = Path(__file__).resolve().parent / "judges"


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        files = sorted(JUDGES.glob("*.yaml"))
        if not files:
            raise SystemExit(
                f"no judges/*.yaml under {JUDGES}: build pats from a full clone of its repository"
            )
        target = Path(self.build_lib) / "pats" / "judges_data"
        self.mkpath(str(target))
        for path in files:
            self.copy_file(str(path), str(target / path.name))


setup(cmdclass={"build_py": BuildPy})
