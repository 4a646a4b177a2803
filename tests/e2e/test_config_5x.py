"""Every key a Java 5.2.0 name server reports: pynamesrv knows it, reports it, takes it from
UPDATE_NAMESRV_CONFIG when it may be changed remotely, and either acts on it or says in the
key table that it has no effect. The 5.x keys' effects are tested here."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.config import ConfigFileError, ConfigRegistry
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.settings import Applies, Kind, setting
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand

# GET_NAMESRV_CONFIG of the recorded Java 5.2.0 name server (golden-5x register-admin seq 146)
JAVA_520_REPORT = """\
bindAddress=127.0.0.1
clientRequestThreadPoolNums=8
clientRequestThreadPoolQueueCapacity=50000
clusterTest=false
configBlackList=configBlackList;configStorePath;kvConfigPath
configStorePath=namesrv.properties
defaultThreadPoolNums=16
defaultThreadPoolQueueCapacity=10000
deleteTopicWithBrokerRegistration=false
enableAllTopicList=true
enableControllerInNamesrv=false
enableShutdownGracefully=false
enableTopicList=true
kvConfigPath=namesrv/kvConfig.json
listenPort=34877
needWaitForService=false
notifyMinBrokerIdChanged=false
orderMessageEnable=false
productEnvName=center
returnOrderTopicConfigToBroker=true
rocketmqHome=rmq
scanNotActiveBrokerInterval=5000
serverAsyncSemaphoreValue=64
serverCallbackExecutorThreads=0
serverChannelMaxIdleTimeSeconds=120
serverOnewaySemaphoreValue=256
serverPooledByteBufAllocatorEnable=true
serverSelectorThreads=3
serverSocketBacklog=1024
serverSocketRcvBufSize=0
serverSocketSndBufSize=0
serverWorkerThreads=8
shutdownWaitTimeSeconds=30
supportActingMaster=false
unRegisterBrokerQueueCapacity=3000
useEpollNativeSelector=false
waitSecondsForService=45
writeBufferHighWaterMark=0
writeBufferLowWaterMark=0
"""
JAVA_520 = dict(line.split("=", 1) for line in JAVA_520_REPORT.splitlines())
# How the recorded server was started, not a default (golden-5x README)
STARTED_WITH = {"bindAddress", "configStorePath", "kvConfigPath", "listenPort", "rocketmqHome"}

# Where each key that has an effect has it proven (module, test function).
EFFECTS: dict[str, tuple[str, str]] = {
    "kvConfigPath": ("test_kv_durability", "test_acknowledged_kv_writes_survive_sigkill"),
    "configStorePath": (
        "test_config_security", "test_runtime_config_update_is_applied_and_persisted"
    ),
    "orderMessageEnable": (
        "test_order_conf", "test_order_conf_follows_kv_and_order_message_enable"
    ),
    "returnOrderTopicConfigToBroker": (
        "test_config_5x", "test_return_order_topic_config_to_broker_switches_the_table"
    ),
    "scanNotActiveBrokerInterval": (
        "test_liveness", "test_silent_broker_expires_after_its_heartbeat_timeout"
    ),
    "supportActingMaster": ("test_config_5x", "test_support_acting_master_applies_live"),
    "enableAllTopicList": ("test_config_5x", "test_topic_list_switches"),
    "enableTopicList": ("test_config_5x", "test_topic_list_switches"),
    "notifyMinBrokerIdChanged": (
        "test_notify_min_broker_id", "test_nothing_is_sent_while_the_setting_is_off"
    ),
    "enableControllerInNamesrv": ("test_config_5x", "test_controller_mode_is_refused"),
    "needWaitForService": ("test_config_5x", "test_start_up_wait_gates_route_queries"),
    "waitSecondsForService": ("test_config_5x", "test_start_up_wait_gates_route_queries"),
    "deleteTopicWithBrokerRegistration": (
        "test_config_5x", "test_delete_topic_with_broker_registration_applies_live"
    ),
    "configBlackList": ("test_config_5x", "test_config_black_list_from_the_file_is_enforced"),
    "bindAddress": ("test_config_5x", "test_socket_keys_shape_the_port_and_connections"),
    "listenPort": ("test_config_5x", "test_socket_keys_shape_the_port_and_connections"),
    "serverSocketBacklog": ("test_config_5x", "test_socket_keys_shape_the_port_and_connections"),
    "serverSocketSndBufSize": (
        "test_config_5x", "test_socket_keys_shape_the_port_and_connections"
    ),
    "serverSocketRcvBufSize": (
        "test_config_5x", "test_socket_keys_shape_the_port_and_connections"
    ),
    "writeBufferHighWaterMark": (
        "test_config_5x", "test_socket_keys_shape_the_port_and_connections"
    ),
    "writeBufferLowWaterMark": (
        "test_config_5x", "test_socket_keys_shape_the_port_and_connections"
    ),
    "serverChannelMaxIdleTimeSeconds": (
        "test_liveness", "test_idle_connection_is_closed_and_its_broker_removed"
    ),
    "enableShutdownGracefully": ("test_config_5x", "test_graceful_shutdown_keeps_serving"),
    "shutdownWaitTimeSeconds": ("test_config_5x", "test_graceful_shutdown_keeps_serving"),
}  # fmt: skip
PEERS = Path(__file__).resolve().parents[1] / "peers"


async def call(port: int, code: int, body: bytes = b"", **ext: str) -> RemotingCommand:
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return await client.request(RemotingCommand(code=code, ext_fields=ext, body=body))
    finally:
        await client.close()


async def reported(port: int) -> dict[str, str]:
    answer = await call(port, RequestCode.GET_NAMESRV_CONFIG)
    return dict(line.split("=", 1) for line in answer.body.decode().splitlines())


def other_value(key: str) -> str:
    """A valid value for ``key`` that is not Java's default."""
    entry, default = setting(key), JAVA_520[key]
    if key == "enableControllerInNamesrv":
        return "false"  # the one value allowed (test_controller_mode_is_refused)
    if entry.kind is Kind.BOOL:
        return "false" if default == "true" else "true"
    if entry.kind in (Kind.INT, Kind.PORT):
        low = entry.minimum if entry.minimum is not None else 0
        return str(low + 1 if str(low + 1) != default else low + 2)
    return "golden5"


