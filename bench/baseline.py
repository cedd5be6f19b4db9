"""Install an earlier revision of kcache into a folder, to benchmark before and after in one run.

Usage: python bench/baseline.py REV DIR     (e.g. python bench/baseline.py f49fe72 .bench/base)

``git worktree add --detach`` of REV in a temp folder, then ``pip install --no-deps --target
DIR`` of it (a real wheel build, so ``kcache.dispatcher`` and ``kcache.cli`` map as installed).
Benchmarks take ``--baseline DIR`` and run their measured processes once with
``PYTHONPATH=DIR`` (the earlier revision) and once without (this tree), interleaved.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def install(rev: str, target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), rev],
                       check=True)
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--upgrade", "--target", str(target), str(tree)],
                           check=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                           check=False)
    (target / "BASELINE_REV").write_text(rev + "\n")


def with_baseline(env: dict, baseline: Path | None) -> dict:
    """``env`` for a process that imports the baseline's kcache (unchanged when None)."""
    env = dict(env)
    if baseline is not None:
        env["PYTHONPATH"] = str(baseline) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    install(sys.argv[1], Path(sys.argv[2]).resolve())
    print(Path(sys.argv[2]).resolve())
