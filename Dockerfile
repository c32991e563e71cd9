# isrsim images, built in stages (see docs/docker.md):
#   runtime  the controller, the brokers and the client commands: Python and isrsim, no JRE, no PySpark
#   report   runtime + a JRE + isrsim[report] (PySpark), for `isrsim report`
# Both run as the unprivileged user `isrsim`; `isrsim` is the entrypoint, so a command is its arguments:
#   docker run --rm isrsim:latest topic list --bootstrap-server controller:9093
#
# The base is Debian bookworm with python3 and python3-venv. No public image registry is needed:
# docker/base-image.sh makes `isrsim-base:bookworm` from Debian's packages with debootstrap. Any image
# with Debian's python3 (3.11+) and python3-venv will do: --build-arg BASE_IMAGE=...
#
# The virtualenvs are built in stages of their own and copied whole into the final ones, so no wheel, pip
# cache or source file is left in a layer of the images that run. This needs nothing newer than the
# classic builder of Docker Engine 20.10 (no BuildKit-only syntax).
ARG BASE_IMAGE=isrsim-base:bookworm

FROM ${BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
# The mount points of every volume the compose files name exist in the image, owned by isrsim, so a named
# volume mounted there starts with that owner (Docker copies an empty volume's ownership from the image).
RUN groupadd --system --gid 1000 isrsim \
    && useradd --system --uid 1000 --gid isrsim --home-dir /var/lib/isrsim --shell /usr/sbin/nologin isrsim \
    && mkdir -p /var/lib/isrsim/secrets /var/lib/isrsim/ca /var/lib/isrsim/cluster/workload /var/lib/isrsim/report \
    && for node in controller controller-1 controller-2 controller-3 broker-1 broker-2 broker-3; do \
        mkdir -p /var/lib/isrsim/nodes/$node; done \
    && chown -R isrsim:isrsim /var/lib/isrsim

# The runtime's virtualenv: isrsim and its base dependencies.
FROM base AS venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY server ./server
COPY storage ./storage
COPY raft ./raft
COPY controller ./controller
COPY coordinator ./coordinator
COPY broker ./broker
COPY fetcher ./fetcher
COPY kit ./kit
COPY lab ./lab
COPY cli ./cli
COPY spark_jobs ./spark_jobs
RUN python3 -m venv /opt/venv \
    && python -m pip install --no-cache-dir --disable-pip-version-check . \
    && python -m pip uninstall --yes pip \
    && rm -rf /src/build /src/*.egg-info

# The report's: the same, with the report's extras (PySpark, pyarrow, matplotlib).
FROM venv AS venv-report
RUN python -m ensurepip >/dev/null \
    && python -m pip install --no-cache-dir --disable-pip-version-check '.[report]' \
    && python -m pip uninstall --yes pip \
    && rm -rf /src/build /src/*.egg-info

FROM base AS runtime
COPY --from=venv /opt/venv /opt/venv
USER isrsim
WORKDIR /var/lib/isrsim
# Every setting can be given as ISRSIM_<KEY> (dots to underscores, upper case), e.g. ISRSIM_BROKER_ID=1.
# isrsim is process 1 (exec form) and handles SIGTERM itself: `docker compose stop` is a clean shutdown.
STOPSIGNAL SIGTERM
ENTRYPOINT ["isrsim"]
CMD ["--help"]

FROM base AS report
# The JRE's post-install links its manual page: the directory must exist in a base without manual pages.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
COPY --from=venv-report /opt/venv /opt/venv
USER isrsim
WORKDIR /var/lib/isrsim
ENTRYPOINT ["isrsim"]
CMD ["report", "--help"]

# The default target: the image the brokers run.
FROM runtime
