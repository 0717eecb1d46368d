# syntax=docker/dockerfile:1
# Multi-stage build: the build stage compiles the wheel with the native core REQUIRED
# (a failed C compile fails the build); the runtime image is slim and runs as non-root.

FROM python:3.11-slim-bookworm AS build
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md VERSION LICENSE ./
COPY native ./native
COPY hotkeyd ./hotkeyd
COPY spec ./spec
ENV HOTKEYD_REQUIRE_NATIVE=1
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[daemon]' \
 && pip install --no-cache-dir --no-index --find-links /wheels "$(ls /wheels/hotkeyd-*.whl)[daemon]" \
 && python -c "import hotkeyd.sketch._sketch, hotkeyd.sources.monitor._monitor"

FROM python:3.11-slim-bookworm
RUN groupadd --system --gid 10001 hotkeyd \
 && useradd --system --uid 10001 --gid hotkeyd --no-create-home --shell /usr/sbin/nologin hotkeyd
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "$(ls /wheels/hotkeyd-*.whl)[daemon]" \
 && rm -rf /wheels
USER 10001:10001
# Inside a container the endpoint must listen beyond loopback to be scraped; the
# default outside containers stays 127.0.0.1. Off loopback the web console refuses to
# start without a token: mount one and pass --console-token-file, or run --no-console.
ENV HOTKEYD_HTTP_HOST=0.0.0.0 \
    HOTKEYD_HTTP_PORT=9108 \
    PYTHONUNBUFFERED=1
EXPOSE 9108
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
  CMD ["hotkeyd", "check"]
ENTRYPOINT ["hotkeyd"]
CMD ["run"]
