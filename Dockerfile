# pynamesrv in a container: slim, non-root, state on one volume.
#
#   docker build -t pynamesrv:0.1.0 .
#   docker run -d --name namesrv -p 9876:9876 -p 9880:9880 -v namesrv-data:/data pynamesrv:0.1.0
#
# Ports: 9876 remoting (brokers, clients, mqadmin), 9880 HTTP (/metrics, /healthz, status page).
# Volume /data is the home of the pynamesrv user and the only place it writes: the state
# directory /data/namesrv (stateDir: the KV store kvConfig.json, the journal journal/, their
# locks) and, with --log-file default, the log (/data/logs/rocketmqlogs). Logs go to standard
# error otherwise (docker logs). Arguments go to `pynamesrv`; a configuration file mounted
# read-only (updateNamesrvConfig then answers "persist failed"), in a checkout:
#   docker run -d --name namesrv -p 9876:9876 -p 9880:9880 -v namesrv-data:/data \
#       -v "$PWD/deploy/namesrv.properties:/etc/pynamesrv/namesrv.properties:ro" \
#       pynamesrv:0.1.0 serve -c /etc/pynamesrv/namesrv.properties --state-dir /data/namesrv
# `docker exec namesrv pynamesrv admin clusterList -n 127.0.0.1:9876`.
# The base image is pinned to the Python the test suite runs on.
#
# The build stage has a C compiler, so the wheel carries the compiled loops (setup.py:
# namesrv/_fastpath.c, namesrv/_routed.c); the build fails rather than ship a py3-none-any
# wheel without them. The slim image gets only the wheels, no compiler. At start the log
# says "compiled loops in use: fastpath, routed" and /metrics pynamesrv_compiled_loops 1.

FROM python:3.11.7-slim-bookworm AS build
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels . \
    && pip install --no-cache-dir --no-index --find-links=/wheels pynamesrv \
    && cd / && python -c "import pynamesrv.namesrv._fastpath, pynamesrv.namesrv._routed"

FROM python:3.11.7-slim-bookworm
RUN groupadd --system --gid 10001 pynamesrv \
    && useradd --system --uid 10001 --gid pynamesrv --home-dir /data --create-home \
       --shell /usr/sbin/nologin pynamesrv
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels pynamesrv \
    && rm -rf /wheels
ENV HOME=/data \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /data
VOLUME ["/data"]
EXPOSE 9876 9880
USER 10001:10001
# /healthz answers 200 once the remoting port serves the routes (recovered from the journal
# after a restart: ready at once, "recovering" while recovered brokers have not registered
# again) and 503 during the 5.x start-up wait; /healthz/live only says the process runs.
# Change the port here if httpPort moves.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request as u; sys.exit(u.urlopen('http://127.0.0.1:9880/healthz', timeout=2).status != 200)"]
# SIGTERM stops serve cleanly: routes journaled, KV store closed, ports closed.
STOPSIGNAL SIGTERM
ENTRYPOINT ["pynamesrv"]
CMD ["serve"]
