# syntax=docker/dockerfile:1
# The dra-driver image: `dra-driver run` in a slim Python 3.11, and the standard CNI plugins.
#   docker build -t dra-driver:dev .      (make build)
# All dependencies ship manylinux wheels or are pure Python (the driver talks netlink
# itself, dradriver/rtnl, so no iproute2), hence no compiler in either stage. The build
# stage installs the package (not editable) into a virtualenv without pip; the final
# stage copies only that virtualenv.
ARG PYTHON_IMAGE=python:3.11.17-slim-trixie

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv --without-pip /opt/dra-driver
# README.md* : the readme is optional (pyproject names it; the build works without).
COPY pyproject.toml README.md* ./
COPY dradriver/ dradriver/
COPY handlers/ handlers/
RUN pip --python /opt/dra-driver/bin/python install --no-cache-dir --compile . \
    && /opt/dra-driver/bin/dra-driver handlers

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="dra-driver" \
      org.opencontainers.image.description="Kubernetes DRA driver for network interfaces and RDMA devices" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/dra-driver/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/dra-driver /opt/dra-driver
# The standard CNI plugins a claim of type cni runs (docs/cni.md), Debian's, at
# /opt/cni/bin (--cni-bin-dir's default). A base made by hack/build-image.sh has them;
# otherwise the base's Debian suite decides their version.
# hadolint ignore=DL3008
RUN if [ ! -x /usr/lib/cni/bridge ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends containernetworking-plugins \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && mkdir -p /opt/cni \
    && ln -sfn /usr/lib/cni /opt/cni/bin
# Runs as root on purpose: the daemon creates and moves network interfaces over
# netlink and writes CDI specs on the host (the DaemonSet makes it privileged).
ENTRYPOINT ["dra-driver"]
CMD ["run"]
