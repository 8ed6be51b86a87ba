# cfn-provider in a container: `cfn-provider run`, configured by CFN_PROVIDER_* variables.
#
#   docker build -t cfn-provider .
#   docker run -d --name cfn-provider --stop-timeout 90 \
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
# BASE is any Debian-like image with python3 >= 3.11 and its venv module: python:3.12-slim,
# or Debian bookworm with python3-venv. Only the runtime dependencies are installed, at the
# versions in constraints.txt, and no compiler (every dependency ships wheels).
# `--target demo` builds the same image plus the emulator, running `cfn-provider demo`.
# Under podman/buildah, build with `--format docker`: the OCI format drops HEALTHCHECK.
ARG BASE=python:3.12-slim

# The virtualenv with the runtime dependencies alone: this layer changes only with the
# dependency files, so a change to the code does not download them again.
FROM ${BASE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/cfn-provider
COPY setup.cfg pyproject.toml constraints.txt README.md /src/
# setup.cfg's install_requires (requirements.txt) and its demo extra (demo.txt), without the code yet
RUN /opt/cfn-provider/bin/python -c "import configparser; c = configparser.ConfigParser(); c.read('/src/setup.cfg'); \
open('/src/requirements.txt', 'w').write(c['options']['install_requires']); \
open('/src/demo.txt', 'w').write(c['options.extras_require']['demo'])" \
 && /opt/cfn-provider/bin/pip install --quiet -c /src/constraints.txt -r /src/requirements.txt

FROM deps AS build
COPY daemon /src/daemon
COPY handlers /src/handlers
RUN /opt/cfn-provider/bin/pip install --quiet --no-deps --force-reinstall /src \
 && /opt/cfn-provider/bin/cfn-provider --version

# The same plus the [demo] extra (moto), for `--target demo`.
FROM deps AS demo-build
RUN /opt/cfn-provider/bin/pip install --quiet -c /src/constraints.txt -r /src/demo.txt
COPY daemon /src/daemon
COPY handlers /src/handlers
RUN /opt/cfn-provider/bin/pip install --quiet --no-deps --force-reinstall /src \
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
# container a stop timeout above that sum (docker run --stop-timeout 90).
STOPSIGNAL SIGTERM
# Healthy while the health file is fresh (the event loop rewrites it every 10 s) and the last
# receive from the queue worked.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["cfn-provider", "check"]
ENTRYPOINT ["tini", "-s", "--", "cfn-provider"]
CMD ["run"]

FROM image AS demo
COPY --from=demo-build /opt/cfn-provider /opt/cfn-provider
CMD ["demo"]

# The default target: the runtime image.
FROM image AS runtime
COPY --from=build /opt/cfn-provider /opt/cfn-provider