def test_the_recorded_report_has_the_39_keys() -> None:
    assert len(JAVA_520) == 39


@pytest.mark.parametrize("key", sorted(JAVA_520))
async def test_java_520_key_is_known_reported_and_updatable(start_namesrv, key: str) -> None:
    entry = setting(key)  # in the key table
    ns = await start_namesrv()
    before = await reported(ns.port)
    assert key in before
    if key not in STARTED_WITH:
        assert before[key] == JAVA_520[key], "pynamesrv's default differs from Java's"
    value = other_value(key)
    answer = await call(ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, f"{key}={value}\n".encode())
    if entry.remote:
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert (await reported(ns.port))[key] == value
        assert ns.config.text(key) == value
        if entry.applies is Applies.RESTART:
            assert answer.remark == f"applies at the next restart: {key}"
    else:  # files, the listening socket: only in the -c file (CVE-2023-33246/37582)
        assert answer.code == ResponseCode.NO_PERMISSION
        assert (await reported(ns.port))[key] == before[key]


@pytest.mark.parametrize("key", sorted(JAVA_520))
def test_every_key_has_an_effect_or_says_it_has_none(key: str) -> None:
    entry = setting(key)
    if entry.applies is Applies.NEVER:
        assert entry.help.startswith(("no effect", "Reported only")), entry.help
        assert key not in EFFECTS
        return
    module_name, test_name = EFFECTS[key]
    folder = PEERS if module_name == "test_notify_min_broker_id" else Path(__file__).parent
    assert (folder / f"{module_name}.py").is_file()
    text = (folder / f"{module_name}.py").read_text(encoding="utf-8")
    assert f"def {test_name}(" in text, f"{key}: {module_name}.{test_name} is missing"


# ---------------------------------------------------------------------- 5.x effects


