"""A copy of this checkout as a fresh clone has it, with a .venv that reuses this one's packages.

Installing PySpark into a new venv takes minutes and the network, so the copy's ``.venv`` is
an overlay: a venv of its own (``sys.prefix`` is the copy's: pip installs there, never into
the venv running the tests) whose ``.pth`` file puts this venv's site-packages after its own.
What a test installs into the overlay (an editable checkout, another pandas) comes first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tracked_files(repo: Path = REPO) -> list[str]:
    """A clean checkout's files: tracked or new, never ignored (no built .so, no .venv)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=repo, capture_output=True, check=True, timeout=60,
    ).stdout.decode()  # fmt: skip
    return [name for name in listed.split("\0") if name and (repo / name).is_file()]


def copy_checkout(dest: Path, repo: Path = REPO) -> Path:
    """The working tree's files (uncommitted edits too: what is being tested) into ``dest``."""
    for name in tracked_files(repo):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, dest / name)
    return dest


def copy_compiled_loops(dest: Path, repo: Path = REPO) -> None:
    """The compiled loops `make run` would have built (else the Python twins run, warned)."""
    for built in (repo / "src" / "pynamesrv" / "namesrv").glob("_*.so"):
        shutil.copy2(built, dest / "src" / "pynamesrv" / "namesrv" / built.name)


def overlay_venv(venv: Path, *, checkout_src: Path | None = None) -> Path:
    """A venv at ``venv`` whose packages are its own, then those of the running one.

    ``bin/pip`` runs the running venv's pip in the overlay (installs go to the overlay).
    With ``checkout_src`` the overlay imports pynamesrv from there and has the
    ``bin/pynamesrv`` script, as after `make run`'s editable install."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()
    )  # fmt: skip
    # .pth files are read in name order: the checkout before the running venv's packages.
    (site / "zz-running-venv.pth").write_text("".join(f"{path}\n" for path in _packages()))
    scripts = {"pip": "from pip._internal.cli.main import main"}
    if checkout_src is not None:
        (site / "00-checkout.pth").write_text(f"{checkout_src}\n")
        scripts["pynamesrv"] = "from pynamesrv.cli.main import cli as main"
    for name, entry in scripts.items():
        script = venv / "bin" / name
        script.write_text(f"#!{python}\nimport sys\n{entry}\n\nsys.exit(main())\n")
        script.chmod(0o755)
    return venv


def _packages() -> list[str]:
    """The running interpreter's package directories (site-packages, and those its .pth
    files add), without any that holds a pynamesrv: the copy's own must be the one found."""
    found = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    found += [p for p in sys.path if "site-packages" in Path(p).parts]
    unique = dict.fromkeys(str(Path(p)) for p in found if Path(p).is_dir())
    return [p for p in unique if not (Path(p) / "pynamesrv" / "__init__.py").exists()]


def clean_env(home: Path) -> dict[str, str]:
    """The environment of a new terminal: this process's, less what points at this checkout or
    venv (PYTHONPATH, VIRTUAL_ENV, venv directories on PATH) or changes where things go."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYNAMESRV_SHARED", "ROCKETMQ_HOME", "SPARK_REMOTE")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in dropped and not k.startswith(("SPARK_", "PYSPARK_"))
    }
    path = [
        entry
        for entry in env.get("PATH", "").split(os.pathsep)
        if entry and not (Path(entry).parent / "pyvenv.cfg").is_file()
    ]
    env.update(HOME=str(home), PATH=os.pathsep.join(path))
    return env
