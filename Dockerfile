# isrsim: one image for the controller, the brokers and the tools (the Spark report needs the JRE).
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/isrsim
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY broker ./broker
COPY fetcher ./fetcher
COPY cli ./cli
COPY spark_jobs ./spark_jobs
RUN pip install --no-cache-dir .

# Every setting can be given as ISRSIM_<KEY> (dots to underscores, upper case), e.g. ISRSIM_BROKER_ID=1.
VOLUME ["/var/lib/isrsim"]
CMD ["isrsim", "--help"]
