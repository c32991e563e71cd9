# isrsim images, built in stages (see docs/docker.md):
#   runtime  the controller, the brokers and the client commands: Python and isrsim, no JRE, no PySpark
#   report   runtime + a JRE + isrsim[report] (PySpark), for `isrsim report`
# Both run as the unprivileged user `isrsim`; `isrsim` is the entrypoint, so a command is its arguments:
#   docker run --rm isrsim:latest topic list --bootstrap-server controller:9093

FROM python:3.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 1000 isrsim \
    && useradd --system --uid 1000 --gid isrsim --home-dir /var/lib/isrsim --shell /usr/sbin/nologin isrsim \
    && mkdir -p /var/lib/isrsim/secrets /var/lib/isrsim/nodes \
    && chown -R isrsim:isrsim /var/lib/isrsim

# Build the package once, as wheels; the later stages install from them.
FROM base AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY broker ./broker
COPY fetcher ./fetcher
COPY kit ./kit
COPY lab ./lab
COPY cli ./cli
COPY spark_jobs ./spark_jobs
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[report]'

FROM base AS runtime
COPY --from=build /wheels /wheels
RUN python -m venv /opt/venv \
    && pip install --no-cache-dir --no-index --find-links /wheels isrsim \
    && rm -rf /wheels
USER isrsim
WORKDIR /var/lib/isrsim
# Every setting can be given as ISRSIM_<KEY> (dots to underscores, upper case), e.g. ISRSIM_BROKER_ID=1.
VOLUME ["/var/lib/isrsim"]
ENTRYPOINT ["isrsim"]
CMD ["--help"]

FROM base AS report
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN python -m venv /opt/venv \
    && pip install --no-cache-dir --no-index --find-links /wheels 'isrsim[report]' \
    && rm -rf /wheels
USER isrsim
WORKDIR /var/lib/isrsim
ENTRYPOINT ["isrsim"]
CMD ["report", "--help"]

# The default target: the image the brokers run.
FROM runtime
