"""The install paths the docs show work as written (issue 26): `make dist` on a clean
checkout gives an sdist and a platform wheel, each installs into a fresh venv with its
dependencies from the index and serves; the Docker build's file set is enough for the
compiled wheel; and a running server says (log line, metric) whether its compiled loops run."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from served import ENTRY_POINT, free_port
from waiting import GUARD_S, wait_until

REPO = Path(__file__).resolve().parents[2]
COMPILED = ("pynamesrv/namesrv/_fastpath.", "pynamesrv/namesrv/_routed.")
ALL_COMPILED = "compiled loops in use: fastpath, routed"
# A fresh venv and pip against the index: bounded, but well above pytest's default 120 s.
INSTALL_TIMEOUT_S = 600


def clean_env(home: Path) -> dict[str, str]:
    """No PYTHONPATH (the worktree's src/ must not stand in for the installed package)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    return env


def serve_until_line(argv: list[str], env: dict[str, str], log: Path, line: str) -> str:
    """Start ``serve``, wait for ``line`` in its log, stop it with SIGTERM; the log so far."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out, env=env
        )
    try:

        def seen() -> bool:
            assert proc.poll() is None, log.read_text()
            return line in log.read_text()

        wait_until(seen, f"{line!r} in the log of {argv}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(GUARD_S) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child, by its handle
            proc.wait()
    return log.read_text()


# ---------------------------------------------------------------- the start-up line, metric


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        body = answer.read().decode()
    return {
        sample.labels["loop"]: sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == "pynamesrv_compiled_loops"
    }


def serve_and_scrape(argv: list[str], tmp_path: Path) -> tuple[str, dict[str, float]]:
    http_port = free_port()
    log = tmp_path / "serve.log"
    argv = [*argv, "serve", "--listen", "127.0.0.1", "--port", "0", "--http-port", str(http_port)]
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out, env=env
        )
    try:

        def metrics() -> tuple[dict[str, float]] | None:  # answered, with or without loops
            assert proc.poll() is None, log.read_text()
            try:
                return (scrape(http_port),)
            except OSError:
                return None

        [loops] = wait_until(metrics, "/metrics")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(GUARD_S) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return log.read_text(), loops


def test_serve_says_the_compiled_loops_are_in_use(tmp_path: Path) -> None:
    text, loops = serve_and_scrape([str(ENTRY_POINT)], tmp_path)
    assert ALL_COMPILED in text
    assert "Python twins" not in text
    assert loops == {"fastpath": 1.0, "routed": 1.0}


def test_serve_warns_when_the_python_twins_run(tmp_path: Path) -> None:
    """As an install without a compiler: the compiled modules cannot be imported."""
    blocked = (
        "import sys\n"
        "sys.modules['pynamesrv.namesrv._fastpath'] = None\n"
        "sys.modules['pynamesrv.namesrv._routed'] = None\n"
        "from pynamesrv.cli.main import cli\n"
        "cli(prog_name='pynamesrv')\n"
    )
    text, loops = serve_and_scrape([sys.executable, "-c", blocked], tmp_path)
    line = next(line for line in text.splitlines() if "compiled loops in use" in line)
    assert "WARN" in line, line
    assert "compiled loops in use: none" in line
    assert "Python twins run for fastpath (" in line and "routed (" in line
    assert "pynamesrv.namesrv._fastpath" in line  # why: the import error
    assert loops == {"fastpath": 0.0, "routed": 0.0}


# ---------------------------------------------------------------------------- Docker


def dockerignore_allows(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    included = True
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in patterns:
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            included = negate
    return included


def tracked_files() -> list[str]:
    """A clean checkout's files: tracked or new, never ignored (no built .so, no .venv)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, check=True, timeout=60,
    ).stdout.decode()  # fmt: skip
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


def copy_files(names: list[str], root: Path) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def assert_compiled_wheel(wheel: Path) -> None:
    assert not wheel.name.endswith("-none-any.whl"), f"{wheel.name}: no compiled loops"
    names = wheel_names(wheel)
    for module in COMPILED:
        assert any(n.startswith(module) and n.endswith(".so") for n in names), (module, names)


@pytest.mark.timeout(INSTALL_TIMEOUT_S)
def test_the_files_the_dockerfile_copies_build_the_compiled_wheel(tmp_path: Path) -> None:
    from test_deploy import dockerfile

    instructions = dockerfile()
    first_stage = instructions[: [k for k, _ in instructions].index("FROM", 1)]
    build_runs = " ".join(args for k, args in first_stage if k == "RUN")
    assert "gcc" in build_runs  # the slim base has no compiler
    assert "_fastpath" in build_runs and "_routed" in build_runs  # a build without them fails
    patterns = (REPO / ".dockerignore").read_text().splitlines()
    context = [n for n in tracked_files() if dockerignore_allows(n, patterns)]
    workdir = tmp_path / "src"
    copied: list[str] = []
    for keyword, args in first_stage:
        if keyword != "COPY":
            continue
        *sources, dest = args.split()
        for source in sources:
            inside = [n for n in context if n == source or n.startswith(source.rstrip("/") + "/")]
            assert inside, f"COPY {source}: nothing in the build context"
            for name in inside:  # a file into the directory dest, a directory's contents
                if name == source:
                    target = workdir / dest / Path(name).name
                else:
                    target = workdir / dest / Path(name).relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, target)
                copied.append(name)
    assert "setup.py" in copied
    out = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), str(workdir)],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = out.glob("pynamesrv-*.whl")
    assert_compiled_wheel(wheel)
    # The final stage installs the build stage's wheels, not sources.
    final = instructions[[k for k, _ in instructions].index("FROM", 1) :]
    assert any(k == "COPY" and args.startswith("--from=build /wheels") for k, args in final)


