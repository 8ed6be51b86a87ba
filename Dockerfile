# cfn-provider in a container: `cfn-provider run`, configured by CFN_PROVIDER_* variables.
#
#   make dist                                # the wheel and its wheelhouse: dist/wheelhouse
#   docker build -t cfn-provider .
#   docker run -d --name cfn-provider --stop-timeout 90 \
#     --read-only --cap-drop ALL --security-opt no-new-privileges \
#     -e CFN_PROVIDER_QUEUE_URL=https://sqs.eu-west-1.amazonaws.com/123456789012/cfn-provider \
#     -e CFN_PROVIDER_REGION=eu-west-1 \
#     -e CFN_PROVIDER_TOPIC_ARN=arn:aws:sns:eu-west-1:123456789012:cfn-provider \
#     -e CFN_PROVIDER_HANDLER='Custom::Echo Custom::Thing=mypkg.thing' \
#     -v cfn-provider-state:/var/lib/cfn-provider \
#     cfn-provider
#
# Only the handlers named in CFN_PROVIDER_HANDLER are served (a bare TYPE names a built-in);
# `docker run --rm cfn-provider handlers` lists what is installed.
#
# What is installed is exactly `make dist`'s wheelhouse: the wheel and its runtime dependencies,
# pinned by constraints.txt and each checked against its sha256 (pip --require-hashes, no index),
# on the Python they were resolved on (3.11). Handler packages: `make dist DIST_ARGS="--with
# my_handlers-1.0-py3-none-any.whl"` puts them and their hashes in the same wheelhouse.
# BASE is pinned by digest (python:3.11-slim-bookworm; refresh it with `docker buildx imagetools
# inspect python:3.11-slim-bookworm`); another Debian-like base with python3.11 and its venv
# module works too (--build-arg BASE=...). The root filesystem may be read-only: the daemon
# writes only to /var/lib/cfn-provider (keep it on a volume).
# `--target demo` builds the same image plus the emulator, running `cfn-provider demo`.
# Under podman/buildah, build with `--format docker`: the OCI format drops HEALTHCHECK.
ARG BASE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# The virtualenv: the wheelhouse, hash-checked, nothing downloaded.
FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
COPY dist/wheelhouse /wheelhouse
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), f"constraints.txt is resolved on Python 3.11, the base has {sys.version}"' \
 && python3 -m venv /opt/cfn-provider \
 && /opt/cfn-provider/bin/pip install --quiet --no-index --find-links /wheelhouse --require-hashes \
        -r /wheelhouse/requirements.txt \
 && /opt/cfn-provider/bin/pip check \
 && /opt/cfn-provider/bin/cfn-provider --version

# The same plus the [demo] extra (moto, from the package index at constraints.txt's versions), for `--target demo`.
FROM build AS demo-build
COPY constraints.txt /constraints.txt
RUN /opt/cfn-provider/bin/pip install --quiet -c /constraints.txt 'moto[server]' \
 && /opt/cfn-provider/bin/python -c 'import cfn_provider.local.demo, moto.server'

FROM ${BASE} AS image
# tini (Debian's package) is PID 1 and the daemon its child. A command Custom::Command runs may
# leave children behind; the daemon kills their process group, but the killed processes are
# reparented to PID 1, and a Python daemon as PID 1 never reaps what it did not start (its own
# children it waits for by pid; a waitpid(-1) reaper would steal those statuses from asyncio).
# tini reaps every orphan and passes SIGTERM/SIGINT on to the daemon. `-s` makes it a
# subreaper too when something else is PID 1 (podman run --init, a shared process namespace).
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends tini >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
# A user with no login and no home of its own: the state directory is the only place it
# writes (the SQLite idempotency store and the health file that `check` reads).
RUN useradd --uid 10001 --user-group --no-log-init --no-create-home --home-dir /var/lib/cfn-provider \
        --shell /usr/sbin/nologin cfn-provider \
 && install -d -m 0700 -o cfn-provider -g cfn-provider /var/lib/cfn-provider
# Settings: every `cfn-provider run --OPTION` as CFN_PROVIDER_<OPTION> (or a TOML file named
# by CFN_PROVIDER_CONFIG); AWS credentials, region and endpoints from botocore's usual chain.
# run and check find the same health file through CFN_PROVIDER_STATE.
ENV PATH=/opt/cfn-provider/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/cfn-provider \
    STATE_DIRECTORY=/var/lib/cfn-provider \
    CFN_PROVIDER_STATE=sqlite:///var/lib/cfn-provider/state.db \
    CFN_PROVIDER_LOG_FORMAT=json
WORKDIR /var/lib/cfn-provider
USER 10001:10001
# SIGTERM: stop receiving (the current long poll, up to 20 s), let in-flight requests finish
# for CFN_PROVIDER_GRACE_PERIOD (default 30 s), hand back or answer the rest, exit 0. Give the
# container a stop timeout above that sum: docker run --stop-timeout 90, compose stop_grace_period: 90s,
# ECS stopTimeout: 90, Kubernetes terminationGracePeriodSeconds: 90 (their defaults, 10 s / 30 s /
# 30 s, kill the daemon before it hands unfinished requests back).
STOPSIGNAL SIGTERM
# Healthy while the health file is fresh (the event loop rewrites it every 10 s) and the last
# receive from the queue worked. ECS and Kubernetes: the same command as an exec probe
# (healthCheck command ["CMD", "cfn-provider", "check"]; livenessProbe exec).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["cfn-provider", "check"]
ENTRYPOINT ["tini", "-s", "--", "cfn-provider"]
CMD ["run"]

FROM image AS demo
COPY --from=demo-build /opt/cfn-provider /opt/cfn-provider
CMD ["demo"]

# The default target: the runtime image.
FROM image AS runtime
COPY --from=build /opt/cfn-provider /opt/cfn-provider
