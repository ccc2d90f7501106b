# opsloop's container image. Build from the repository root:
#   docker build -t opsloop:0.1.0 .
# No secrets are baked in: tokens and OPSLOOP_DB come from the environment at run time
# (deploy/compose.yml, deploy/kubernetes.yml; see deploy/README.md).

# --- build: every dependency as wheels, exactly the versions and hashes of locks/run.txt (what CI tested;
# pure Python or prebuilt: psycopg[binary] brings libpq), then the project's own wheel
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY locks/run.txt ./locks/run.txt
RUN pip wheel --require-hashes --wheel-dir /wheels -r locks/run.txt
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY tools ./tools
RUN pip wheel --no-deps --wheel-dir /wheels .

# --- run: the wheels installed, nothing else
FROM python:3.11-slim
# Unbuffered: log lines reach `docker logs`/`kubectl logs` as they happen. No .pyc writes at run time: the
# root filesystem may be read-only (pip compiled the installed modules already).
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels opsloop
# A fixed numeric uid/gid so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
RUN groupadd --system --gid 10001 opsloop \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/opsloop --create-home opsloop
USER 10001:10001
# The working directory is the user's own: without OPSLOOP_DB, SQLite's opsloop.db lands here (one replica only).
WORKDIR /home/opsloop
# 9090: /metrics and /healthz (--metrics-port below). 3000: Slack's HTTP mode only (no SLACK_APP_TOKEN).
EXPOSE 9090 3000
# opsloop stops taking runs on SIGTERM, lets running ones reach a step boundary within its grace, hands the rest
# back and flushes its outbox; give it the stop timeout deploy/README.md explains (30 s).
STOPSIGNAL SIGTERM
ENTRYPOINT ["opsloop"]
CMD ["run", "--metrics-port", "9090"]