# --------------------------------------------------------------------- make dist, pip install


@pytest.mark.timeout(INSTALL_TIMEOUT_S)
def test_make_dist_wheel_and_sdist_install_in_fresh_venvs_and_serve(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    copy_files(tracked_files(), checkout)
    env = clean_env(Path.home())  # pip's cache stays where it is
    made = subprocess.run(
        ["make", "dist", f"PYTHON={sys.executable}"],
        cwd=checkout, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert "platform wheel with the compiled loops" in made.stdout
    [wheel] = (checkout / "dist").glob("pynamesrv-*.whl")
    [sdist] = (checkout / "dist").glob("pynamesrv-*.tar.gz")
    assert_compiled_wheel(wheel)
    with tarfile.open(sdist) as archive:
        members = archive.getnames()
    root = sdist.name.removesuffix(".tar.gz")
    for shipped in ("setup.py", "deploy/namesrv.properties", "deploy/pynamesrv.service"):
        assert f"{root}/{shipped}" in members, shipped
    example = tmp_path / "namesrv.properties"  # the unit's /etc/pynamesrv file, its
    shipped = (checkout / "deploy" / "namesrv.properties").read_text()  # state under tmp_path
    example.write_text(shipped.replace("=/var/lib/", f"={tmp_path}/var/lib/"))
    for name, artifact in (("wheel", wheel), ("sdist", sdist)):
        venv = tmp_path / f"venv-{name}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        installed = subprocess.run(
            [venv / "bin" / "pip", "install", "--quiet", str(artifact)],
            capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stdout + installed.stderr
        home = tmp_path / f"home-{name}"
        home.mkdir()
        argv = [
            str(venv / "bin" / "pynamesrv"), "serve", "-c", str(example),
            "--listen", "127.0.0.1", "--port", "0", "--http-port", "0",
        ]  # fmt: skip
        text = serve_until_line(argv, clean_env(home), tmp_path / f"{name}.log", ALL_COMPILED)
        assert "The Name Server boot success" in text, text
        assert (
            str(venv)
            in subprocess.run(
                [venv / "bin" / "python", "-c", "import pynamesrv; print(pynamesrv.__file__)"],
                capture_output=True,
                text=True,
                env=clean_env(home),
                check=True,
                timeout=60,
            ).stdout
        )  # the installed package ran, not the checkout


# ---------------------------------------------------------------------------- the docs


def test_no_install_line_asks_pypi_for_pynamesrv() -> None:
    """pynamesrv is not on PyPI: `pip install pynamesrv` / `'pynamesrv[extra]'` cannot work."""
    texts = [REPO / "README.md", REPO / "Dockerfile", *REPO.glob("docs/*.md")]
    texts += [p for p in REPO.glob("deploy/**/*") if p.is_file()]
    texts += list(REPO.glob("src/**/*.py"))
    wrong = re.compile(r"pip install (?:-U |--upgrade )?['\"]?pynamesrv\b")
    for path in texts:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.lstrip().startswith("#") or path.suffix != ".py":
                assert not wrong.search(line), f"{path.relative_to(REPO)}:{number}: {line}"


def test_systemd_header_installs_from_the_checkout_and_the_shipped_example(
    tmp_path: Path,
) -> None:
    header = [
        line.removeprefix("#").strip()
        for line in (REPO / "deploy" / "pynamesrv.service").read_text().splitlines()
        if line.startswith("#")
    ]
    assert any(line.endswith("/opt/pynamesrv/bin/pip install .") for line in header), header
    [installs] = [line for line in header if line.startswith("install ") and ".properties" in line]
    source = REPO / next(word for word in installs.split() if word.startswith("deploy/"))
    assert source.is_file(), source  # deploy/namesrv.properties
    # -p checks what a start checks, the state directory's place included: here under
    # tmp_path (/var/lib is not this test's to write).
    config = tmp_path / "namesrv.properties"
    config.write_text(source.read_text().replace("=/var/lib/", f"={tmp_path}/var/lib/"))
    checked = subprocess.run(
        [str(ENTRY_POINT), "serve", "-c", str(config), "-p"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "listenPort=9876" in checked.stdout.splitlines()
