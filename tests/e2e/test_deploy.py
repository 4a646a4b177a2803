"""The deployment files hold what they promise, checked without a container runtime or a
cluster: the Dockerfile is linted and its health check and command run against real
servers, the systemd unit is verified by systemd-analyze and its command line run, the
Kubernetes example is parsed and cross-checked, and every metric the Grafana dashboard
queries is one a running server really exports."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import deployed
import pytest
import yaml
from deployed import Deployment
from prometheus_client.parser import text_string_to_metric_families

from helpers import query_route, request_once
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.http.app import HttpServer
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codes import ResponseCode

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
REMOTING_PORT, HTTP_PORT = 9876, 9880
# Labels Prometheus adds to every scraped series (target labels), not the server.
TARGET_LABELS = {"instance", "job", "namespace", "pod", "container", "service", "endpoint"}
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "by", "without", "rate", "increase", "irate",
    "histogram_quantile", "label_values", "topk", "bottomk", "on", "ignoring", "group_left",
    "offset", "and", "or", "unless",
}  # fmt: skip


# ---------------------------------------------------------------------------- Dockerfile


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    assert not pending, "a continuation line runs off the end of the Dockerfile"
    return instructions


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last_from = max(i for i, (k, _) in enumerate(instructions) if k == "FROM")
    return instructions[last_from:]


def test_dockerfile_is_slim_pinned_non_root_and_documents_ports_and_volume() -> None:
    instructions = dockerfile()
    keywords = {k for k, _ in instructions}
    assert keywords <= {
        "FROM", "WORKDIR", "COPY", "RUN", "ENV", "VOLUME", "EXPOSE", "USER", "HEALTHCHECK",
        "STOPSIGNAL", "ENTRYPOINT", "CMD", "ARG", "LABEL",
    }, keywords  # fmt: skip
    assert "ADD" not in keywords  # no remote URLs or archives unpacked behind our back
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = tuple(int(p) for p in requires.removeprefix(">=").split("."))
    for keyword, args in instructions:
        if keyword != "FROM":
            continue
        image = args.split()[0]
        match = re.fullmatch(
            r"python:(\d+)\.(\d+)\.(\d+)-slim-[a-z]+(@sha256:[0-9a-f]{64})?", image
        )
        assert match, f"base image {image} is not a pinned slim Python (x.y.z-slim-<distro>)"
        assert (int(match[1]), int(match[2])) >= minimum
    final = final_stage(instructions)
    order = [k for k, _ in final]
    users = [args for k, args in final if k == "USER"]
    assert len(users) == 1
    user, _, group = users[0].partition(":")
    assert user not in ("root", "0") and group not in ("root", "0")
    assert order.index("USER") < order.index("ENTRYPOINT")  # the server never runs as root
    exposed = {p for k, args in final if k == "EXPOSE" for p in args.split()}
    assert exposed == {str(REMOTING_PORT), str(HTTP_PORT)}
    volumes = [json.loads(args) for k, args in final if k == "VOLUME"]
    env = " ".join(args for k, args in final if k == "ENV")
    assert volumes == [["/data"]] and "HOME=/data" in env  # the state under ~ is the volume
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["pynamesrv"]
    assert json.loads(dict(final)["CMD"]) == ["serve"]
    # What COPY takes from the build context exists and is not excluded by .dockerignore.
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore
    for keyword, args in instructions:
        if keyword == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert (REPO / source).exists(), source
                assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"
    # The comments at the top say how to run it with the ports and the volume.
    header = (REPO / "Dockerfile").read_text()
    assert f"-p {REMOTING_PORT}:{REMOTING_PORT} -p {HTTP_PORT}:{HTTP_PORT}" in header
    assert "-v namesrv-data:/data" in header


def healthcheck_command() -> list[str]:
    args = dict(final_stage(dockerfile()))["HEALTHCHECK"]
    assert "--interval=" in args and "--timeout=" in args
    command = json.loads(args[args.index("CMD") + len("CMD") :].strip())
    assert f"127.0.0.1:{HTTP_PORT}/healthz" in " ".join(command)
    return command


async def run_healthcheck(command: list[str], http_port: int) -> int:
    """The image's HEALTHCHECK command, aimed at ``http_port`` (the image's python is ours)."""
    argv = [sys.executable if c == "python" else c.replace(str(HTTP_PORT), str(http_port))
            for c in command]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await asyncio.wait_for(proc.wait(), 30)


async def test_dockerfile_healthcheck_follows_healthz(tmp_path: Path) -> None:
    from pynamesrv.namesrv.config import NamesrvConfig

    command = healthcheck_command()
    config = NamesrvConfig(
        listen_port=0,
        kv_config_path=str(tmp_path / "kv.json"),
        config_store_path=str(tmp_path / "ns.properties"),
        journal_enable=False,
    )
    controller = NamesrvController(config, host="127.0.0.1")
    http = HttpServer(controller.view)
    port = await http.start("127.0.0.1", 0)
    try:
        assert await run_healthcheck(command, port) != 0  # HTTP up, remoting not yet: 503
        await controller.start()
        assert await run_healthcheck(command, port) == 0
    finally:
        await http.stop()
        await controller.stop()
    assert await run_healthcheck(command, port) != 0  # nothing listens


def image() -> dict[str, Any]:
    """What the image gives every container: environment, working directory, volumes,
    entry point and command."""
    final = final_stage(dockerfile())
    env: dict[str, str] = {}
    for keyword, args in final:
        if keyword == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))
    return {
        "env": env,
        "workdir": dict(final)["WORKDIR"],
        "volumes": [v for k, args in final if k == "VOLUME" for v in json.loads(args)],
        "entrypoint": json.loads(dict(final)["ENTRYPOINT"]),
        "cmd": json.loads(dict(final)["CMD"]),
    }


def test_image_command_keeps_its_state_under_home_the_volume(tmp_path: Path) -> None:
    """ENTRYPOINT + CMD with the image's HOME: the KV store and journal land in the volume."""
    final = dict(final_stage(dockerfile()))
    argv = [*json.loads(final["ENTRYPOINT"]), *json.loads(final["CMD"])]
    assert argv[0] == "pynamesrv"
    data = tmp_path / "data"
    env = {"PATH": str(ENTRY_POINT.parent), "HOME": str(data), "PYTHONUNBUFFERED": "1"}
    if os.environ.get("PYTHONPATH"):  # this checkout's code (PYTHONPATH=src), not the venv's
        env["PYTHONPATH"] = os.pathsep.join(
            str(Path(p).absolute()) for p in os.environ["PYTHONPATH"].split(os.pathsep) if p
        )
    printed = subprocess.run(
        [ENTRY_POINT, *argv[1:], "-p"], capture_output=True, text=True, env=env, timeout=60
    )
    props = dict(line.split("=", 1) for line in printed.stdout.splitlines())
    assert props["stateDir"] == str(data / "namesrv")
    assert props["kvConfigPath"] == str(data / "namesrv" / "kvConfig.json")
    assert props["journalDir"] == str(data / "namesrv" / "journal")
    assert (props["listenPort"], props["httpPort"]) == (str(REMOTING_PORT), str(HTTP_PORT))
    assert props["bindAddress"] == "0.0.0.0"  # reachable through the published ports


