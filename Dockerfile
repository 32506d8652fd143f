# One image for every tide program (tide-scheduler, tide-worker, tidectl, and the helpers the worker starts:
# tide-exec, tide-mpi-shim, tide-rank-exec; tide-mlp, the reference trainer). The Helm chart (helm/tide) picks
# the program with each container's `command`. Debian 12 in both stages: the build links against the same
# library versions the runtime stage installs.
#
#   docker build -t tide:0.1.0 .
#   docker run --rm tide:0.1.0 tide-scheduler --help
#
# The workers run the training ranks, so a real deployment builds its worker image FROM this one and adds
# the trainer (PyTorch, the job's code); see docs/kubernetes.md.

FROM debian:bookworm AS build
# scripts/deps.sh's build packages, plus Open MPI and OpenSSL (tide-mlp, the MPI launch credentials).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config \
        libuv1-dev protobuf-c-compiler libprotobuf-c-dev libnghttp2-dev libhttp-parser-dev \
        libsqlite3-dev libcjson-dev libcurl4-openssl-dev uthash-dev \
        libopenmpi-dev openmpi-bin libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build /build -j"$(nproc)" --target \
        tide-scheduler tide-worker tidectl tide-exec tide-mpi-shim tide-rank-exec tide-mlp

FROM debian:bookworm-slim
# Runtime libraries only. openmpi-bin: mpirun and orted for --launcher mpi jobs (and libopenmpi3 for tide-mlp).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libuv1 libprotobuf-c1 libnghttp2-14 libhttp-parser2.9 libsqlite3-0 libcjson1 libcurl4 libssl3 \
        openmpi-bin ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# A fixed non-root user (the chart's runAsUser/fsGroup 10001) owning the data directory.
RUN groupadd --system --gid 10001 tide \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/tide --shell /usr/sbin/nologin tide \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/tide
# The worker finds tide-exec, tide-mpi-shim and tide-rank-exec beside itself.
COPY --from=build /build/bin/tide-scheduler /build/bin/tide-worker /build/bin/tidectl /build/bin/tide-exec \
     /build/bin/tide-mpi-shim /build/bin/tide-rank-exec /build/bin/tide-mlp /usr/local/bin/
# The Python trainer SDK, for images built on this one (PYTHONPATH=/usr/local/lib/tide/python).
COPY trainer/python/tide_trainer.py /usr/local/lib/tide/python/
USER 10001:10001
WORKDIR /var/lib/tide
ENV HOME=/var/lib/tide
EXPOSE 7070
# Plaintext on 0.0.0.0 needs --insecure (docs/security.md); give --tls-cert/--tls-key/--tls-ca instead for
# anything beyond a trial (the Helm chart passes one or the other).
CMD ["tide-scheduler", "--listen", "0.0.0.0:7070", "--data-dir", "/var/lib/tide", "--insecure"]