def group(port: int, master: str, slave: str) -> list[BrokerClient]:
    common = {
        "namesrv_addrs": [f"127.0.0.1:{port}"],
        "cluster": "C",
        "broker_name": "broker-a",
        "enable_acting_master": True,
        "version": 453,
    }
    topics = {"T": TopicConfig("T", 2, 2, 6)}
    return [
        BrokerClient(broker_id=0, broker_addr=master, topics=dict(topics), **common),
        BrokerClient(broker_id=1, broker_addr=slave, topics=dict(topics), **common),
    ]


async def route_of(port: int, topic: str) -> dict:
    answer = await query_route(port, topic, version=453)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return fastjson.loads(answer.body)


async def test_support_acting_master_applies_live(start_namesrv) -> None:
    ns = await start_namesrv()
    master, slave = group(ns.port, "127.0.0.1:34911", "127.0.0.1:34921")
    await master.register_all()
    await slave.register_all()
    await master.stop()  # the master leaves: write permission goes with it
    route = await route_of(ns.port, "T")
    assert route["brokerDatas"][0]["brokerAddrs"] == {"1": "127.0.0.1:34921"}
    assert route["queueDatas"][0]["perm"] == 4
    update = b"supportActingMaster=true\n"
    assert (await call(ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, update)).code == 0
    route = await route_of(ns.port, "T")
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:34921"}
    update = b"supportActingMaster=false\n"
    assert (await call(ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, update)).code == 0
    route = await route_of(ns.port, "T")
    assert route["brokerDatas"][0]["brokerAddrs"] == {"1": "127.0.0.1:34921"}
    await slave.stop()


async def test_delete_topic_with_broker_registration_applies_live(start_namesrv) -> None:
    ns = await start_namesrv()
    broker, _ = group(ns.port, "127.0.0.1:34911", "127.0.0.1:34921")
    broker.update_topics(TopicConfig("Old", 1, 1, 6))
    await broker.register_all()
    broker.update_topics(remove=("Old",))
    await broker.register_all()
    assert (await query_route(ns.port, "Old")).code == ResponseCode.SUCCESS  # off: kept
    update = b"deleteTopicWithBrokerRegistration=true\n"
    assert (await call(ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, update)).code == 0
    await broker.register_all()  # the same bytes again: decoded, the topic it lacks dropped
    assert (await query_route(ns.port, "Old")).code == ResponseCode.TOPIC_NOT_EXIST
    assert (await query_route(ns.port, "T")).code == ResponseCode.SUCCESS
    await broker.stop()


async def test_start_up_wait_gates_route_queries(start_namesrv) -> None:
    ns = await start_namesrv(needWaitForService=True, waitSecondsForService=3600)
    broker, _ = group(ns.port, "127.0.0.1:34911", "127.0.0.1:34921")
    await broker.register_all()  # brokers register during the wait
    answer = await query_route(ns.port, "T")
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "name server not ready")
    assert (await call(ns.port, RequestCode.GET_BROKER_CLUSTER_INFO)).code == 0  # only routes
    update = b"waitSecondsForService=0\n"
    assert (await call(ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, update)).code == 0
    for _ in range(3):  # ready, and stays ready (5.2.0 fell back to "not ready" here)
        assert (await query_route(ns.port, "T")).code == ResponseCode.SUCCESS
    await broker.stop()


async def test_topic_list_switches(start_namesrv) -> None:
    ns = await start_namesrv(enableAllTopicList=False)
    answer = await call(ns.port, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "disable")
    assert (await call(ns.port, RequestCode.GET_TOPICS_BY_CLUSTER, cluster="C")).code == 0
    update = b"enableAllTopicList=true\nenableTopicList=false\n"
    assert (await call(ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, update)).code == 0
    assert (await call(ns.port, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).code == 0
    for code in (RequestCode.GET_TOPICS_BY_CLUSTER, RequestCode.GET_UNIT_TOPIC_LIST):
        answer = await call(ns.port, code, cluster="C")
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "disable")


