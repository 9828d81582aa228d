# pagoda's container image: `pagoda serve` as a non-root user, the model
# directory as a volume, port 8000, a HEALTHCHECK on /health.
#
#   docker build -t pagoda .                                    # from source
#   docker buildx build --platform linux/amd64,linux/arm64 -t pagoda .
#   docker run -p 8000:8000 -v /path/to/model:/models:ro pagoda
#   docker run -p 8000:8000 -v /path/to/models:/models:ro pagoda /models/Qwen3-0.6B --max-model-len 4096
#
# Stages:
#   build    (the build machine's platform) compiles pagoda and makes the
#            Debian packages with CPack (`make package`); for another
#            TARGETARCH (arm64 on an amd64 builder) it cross-compiles with
#            Debian's aarch64 toolchain, as the project's own arm64 build does.
#            With --build-arg PAGODA_DEBS=prebuilt it compiles nothing and
#            takes the packages of an earlier `make package` from the
#            context's packaging/debs/ instead (`make test-image` does, having
#            no registry and no time to compile twice).
#   runtime  Debian slim + `apt-get install ./pagoda_*.deb` (the package's
#            Depends bring the runtime libraries) + a user `pagoda`.
# (No stage is chosen by an ARG: buildah 1.28 skips a stage that only a
# `FROM ${ARG}` names, and the build then fails.)
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM --platform=$BUILDPLATFORM ${DEBIAN_IMAGE} AS build
ARG TARGETARCH
ARG BUILDARCH
ARG PAGODA_DEBS=build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY packaging/debs packaging/debs
COPY CMakeLists.txt Makefile README.md ./
COPY cmake cmake
COPY docs docs
COPY include include
COPY scripts scripts
COPY src src
RUN set -eu; \
    mkdir -p /out; \
    if [ "$PAGODA_DEBS" = prebuilt ]; then \
      cp packaging/debs/*.deb /out/; \
    elif [ "${TARGETARCH:-$BUILDARCH}" = "${BUILDARCH:-$TARGETARCH}" ]; then \
      apt-get update -qq && apt-get install -y -qq --no-install-recommends make >/dev/null; \
      make package-native; \
      cp build-pkg/packages/*.deb /out/; \
    elif [ "$TARGETARCH" = arm64 ] && [ "$BUILDARCH" = amd64 ]; then \
      apt-get update -qq && apt-get install -y -qq --no-install-recommends make >/dev/null; \
      make package-arm64; \
      cp build-pkg-arm/packages/*.deb /out/; \
    else \
      echo "pagoda image: building for $TARGETARCH on $BUILDARCH is not supported" >&2; exit 1; \
    fi

FROM ${DEBIAN_IMAGE} AS runtime
COPY --from=build /out/ /tmp/debs/
RUN set -eu; \
    arch=$(dpkg --print-architecture); \
    apt-get update -qq; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      curl ca-certificates /tmp/debs/pagoda_*_"$arch".deb >/dev/null; \
    rm -rf /tmp/debs /var/lib/apt/lists/*; \
    useradd --system --create-home --home-dir /home/pagoda --shell /usr/sbin/nologin pagoda; \
    mkdir -p /models && chown pagoda:pagoda /models; \
    pagoda --version
USER pagoda
WORKDIR /home/pagoda
VOLUME ["/models"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8000/health || exit 1
ENTRYPOINT ["pagoda", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["/models"]