# ---------------------------------------------------------------------------- systemd


def unit_sections(text: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_systemd_unit_verifies_and_its_command_line_is_accepted(tmp_path: Path) -> None:
    text = (REPO / "deploy" / "pynamesrv.service").read_text()
    sections = unit_sections(text)
    service = sections["Service"]
    assert service["User"] == ["pynamesrv"] and service["Group"] == ["pynamesrv"]
    assert service["Restart"] == ["on-failure"]
    assert "HOME=/var/lib/pynamesrv" in service["Environment"]
    assert service["StateDirectory"] == ["pynamesrv"]  # the example file's stateDir is in it
    assert "ReadWritePaths" not in service  # the configuration stays read-only
    assert sections["Install"]["WantedBy"] == ["multi-user.target"]
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == "/opt/pynamesrv/bin/pynamesrv" and argv[1] == "serve"

    # systemd's own check, with the binary at the place this test environment has it.
    analyze = shutil.which("systemd-analyze")
    if analyze is not None:
        unit = tmp_path / "pynamesrv.service"
        unit.write_text(text.replace(argv[0], str(ENTRY_POINT)))
        verified = subprocess.run(
            [analyze, "verify", unit], capture_output=True, text=True, timeout=60
        )
        assert (verified.returncode, verified.stderr) == (0, ""), verified.stderr

    # The same flags, with this test's files: serve accepts them (-p: print and exit).
    config = tmp_path / "namesrv.properties"
    config.write_text("listenPort=19876\n")
    flags = [tmp_path_for(a, tmp_path, config) for a in argv[2:]]
    result = subprocess.run(
        [ENTRY_POINT, "serve", *flags, "-p"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    props = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert props["pidFile"] == str(tmp_path / "pynamesrv.pid")
    assert props["configStorePath"] == str(config)


def tmp_path_for(arg: str, tmp_path: Path, config: Path) -> str:
    if arg.endswith(".properties"):
        return str(config)
    if arg.endswith(".pid"):
        return str(tmp_path / Path(arg).name)
    return arg


# ---------------------------------------------------------------------------- Kubernetes


def test_kubernetes_example_wires_ports_probes_volume_and_pod_monitor() -> None:
    documents = list(yaml.safe_load_all((REPO / "deploy/kubernetes/pynamesrv.yaml").read_text()))
    by_kind = {d["kind"]: d for d in documents}
    assert sorted(by_kind) == [
        "ConfigMap", "Deployment", "PersistentVolumeClaim", "PodMonitor", "Service"
    ]  # fmt: skip
    deployment, service, monitor = by_kind["Deployment"], by_kind["Service"], by_kind["PodMonitor"]
    assert deployment["apiVersion"] == "apps/v1" and monitor["apiVersion"].startswith(
        "monitoring.coreos.com/"
    )
    spec = deployment["spec"]
    # One name server per Deployment: brokers must register with every name server.
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod_labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    (container,) = spec["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"remoting": REMOTING_PORT, "http": HTTP_PORT}
    # Readiness follows /healthz (routes served); liveness only that the process answers, so a
    # server in the 5.x start-up wait is taken out of the Service but never restarted.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz/live", "port": "http"}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)
    assert {p["port"] for p in service["spec"]["ports"]} == set(ports.values())
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")

    # Runs as the image's user, state on the claim at the image's volume.
    user = dict(final_stage(dockerfile()))["USER"].split(":")[0]
    pod_security = spec["template"]["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True and str(pod_security["runAsUser"]) == user
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert mounts["data"] == "/data"
    assert (
        volumes["data"]["persistentVolumeClaim"]["claimName"]
        == (by_kind["PersistentVolumeClaim"]["metadata"]["name"])
    )
    assert volumes["config"]["configMap"]["name"] == by_kind["ConfigMap"]["metadata"]["name"]
    assert container["args"][:2] == ["serve", "-c"]
    config_path = Path(container["args"][2])
    assert str(config_path.parent) == mounts["config"]


def test_kubernetes_config_map_is_a_valid_config(tmp_path: Path) -> None:
    documents = yaml.safe_load_all((REPO / "deploy/kubernetes/pynamesrv.yaml").read_text())
    config_map = next(d for d in documents if d["kind"] == "ConfigMap")
    (name, text), *_ = config_map["data"].items()
    config = tmp_path / name
    config.write_text(deployed.relocated(tmp_path, text))  # /data: the claim, here
    result = subprocess.run(
        [ENTRY_POINT, "serve", "-c", config, "-p"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    props = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert (props["listenPort"], props["httpPort"]) == (str(REMOTING_PORT), str(HTTP_PORT))
    assert props["instanceName"]  # stable across pod replacements: one journal directory
    # Every place it writes is on the claim (/data), named in the map.
    assert props["stateDir"] == f"{tmp_path}/data/namesrv"
    assert props["kvConfigPath"] == f"{tmp_path}/data/namesrv/kvConfig.json"
    assert props["journalDir"] == f"{tmp_path}/data/namesrv/journal"
    # The address service hands out every name server: this one and the copy's (-b).
    service = next(
        d
        for d in yaml.safe_load_all((REPO / "deploy/kubernetes/pynamesrv.yaml").read_text())
        if d["kind"] == "Service"
    )
    own = f"{service['metadata']['name']}:{REMOTING_PORT}"
    assert props["nsAddrList"] == f"{own};{own.replace('-a:', '-b:')}"


# ---------------------------------------------------------------------------- as written


def kubernetes_deployment() -> Deployment:
    """The Deployment's container on the image, as the manifest says."""
    documents = list(yaml.safe_load_all((REPO / "deploy/kubernetes/pynamesrv.yaml").read_text()))
    config_maps = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ConfigMap"}
    pod = next(d for d in documents if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    built = image()
    assert (container.get("command") or built["entrypoint"]) == ["pynamesrv"]
    env = {**built["env"], **{e["name"]: e["value"] for e in container.get("env", [])}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    files: dict[str, str] = {}
    writable = []
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            assert mount.get("readOnly") is True  # as kubelet mounts a ConfigMap anyway
            for name, text in config_maps[volume["configMap"]["name"]]["data"].items():
                files[f"{mount['mountPath']}/{name}"] = text
        elif not mount.get("readOnly"):
            writable.append(mount["mountPath"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    return Deployment(
        argv=container.get("args", built["cmd"]),
        env=env,
        cwd=container.get("workingDir") or built["workdir"],
        files=files,
        writable=writable,
    )


def systemd_deployment() -> Deployment:
    """The unit's ExecStart with its environment and sandbox, the example configuration
    installed where its header says."""
    text = (REPO / "deploy" / "pynamesrv.service").read_text()
    service = unit_sections(text)["Service"]
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == "/opt/pynamesrv/bin/pynamesrv"
    config = argv[argv.index("-c") + 1]
    assert f"deploy/namesrv.properties {config} " in text  # the install line of the header
    assert service["ProtectSystem"] == ["strict"]  # all read-only but what is named below
    writable = [f"/var/lib/{name}" for name in service.get("StateDirectory", [])]
    writable += [f"/run/{name}" for name in service.get("RuntimeDirectory", [])]
    writable += [p for entry in service.get("ReadWritePaths", []) for p in entry.split()]
    if service.get("PrivateTmp") == ["yes"]:
        writable.append("/tmp")
    env = dict(
        item.split("=", 1)
        for entry in service.get("Environment", [])
        for item in shlex.split(entry)
    )
    return Deployment(
        argv=argv[1:],
        env=env,
        cwd=service["WorkingDirectory"][0],
        files={config: (REPO / "deploy" / "namesrv.properties").read_text()},
        writable=writable,
    )


def docker_deployment() -> Deployment:
    """The `docker run` of docs/operations.md that mounts a configuration read-only, on the
    image: its volumes writable, the rest not (the image's user owns nothing else)."""
    guide = (REPO / "docs" / "operations.md").read_text()
    section = guide.split("\n## Docker\n", 1)[1].split("\n## ", 1)[0]
    joined = section.replace("\\\n", " ")
    (line,) = [x for x in joined.splitlines() if x.startswith("docker run") and ":ro" in x]
    words = shlex.split(line.replace("$PWD", str(REPO)))[2:]
    mounts = []
    while words[0].startswith("-"):
        option = words.pop(0)
        if option in ("-v", "--volume"):
            mounts.append(words.pop(0))
        elif option != "-d":
            words.pop(0)  # --name, -p: their value
    image_name, *args = words
    assert image_name == "pynamesrv:0.1.0"
    built = image()
    files: dict[str, str] = {}
    writable = list(built["volumes"])
    for mount in mounts:
        source, target, *mode = mount.split(":")
        if source.startswith("/"):  # a file of the host
            assert mode == ["ro"], mount
            files[target] = Path(source).read_text()
        else:  # a named volume
            assert target in writable, mount
    assert built["entrypoint"] == ["pynamesrv"]
    return Deployment(
        argv=args, env=built["env"], cwd=built["workdir"], files=files, writable=writable
    )


def serves_with_read_only_config(deployment: Deployment, tmp_path: Path) -> tuple[int, str]:
    """Run it; it serves, keeps a KV entry and its journal under stateDir, and answers an
    updateNamesrvConfig with the documented "persist failed". Returns what its address
    service answered."""
    config = deployment.argv[deployment.argv.index("-c") + 1]
    # Finding 2: the deployment names where its state goes, never a default it inherits.
    assert "--state-dir" in deployment.argv or re.search(
        r"^stateDir=/", deployment.files[config], re.MULTILINE
    )
    with deployed.run(deployment, tmp_path) as running:
        put = asyncio.run(request_once(running.port, requests.put_kv_config("ns", "k", "v")))
        update = asyncio.run(
            request_once(running.port, requests.update_namesrv_config({"productEnvName": "x"}))
        )
        props = dict(
            line.split("=", 1)
            for line in asyncio.run(request_once(running.port, requests.get_namesrv_config()))
            .body.decode()
            .splitlines()
        )
        nsaddr = running.http_get("/rocketmq/nsaddr")
    assert put.code == ResponseCode.SUCCESS, put.remark
    assert update.code == ResponseCode.SYSTEM_ERROR
    assert update.remark == (
        f"persist failed: the config store {running.path(config)} is read-only (change the "
        "file there and restart)"
    )
    state = Path(props["stateDir"])
    assert state.is_relative_to(running.root)
    assert any(state.is_relative_to(running.path(w)) for w in deployment.writable)
    assert json.loads((state / "kvConfig.json").read_text()) == {"configTable": {"ns": {"k": "v"}}}
    assert Path(props["journalDir"]).is_relative_to(state)
    assert any(Path(props["journalDir"]).glob("*/events-*"))
    assert f"state directory {state};" in running.output
    return nsaddr


def test_kubernetes_manifest_starts_as_written_with_its_config_read_only(tmp_path: Path) -> None:
    """Issue 35 finding 1: the manifest crash-looped (the lock beside the read-only
    ConfigMap). Its container, mounts and read-only root, run here: it serves, writes only
    the claim, and its address service lists both name servers (finding 4)."""
    nsaddr = serves_with_read_only_config(kubernetes_deployment(), tmp_path)
    assert nsaddr == (200, "pynamesrv-a:9876;pynamesrv-b:9876")


def test_systemd_unit_starts_as_written_with_its_config_read_only(tmp_path: Path) -> None:
    serves_with_read_only_config(systemd_deployment(), tmp_path)


def test_docker_instructions_start_as_written_with_the_config_read_only(tmp_path: Path) -> None:
    serves_with_read_only_config(docker_deployment(), tmp_path)


def test_several_name_servers_is_about_ns_addr_list() -> None:
    """Issue 35 finding 4: with two servers the address service answered one address each,
    and "Several name servers" did not say that nsAddrList is the fix."""
    guide = (REPO / "docs" / "operations.md").read_text()
    start = guide.index("Several name servers: ")
    paragraph = guide[start : guide.index("\n\n", start)]
    assert "nsAddrList=ns1:9876;ns2:9876" in paragraph and "/rocketmq/nsaddr" in paragraph
    example = (REPO / "deploy" / "namesrv.properties").read_text()
    assert "#nsAddrList=ns1:9876;ns2:9876" in example


# ---------------------------------------------------------------------------- Grafana


async def exported_metrics(start_namesrv: Any, tmp_path: Path) -> dict[str, set[str]]:
    """Sample name -> label names, scraped from a server that saw every kind of traffic."""
    ctrl: NamesrvController = await start_namesrv(
        journalEnable=True, journalDir=str(tmp_path / "journal")
    )
    http = HttpServer(ctrl.view)
    await http.start("127.0.0.1", 0)
    leaving, staying = (
        BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{ctrl.port}"],
            cluster="DashCluster",
            broker_name=f"dash-broker-{i}",
            broker_id=0,
            broker_addr=f"127.0.0.1:{10911 + 10 * i}",
            topics={f"DashTopic{i}": TopicConfig(f"DashTopic{i}", 4, 4, 6)},
        )
        for i in range(2)
    )
    try:
        for broker in (leaving, staying):
            assert all(o.ok for o in await broker.start())
        await query_route(ctrl.port, "DashTopic0")
        await query_route(ctrl.port, "NoSuchDashTopic")  # an error answer
        await leaving.stop()  # a removal, and a topic removal
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    finally:
        await staying.stop()
        await http.stop()
    body = raw.partition(b"\r\n\r\n")[2].decode()
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(panel title, expression, legend format) of every query, templating included."""
    board = json.loads((REPO / "deploy/grafana/pynamesrv-dashboard.json").read_text())
    found = [
        (panel["title"], target["expr"], target.get("legendFormat", ""))
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"${variable['name']}", variable["definition"], ""))
    return found


async def test_grafana_dashboard_queries_only_metrics_the_server_exports(
    start_namesrv: Any, tmp_path: Path
) -> None:
    exported = await exported_metrics(start_namesrv, tmp_path)
    board = json.loads((REPO / "deploy/grafana/pynamesrv-dashboard.json").read_text())
    assert board["uid"] and board["panels"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    used: set[str] = set()
    for title, expr, legend in dashboard_queries():
        text = re.sub(r'"[^"]*"', '""', expr)  # label values are not names
        text = re.sub(r"\$\w+|\[[^\]]*\]", " ", text)  # variables and range selectors
        metrics = set(re.findall(r"\b(?:pynamesrv|process)_\w+", text))
        assert metrics, f"{title}: {expr} queries no pynamesrv metric"
        missing = metrics - set(exported)
        assert not missing, f"{title}: {sorted(missing)} not exported; have {sorted(exported)}"
        used |= metrics
        labels = set().union(*(exported[m] for m in metrics)) | TARGET_LABELS
        words = set(re.findall(r"\b[a-zA-Z_]\w*\b", text)) - metrics
        unknown = words - PROMQL_WORDS - labels
        assert not unknown, f"{title}: {expr} uses {sorted(unknown)}"
        for matchers in re.findall(r"\{([^}]*)\}", text):
            for name in re.findall(r"(\w+)\s*=~?", matchers):
                assert name in labels, f"{title}: no label {name} on {sorted(metrics)}"
        for grouping in re.findall(r"\bby\s*\(([^)]*)\)", text):
            for name in (n.strip() for n in grouping.split(",")):
                assert name in labels, f"{title}: cannot group by {name}"
        for name in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
            assert name in labels, f"{title}: legend names {name}, not a label of its series"
    # Every family the server exports has a panel (a new metric gets one too).
    families = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exported}
    shown = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in used}
    ours = {f for f in families if f.startswith("pynamesrv_")}
    assert ours <= shown, f"no panel for {sorted(ours - shown)}"


# ---------------------------------------------------------------------------- files


def test_license_is_the_apache_license_pyproject_declares() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]
    assert declared == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_changelog_covers_this_version_and_the_issues_in_the_history() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## {project['version']}" in changelog
    for issue in ("Issue 11", "Issue 12", "Issue 15"):
        assert f"### {issue}" in changelog


@pytest.mark.parametrize(
    "path",
    ["Dockerfile", "deploy/pynamesrv.service", "deploy/kubernetes/pynamesrv.yaml",
     "deploy/grafana/pynamesrv-dashboard.json"],
)  # fmt: skip
def test_operations_guide_points_at_each_deploy_file(path: str) -> None:
    assert f"`{path}`" in (REPO / "docs" / "operations.md").read_text()