async def test_return_order_topic_config_to_broker_switches_the_table(start_namesrv) -> None:
    ns = await start_namesrv(returnOrderTopicConfigToBroker=False)
    put = await call(
        ns.port, RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="T", value="a:2"
    )
    assert put.code == 0
    broker, _ = group(ns.port, "127.0.0.1:34911", "127.0.0.1:34921")
    [outcome] = await broker.register_all()
    assert outcome.ok and outcome.order_topic_config is None
    update = b"returnOrderTopicConfigToBroker=true\n"
    assert (await call(ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, update)).code == 0
    [outcome] = await broker.register_all()
    assert outcome.order_topic_config == {"T": "a:2"}
    await broker.stop()


def test_controller_mode_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "namesrv.properties"
    config.write_text("enableControllerInNamesrv=true\n")
    with pytest.raises(ConfigFileError) as refused:
        ConfigRegistry.from_file(config)
    assert "standalone Java controller" in str(refused.value)


async def test_controller_mode_cannot_be_turned_on_remotely(start_namesrv) -> None:
    ns = await start_namesrv()
    answer = await call(
        ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, b"enableControllerInNamesrv=true\n"
    )
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "standalone Java controller" in (answer.remark or "")
    assert ns.config.enable_controller_in_namesrv is False


async def test_config_black_list_from_the_file_is_enforced(start_namesrv) -> None:
    ns = await start_namesrv(configBlackList="productEnvName")
    answer = await call(ns.port, RequestCode.UPDATE_NAMESRV_CONFIG, b"productEnvName=x\n")
    assert (answer.code, answer.remark) == (
        ResponseCode.NO_PERMISSION,
        "Can not update config in black list.",
    )
    assert ns.config.product_env_name == "center"


async def test_rocketmq_home_holds_no_state_the_state_dir_does(
    start_namesrv, tmp_path: Path
) -> None:
    """Issue 35 finding 2: the journal followed ROCKETMQ_HOME (usually a Java install), so a
    restart without it in the environment recovered nothing. rocketmqHome is reported only."""
    java_home = tmp_path / "rocketmq-4.9.4"
    ns = await start_namesrv(journalEnable=True, rocketmqHome=str(java_home))
    assert ns.journal is not None
    assert ns.journal.directory.is_relative_to(Path(ns.config.state_dir) / "journal")
    assert not java_home.exists()


async def test_socket_keys_shape_the_port_and_connections(start_namesrv) -> None:
    ns = await start_namesrv(
        bindAddress="127.0.0.1",
        serverSocketBacklog=7,
        serverSocketSndBufSize=65536,
        serverSocketRcvBufSize=131072,
        writeBufferHighWaterMark=200_000,
        writeBufferLowWaterMark=100_000,
    )
    assert ns.server.backlog == 7  # what listen() was given
    client = await RemotingClient.connect("127.0.0.1", ns.port)
    try:
        assert (await client.request(RemotingCommand(code=106))).code == 0
        [conn] = ns.server.connections
        sock: socket.socket = conn.transport.get_extra_info("socket")
        assert sock.getsockname()[0] == "127.0.0.1"
        # Linux doubles what is set (the kernel's bookkeeping share)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * 65536
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * 131072
        assert conn.transport.get_write_buffer_limits() == (100_000, 200_000)
    finally:
        await client.close()


async def test_graceful_shutdown_keeps_serving(start_namesrv) -> None:
    """enableShutdownGracefully: after the signal the port still answers for
    shutdownWaitTimeSeconds, until a second signal (tests/e2e/test_cli.py runs the real
    SIGTERM path)."""
    ns: NamesrvController = await start_namesrv(
        enableShutdownGracefully=True, shutdownWaitTimeSeconds=600
    )
    second_signal = asyncio.Event()
    draining = asyncio.create_task(ns.drain(second_signal))
    for _ in range(3):
        assert (await query_route(ns.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST
        assert not draining.done()
    second_signal.set()
    await asyncio.wait_for(draining, 10)
    ns.config.enable_shutdown_gracefully = False  # off: no wait at all
    await asyncio.wait_for(ns.drain(asyncio.Event()), 10)
