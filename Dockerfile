# minibroker: one image for the controller, the brokers and the CLI.
#
#   docker build -t minibroker:dev .            # python:3.12-slim + PyPI
#   bin/build-images                            # no registry: local base + wheels
#
# Build arguments:
#   BASE_IMAGE    any Debian-like image with python3 >= 3.11 and its venv module
#                 (default: the official slim Python image).
#   INSTALL_FROM  pypi (default): dependencies come from the package index.
#                 wheels: pip reads only the ./wheels folder of the build
#                 context (bin/build-images fills it) and never an index.
#
# Works with both the classic builder and BuildKit; needs neither buildx nor
# any Dockerfile frontend image.

ARG BASE_IMAGE=python:3.12-slim

FROM ${BASE_IMAGE} AS build
LABEL org.opencontainers.image.title=minibroker-build
ARG INSTALL_FROM=pypi
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
# Dependencies first, from pyproject.toml alone, so that editing the source
# reuses this layer. "wheel[s]" matches the wheels folder if there is one and
# nothing otherwise (a plain "wheels" would fail without it).
COPY pyproject.toml wheel[s] /build/wheels/
# /opt/minibroker is the venv the image ships, without pip; the pip in
# /build/pip (which stays in this stage) installs into it with --python.
RUN set -eu; \
    case "$INSTALL_FROM" in \
      pypi) ;; \
      wheels) \
        ls /build/wheels/*.whl >/dev/null 2>&1 \
          || { echo "INSTALL_FROM=wheels, but the build context has no wheels/*.whl (run bin/build-images)" >&2; exit 1; }; \
        printf '[global]\nno-index = true\nfind-links = /build/wheels\n' > /etc/pip.conf ;; \
      *) echo "INSTALL_FROM must be pypi or wheels, not '$INSTALL_FROM'" >&2; exit 1 ;; \
    esac; \
    python3 -m venv /build/pip; \
    python3 -m venv --without-pip /opt/minibroker; \
    python3 -c 'import tomllib; print("\n".join(tomllib.load(open("/build/wheels/pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /build/requirements.txt; \
    /build/pip/bin/pip --python /opt/minibroker/bin/python install -r /build/requirements.txt
# The project itself, built from this source tree (the setuptools it builds
# with comes from the same place as the dependencies).
COPY . /build/src/
RUN /build/pip/bin/pip --python /opt/minibroker/bin/python install --no-deps /build/src \
    && /opt/minibroker/bin/python -c 'import minibroker'

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title=minibroker \
      org.opencontainers.image.description="Kafka-style replicated broker for learning and testing replication"
# Invariant: the processes run as this unprivileged user and write only under
# /var/lib/minibroker, the volume (compose also mounts the root read-only).
# /var/lib/minibroker-secret (0700, theirs) is where compose's one-shot
# `secret` service puts the cluster secret (0600) on a volume of its own.
RUN set -eu; \
    groupadd --system --gid 10001 minibroker; \
    useradd --system --uid 10001 --gid minibroker --home-dir /var/lib/minibroker \
        --no-create-home --shell /usr/sbin/nologin minibroker; \
    mkdir -p /var/lib/minibroker /var/lib/minibroker-secret; \
    chown minibroker:minibroker /var/lib/minibroker /var/lib/minibroker-secret; \
    chmod 700 /var/lib/minibroker-secret
ENV PATH=/opt/minibroker/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/minibroker
VOLUME ["/var/lib/minibroker"]
# 9092: a broker's internal listener; 9093: the controller.
EXPOSE 9092 9093
# Healthy means "this process reports RUNNING": for a broker, registered with
# the controller, unfenced and serving. The default targets a broker's
# internal listener; the compose file points the controller's at 9093.
HEALTHCHECK --interval=5s --timeout=5s --start-period=60s --retries=3 \
    CMD ["minibroker", "health", "--bootstrap-server", "localhost:9092"]
ENTRYPOINT ["minibroker"]
CMD ["--help"]
# Last, so that a source change rebuilds only this layer of the final image
# (root-owned: the user can read the code, not change it).
COPY --from=build /opt/minibroker /opt/minibroker
