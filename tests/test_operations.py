"""The operations files agree with the code: compose.yaml, deploy/ and workers/profiles/.

Docker and Kubernetes are not needed: the files are parsed, every ``little ...`` command they
run is parsed with the real CLI parser, every ``celery ...`` command with Celery's own command
line (and Flower's options), every environment variable is checked against the settings model,
and the timing, queue and storage rules the fleet depends on are checked against the settings
defaults. So are the security defaults (docs/operations.md, "Security"): Redis needs a login,
credentials come from Secrets and environment variables (never a ConfigMap or a command line),
every container runs as a non-root user on a read-only root filesystem without privileges,
NetworkPolicies limit who reaches the fleet, and images are pinned.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import textwrap
import tomllib
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from little_dist.settings import KNOWN_ENV_VARS, ROLES, Settings, load_settings
from little_dist.world.factory import fleet_redis_url
from little_dist.world.fleet_keys import backlog_list

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"
DEPLOY = ROOT / "deploy"
PROFILES = ROOT / "workers" / "profiles"
DOCKERFILE = ROOT / "workers" / "Dockerfile"
REDIS_CONF = ROOT / "storage" / "redis.conf"
REDIS_START = ROOT / "storage" / "redis-start.sh"
PYPROJECT = ROOT / "pyproject.toml"

# What an operator exports before `docker compose up` (compose.yaml requires these).
OPERATOR_ENV = {
    "LITTLE_APP": "my_app",
    "AWS_ACCESS_KEY_ID": "test-access-key",
    "AWS_SECRET_ACCESS_KEY": "test-secret-key",
    "FLOWER_BASIC_AUTH": "admin:test-password",
    "LITTLE_REDIS_PASSWORD": "test-redis-password",
}
# What a shell inside a container sees besides the service's own environment.
CONTAINER_ENV = {"HOSTNAME": "host-1"}
# Secret values in Kubernetes (the Secrets are created by the operator, not shipped).
K8S_REDIS_URL = "redis://little:test-redis-password@redis.little.svc.cluster.local:6379/0"
K8S_SECRETS = {
    ("little-s3-credentials", "AWS_ACCESS_KEY_ID"): "test-access-key",
    ("little-s3-credentials", "AWS_SECRET_ACCESS_KEY"): "test-secret-key",
    ("little-flower-auth", "FLOWER_BASIC_AUTH"): "admin:test-password",
    ("little-redis", "LITTLE_REDIS_URL"): K8S_REDIS_URL,
    ("little-redis", "LITTLE_BROKER_URL"): K8S_REDIS_URL,
    ("little-redis", "LITTLE_WORLD"): K8S_REDIS_URL,
    ("little-redis", "username"): "little",
    ("little-redis", "password"): "test-redis-password",
}
K8S_SECRET_KEYS = {
    "little-s3-credentials": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
}


# -- compose: interpolation as `docker compose` does it ----------------------------------------

_COMPOSE_VAR = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)"
)


class MissingVariableError(Exception):
    pass


def interpolate(text: str, env: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group("name") or match.group("bare")
        op, arg = match.group("op"), match.group("arg") or ""
        value = env.get(name)
        unset = value is None or (op is not None and op.startswith(":") and value == "")
        if op is None:
            return value or ""
        if op.endswith("-"):
            return arg if unset else str(value)
        if unset:
            raise MissingVariableError(f"{name}: {arg}")
        return str(value)

    return _COMPOSE_VAR.sub(one, text)


def resolve(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [resolve(item, env) for item in node]
    if isinstance(node, dict):
        return {key: resolve(value, env) for key, value in node.items()}
    return node


@cache
def compose() -> dict[str, Any]:
    raw = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    resolved: dict[str, Any] = resolve(raw, OPERATOR_ENV)
    return resolved


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"{path.name}:{number}: expected NAME=value, got {line!r}"
        values[name.strip()] = value.strip()
    return values


def service_env(service: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    files = service.get("env_file", [])
    for name in [files] if isinstance(files, str) else files:
        env |= read_env_file(ROOT / name)
    environment = service.get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    env |= {key: "" if value is None else str(value) for key, value in environment.items()}
    return env


def as_argv(command: Any) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


# -- kubernetes ---------------------------------------------------------------------------------


@cache
def manifests() -> tuple[tuple[str, dict[str, Any]], ...]:
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                found.append((path.name, doc))
    return tuple(found)


def of_kind(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(name, doc) for name, doc in manifests() if doc.get("kind") == kind]


def config_map(name: str) -> dict[str, str]:
    for _, doc in of_kind("ConfigMap"):
        if doc["metadata"]["name"] == name:
            return {key: str(value) for key, value in doc.get("data", {}).items()}
    raise AssertionError(f"deploy/ has no ConfigMap {name!r}")


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env |= config_map(source["configMapRef"]["name"])
        elif "secretRef" in source:
            secret = source["secretRef"]["name"]
            env |= {key: K8S_SECRETS[(secret, key)] for key in K8S_SECRET_KEYS[secret]}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "configMapKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["configMapKeyRef"]
            env[item["name"]] = config_map(ref["name"])[ref["key"]]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = K8S_SECRETS[(ref["name"], ref["key"])]
    return env


def expand_k8s(arg: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args."""

    def one(match: re.Match[str]) -> str:
        assert match.group(1) in env, f"$({match.group(1)}) is not set in the container"
        return env[match.group(1)]

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, arg)


@dataclass
class Deployment:
    file: str
    name: str
    doc: dict[str, Any]
    container: dict[str, Any]
    env: dict[str, str]
    argv: list[str]


@cache
def deployments() -> tuple[Deployment, ...]:
    found: list[Deployment] = []
    for file, doc in of_kind("Deployment"):
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        env = container_env(container)
        argv = [
            expand_k8s(str(part), env)
            for part in [*container.get("command", []), *container.get("args", [])]
        ]
        found.append(Deployment(file, doc["metadata"]["name"], doc, container, env, argv))
    return tuple(found)


# -- every command the files run ----------------------------------------------------------------


@dataclass
class Command:
    where: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def shell_command(script: str, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """A one-line shell command as the shell would run it (variables expanded, no pipes):
    its argv, and its environment with the leading ``NAME=value`` assignments applied."""
    scope = {**CONTAINER_ENV, **env}

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in scope, f"${name} is not set in the container"
        return scope[name]

    expanded = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", one, script)
    argv = shlex.split(expanded)
    assigned = dict(env)
    while argv and re.fullmatch(r"[A-Za-z_]\w*=.*", argv[0], re.DOTALL):
        name, _, value = argv.pop(0).partition("=")
        assigned[name] = value
    return argv, assigned


def healthcheck_command(
    test: list[str] | str, env: Mapping[str, str]
) -> tuple[list[str], dict[str, str]] | None:
    if isinstance(test, str):
        return shell_command(test, env)
    if test[0] == "CMD":
        return list(test[1:]), dict(env)
    if test[0] == "CMD-SHELL":
        script = " ".join(test[1:])
        return None if "|" in script else shell_command(script, env)
    return None


@cache
def commands() -> tuple[Command, ...]:
    found: list[Command] = []
    for name, service in compose()["services"].items():
        env = service_env(service)
        if "command" in service:
            found.append(Command(f"compose:{name}", as_argv(service["command"]), env))
        check = service.get("healthcheck", {}).get("test")
        if check is not None:
            parsed = healthcheck_command(check, env)
            if parsed is not None:
                found.append(Command(f"compose:{name}:healthcheck", *parsed))
    for deployment in deployments():
        where = f"deploy/{deployment.file}:{deployment.name}"
        found.append(Command(where, deployment.argv, deployment.env))
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            exec_ = deployment.container.get(probe, {}).get("exec")
            if exec_ is None:
                continue
            argv = [str(part) for part in exec_["command"]]
            env = deployment.env
            if argv[:2] == ["sh", "-c"]:
                argv, env = shell_command(argv[2], deployment.env)
            found.append(Command(f"{where}:{probe}", argv, env))
    return tuple(found)


def commands_of(program: str) -> list[Command]:
    return [command for command in commands() if command.argv and command.argv[0] == program]


def little_commands() -> list[Command]:
    return commands_of("little")


# -- the `little` commands ----------------------------------------------------------------------


@pytest.mark.parametrize("command", little_commands(), ids=lambda c: c.where)
def test_little_commands_parse_with_our_cli(command: Command) -> None:
    from little_dist.cli import build_parser

    parser = build_parser()
    errors = io.StringIO()
    args, exit_code = None, None
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = parser.parse_args(command.argv[1:])
        except SystemExit as exc:
            exit_code = exc.code
    if args is None:
        pytest.fail(
            f"{command.where}: `{shlex.join(command.argv)}` does not parse "
            f"(exit {exit_code}): {errors.getvalue().strip()}"
        )
    assert args.command == command.argv[1]
    if "--roles" in command.argv:
        roles = command.argv[command.argv.index("--roles") + 1].split(",")
        assert set(roles) <= set(ROLES), f"{command.where}: unknown role in {roles}"


def test_the_files_run_the_fleet_commands() -> None:
    # Guards the extraction above: if it found nothing, the parse test would prove nothing.
    seen = {(c.where.split(":")[0], c.argv[1]) for c in little_commands()}
    assert ("compose", "worker") in seen and ("compose", "scheduler") in seen
    assert ("compose", "serve") in seen
    deploy = {sub for where, sub in seen if where.startswith("deploy/")}
    assert deploy == {"worker", "scheduler", "serve"}


# -- the `celery` commands ----------------------------------------------------------------------


@pytest.mark.parametrize("command", commands_of("celery"), ids=lambda c: c.where)
def test_celery_commands_are_well_formed(command: Command) -> None:
    import click
    from celery.bin.celery import celery as celery_cli

    args = command.argv[1:]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx = celery_cli.make_context("celery", list(args))
            rest = [*ctx.protected_args, *ctx.args]
        name, sub, rest = celery_cli.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        sub_ctx = sub.make_context(name, rest, parent=ctx)
    except click.ClickException as exc:
        pytest.fail(f"{command.where}: `{shlex.join(command.argv)}`: {exc.format_message()}")
    # The broker URL holds the Redis password: Celery reads it from CELERY_BROKER_URL, and it
    # is never given on the command line.
    assert not ctx.params["broker"], f"{command.where}: --broker puts the password in argv"
    broker = command.env.get("CELERY_BROKER_URL", "")
    assert urlsplit(broker).scheme in ("redis", "rediss"), f"{command.where}: {broker!r}"
    assert urlsplit(broker).password, f"{command.where}: the broker URL has no password"
    if name == "flower":
        from flower.options import options as flower_options

        known = set(flower_options._options)
        for option in sub_ctx.params["tornado_argv"]:
            assert option.startswith("--") and "=" in option, f"{command.where}: {option!r}"
            key = option[2:].split("=", 1)[0].replace("_", "-")
            assert key in known, f"{command.where}: Flower has no option --{key}"
    if name == "inspect":
        assert sub_ctx.params["command"] == "ping"
        assert sub_ctx.params["destination"], "a health check pings its own node only"


def test_flower_and_the_workers_share_the_broker() -> None:
    flowers = [c for c in commands_of("celery") if "flower" in c.argv]
    assert {c.where.split(":")[0] for c in flowers} == {"compose", "deploy/flower.yaml"}
    for flower in flowers:
        broker = flower.env["CELERY_BROKER_URL"]
        for command in little_commands():
            if command.where.split(":")[0] == flower.where.split(":")[0]:
                assert load_settings(command.env).broker_url == broker, command.where


def test_flower_is_behind_basic_auth_given_by_the_environment() -> None:
    flowers = [c for c in commands_of("celery") if "flower" in c.argv]
    assert flowers
    for flower in flowers:
        # Flower reads every FLOWER_* option from the environment; on the command line the
        # login would show in the process list and in the manifest.
        assert re.fullmatch(r"[^:]+:.+", flower.env.get("FLOWER_BASIC_AUTH", "")), flower.where
        assert not any(a.startswith("--basic-auth") for a in flower.argv), flower.where
    for command in commands():
        assert "FLOWER_UNAUTHENTICATED_API" not in command.env, command.where
        assert not any("unauthenticated" in part.lower() for part in command.argv)


def test_no_command_line_holds_a_credential() -> None:
    secrets = {v for v in OPERATOR_ENV.values() if "secret" in v or "password" in v}
    secrets |= {v for v in K8S_SECRETS.values() if "password" in v or "secret" in v}
    checked = 0
    for command in commands():
        for part in command.argv:
            assert not any(secret in part for secret in secrets), f"{command.where}: {part}"
        checked += 1
    assert checked >= 20


# -- storage -----------------------------------------------------------------------------------


def redis_conf() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in REDIS_CONF.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition(" ")
            values[name.lower()] = value.strip()
    return values


def start_script_default(name: str) -> str:
    """The default ``storage/redis-start.sh`` gives the variable ``name``."""
    found = re.search(rf'"\$\{{{name}:-([^}}]+)\}}"', REDIS_START.read_text(encoding="utf-8"))
    assert found, f"redis-start.sh has no default for {name}"
    return found.group(1)


def test_redis_keeps_the_log_and_never_evicts() -> None:
    conf = redis_conf()
    assert conf["appendonly"] == "yes"
    assert conf["appendfsync"] == "everysec"
    assert conf["maxmemory-policy"] == "noeviction"
    redis = compose()["services"]["redis"]
    # compose runs the start script, which runs redis-server with the mounted redis.conf.
    script = as_argv(redis["command"])
    assert script[0] == "sh" and f"./storage/redis-start.sh:{script[1]}:ro" in redis["volumes"]
    config_path = start_script_default("LITTLE_REDIS_CONF")
    assert f"./storage/redis.conf:{config_path}:ro" in redis["volumes"]
    assert any(volume.endswith(f":{conf['dir']}") for volume in redis["volumes"])


def test_redis_requires_a_login() -> None:
    conf = redis_conf()
    assert conf["protected-mode"] == "yes"
    script = REDIS_START.read_text(encoding="utf-8")
    # The ACL the script writes: no anonymous (default) user, the fleet's user with a
    # password hash, and no administrative commands for it.
    assert "user default off" in script
    assert re.search(r"user little on #%s .*-@admin", script)
    assert 'exec redis-server "$conf" --aclfile "$acl"' in script
    assert "requirepass" not in conf and "user" not in conf, "the password is not in git"
    # Listening on every interface is only acceptable because every client logs in.
    if set(conf["bind"].split()) & {"0.0.0.0", "*", "::", "-::*"}:
        assert "user default off" in script
    redis = compose()["services"]["redis"]
    assert set(redis["environment"]) == {"LITTLE_REDIS_PASSWORD"}
    assert all(port.startswith("127.0.0.1:") for port in redis["ports"])
    (check,) = [part for part in redis["healthcheck"]["test"][1:]]
    assert check.startswith('REDISCLI_AUTH="$LITTLE_REDIS_PASSWORD" redis-cli --user little ')
    # Every client of it logs in as that user.
    urls = [
        (c.where, name, c.env[name])
        for c in commands()
        for name in ("LITTLE_REDIS_URL", "LITTLE_BROKER_URL", "LITTLE_WORLD", "CELERY_BROKER_URL")
        if name in c.env
    ]
    assert len(urls) >= 20
    for where, name, url in urls:
        parts = urlsplit(url)
        assert (parts.username, parts.password) in {
            ("little", OPERATOR_ENV["LITTLE_REDIS_PASSWORD"]),
            ("little", K8S_SECRETS[("little-redis", "password")]),
        }, f"{where}: {name} does not log in as little"


def megabytes(size: str) -> float:
    """A Redis or compose memory size (``640mb``, ``1g``, ``512Mi``...) in MiB."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?", size.strip().lower())
    assert found, size
    unit = (found.group(2) or "b").rstrip("b").rstrip("i") or "b"
    scale = {"b": 1 / 2**20, "k": 1 / 2**10, "m": 1.0, "g": 2**10}[unit]
    return float(found.group(1)) * scale


def test_redis_refuses_writes_before_its_container_runs_out_of_memory() -> None:
    maxmemory = megabytes(redis_conf()["maxmemory"])
    limit = megabytes(str(compose()["services"]["redis"]["mem_limit"]))
    assert maxmemory > 0, "maxmemory 0 means no limit: the kernel kills Redis instead"
    # The rest of the container's memory: the AOF rewrite's fork (copy on write), client
    # buffers, fragmentation.
    assert maxmemory <= 0.75 * limit, (maxmemory, limit)


def test_the_s3_store_creates_the_fleets_bucket() -> None:
    s3 = compose()["services"]["s3"]
    argv = as_argv(s3["command"])
    bucket = next(a.split("=", 1)[1] for a in argv if a.startswith("-bucket="))
    for command in little_commands():
        if command.where.startswith("compose:"):
            settings = load_settings(command.env)
            assert settings.s3_bucket == bucket, command.where
            assert settings.s3_endpoint is not None
            assert urlsplit(settings.s3_endpoint).hostname == "s3"
            assert s3["environment"]["AWS_ACCESS_KEY_ID"] == command.env["AWS_ACCESS_KEY_ID"]


# -- timing ------------------------------------------------------------------------------------


def seconds(duration: str | int) -> float:
    if isinstance(duration, int):
        return float(duration)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    return sum(float(n) * scale[u] for n, u in parts)


def test_compose_grace_periods_exceed_the_soft_shutdown() -> None:
    default = Settings.model_fields["soft_shutdown_timeout"].default
    for name, service in compose()["services"].items():
        if as_argv(service.get("command", ["-"]))[0] != "little":
            continue
        soft = load_settings(service_env(service)).soft_shutdown_timeout
        assert soft >= default or "LITTLE_SOFT_SHUTDOWN_TIMEOUT" in service_env(service)
        grace = seconds(service.get("stop_grace_period", "10s"))
        assert grace > soft, f"compose:{name}: stop_grace_period {grace}s <= {soft}s"


def test_kubernetes_grace_periods_exceed_the_soft_shutdown() -> None:
    for deployment in deployments():
        if deployment.argv[0] != "little":
            continue
        soft = load_settings(deployment.env).soft_shutdown_timeout
        grace = deployment.doc["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        assert grace > soft, f"{deployment.name}: terminationGracePeriodSeconds {grace} <= {soft}"


def test_sigterm_starts_celerys_soft_shutdown() -> None:
    # The grace periods above only buy a soft shutdown if SIGTERM is remapped to it.
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^\s*REMAP_SIGTERM=SIGQUIT\b", text, re.MULTILINE)
    assert re.search(r"^\s*LITELLM_LOCAL_MODEL_COST_MAP=True\b", text, re.MULTILINE)


# -- roles, queues, autoscaling -------------------------------------------------------------------


def roles_of(argv: list[str]) -> set[str]:
    return set(argv[argv.index("--roles") + 1].split(",")) if "--roles" in argv else set()


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_compose_service_on_the_schedulers_queue(role: str) -> None:
    services = compose()["services"]
    scheduler_queue = load_settings(service_env(services["scheduler"])).queue_for(role)  # type: ignore[arg-type]
    workers = [
        (name, service)
        for name, service in services.items()
        if as_argv(service.get("command", ["-"]))[:2] == ["little", "worker"]
        and role in roles_of(as_argv(service["command"]))
    ]
    assert [name for name, _ in workers] == [role]
    ((_, service),) = workers
    assert service["env_file"] == [f"workers/profiles/{role}.env"]
    assert load_settings(service_env(service)).queue_for(role) == scheduler_queue  # type: ignore[arg-type]
    assert "container_name" not in service, "a fixed name stops `--scale`"


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_deployment_and_a_scaled_object(role: str) -> None:
    (scheduler,) = [d for d in deployments() if d.argv[:2] == ["little", "scheduler"]]
    (worker,) = [
        d for d in deployments() if d.argv[:2] == ["little", "worker"] and role in roles_of(d.argv)
    ]
    queue = load_settings(worker.env).queue_for(role)  # type: ignore[arg-type]
    assert queue == load_settings(scheduler.env).queue_for(role)  # type: ignore[arg-type]

    scaled = [
        doc
        for _, doc in of_kind("ScaledObject")
        if doc["spec"]["scaleTargetRef"]["name"] == worker.name
    ]
    assert len(scaled) == 1, f"{worker.name}: expected one ScaledObject"
    spec = scaled[0]["spec"]
    assert scaled[0]["apiVersion"] == "keda.sh/v1alpha1"
    trigger, *more = spec["triggers"]
    assert trigger["type"] == "redis"
    assert all(t["authenticationRef"] == {"name": "little-redis"} for t in spec["triggers"])
    meta = trigger["metadata"]
    # Celery on Redis keeps a queue as a Redis list named after the queue.
    assert meta["listName"] == queue
    broker = urlsplit(load_settings(worker.env).broker_url)
    assert meta["address"] == f"{broker.hostname}:{broker.port or 6379}"
    assert meta.get("databaseIndex", "0") == (broker.path.strip("/") or "0")
    assert int(meta["listLength"]) >= 1
    assert 1 <= spec.get("minReplicaCount", 0) <= spec["maxReplicaCount"]
    if role != "worker":
        assert more == []
        return
    # The worker role also scales on the branches fan-outs hold back for want of slots: the
    # list little_dist.fleet.worker_slots keeps in the world's Redis.
    (backlog,) = more
    assert backlog["type"] == "redis"
    meta = backlog["metadata"]
    settings = load_settings(worker.env)
    assert settings.branch_window == "fleet"
    assert meta["listName"] == backlog_list(queue)
    world_redis = urlsplit(fleet_redis_url(settings) or "")
    assert meta["address"] == f"{world_redis.hostname}:{world_redis.port or 6379}"
    assert meta.get("databaseIndex", "0") == (world_redis.path.strip("/") or "0")
    assert int(meta["listLength"]) >= 1


def test_deployments_have_pod_disruption_budgets_that_select_them() -> None:
    budgets = [doc for _, doc in of_kind("PodDisruptionBudget")]
    for deployment in deployments():
        if deployment.argv[0] != "little":
            continue
        labels = deployment.doc["spec"]["template"]["metadata"]["labels"]
        selector = deployment.doc["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items(), deployment.name
        matching = [
            b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(matching) == 1, f"{deployment.name}: expected one PodDisruptionBudget"


def test_kustomization_lists_every_manifest() -> None:
    ((_, kustomization),) = of_kind("Kustomization")
    files = {path.name for path in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


# -- profiles and environment variables ---------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_each_role_has_a_launch_profile_mirrored_in_deploy(role: str) -> None:
    profile = read_env_file(PROFILES / f"{role}.env")
    assert set(profile) <= KNOWN_ENV_VARS
    settings = load_settings(profile)
    assert settings.queue_for(role) == profile[f"LITTLE_QUEUE_{role.upper()}"]  # type: ignore[arg-type]
    assert settings.worker_pool == "threads"
    assert settings.worker_prefetch_multiplier == 1
    assert config_map(f"little-profile-{role}") == profile


def test_profiles_are_only_for_roles() -> None:
    assert {path.stem for path in PROFILES.glob("*.env")} == set(ROLES)


def little_services_env() -> Iterator[tuple[str, dict[str, str]]]:
    for command in little_commands():
        yield command.where, command.env


def test_every_variable_the_fleet_gets_is_a_settings_field() -> None:
    checked = 0
    for where, env in little_services_env():
        unknown = set(env) - KNOWN_ENV_VARS
        assert not unknown, f"{where}: not settings fields: {sorted(unknown)}"
        load_settings(env)  # and every value is valid
        checked += 1
    for _, doc in of_kind("ConfigMap"):
        unknown = set(doc.get("data", {})) - KNOWN_ENV_VARS
        assert not unknown, f"ConfigMap {doc['metadata']['name']}: {sorted(unknown)}"
    assert checked >= 10


def test_compose_requires_the_operators_secrets() -> None:
    raw = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    resolve(raw, OPERATOR_ENV)
    for name in OPERATOR_ENV:
        with pytest.raises(MissingVariableError, match=f"^{name}: set "):
            resolve(raw, {k: v for k, v in OPERATOR_ENV.items() if k != name})


def test_compose_services_wait_for_healthy_dependencies() -> None:
    services = compose()["services"]
    for name, service in services.items():
        assert "healthcheck" in service, f"compose:{name} has no healthcheck"
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"compose:{name}: depends_on needs conditions"
        for other, rule in depends.items():
            assert rule == {"condition": "service_healthy"}, f"compose:{name} -> {other}"
            assert "healthcheck" in services[other]
    for name in ("scheduler", *ROLES):
        assert set(services[name]["depends_on"]) == {"redis", "s3"}


def test_python_one_liners_compile() -> None:
    for command in commands_of("python"):
        assert command.argv[1] == "-c"
        compile(command.argv[2], command.where, "exec")


# -- security -----------------------------------------------------------------------------------

# The only compose service not given a non-root user: SeaweedFS's image starts its entrypoint
# as root to hand /data to its own user, then runs weed as that user (su-exec). It keeps the
# capabilities that takes, and no others.
STARTS_AS_ROOT_TO_DROP = {"s3": {"CHOWN", "SETUID", "SETGID"}}


# The roles whose steps run commands in the sandbox (the bash tool, code.run): bubblewrap makes
# user, mount, PID and network namespaces, which the default seccomp and AppArmor profiles of
# Docker and of Kubernetes' RuntimeDefault refuse. Only these are let out of them.
SANDBOX_ROLES = ("worker", "fixer")


@pytest.mark.parametrize("name", sorted(compose()["services"]))
def test_every_compose_container_is_unprivileged(name: str) -> None:
    service = compose()["services"][name]
    assert service.get("read_only") is True, f"{name}: root filesystem not read-only"
    assert "/tmp" in service.get("tmpfs", []), f"{name}: no private /tmp"
    assert service.get("cap_drop") == ["ALL"], name
    options = service.get("security_opt", [])
    assert "no-new-privileges:true" in options, name
    unconfined = ["seccomp=unconfined", "apparmor=unconfined"]
    assert [o for o in options if o != "no-new-privileges:true"] == (
        unconfined if name in SANDBOX_ROLES else []
    ), name
    if name in STARTS_AS_ROOT_TO_DROP:
        assert "user" not in service
        assert set(service.get("cap_add", [])) <= STARTS_AS_ROOT_TO_DROP[name], name
        return
    assert "cap_add" not in service, name
    user = str(service.get("user", ""))
    assert user and user.split(":")[0] not in ("", "0", "root"), f"{name}: runs as {user!r}"
    if service.get("image", "").startswith("little-dist:"):
        assert user == "10001:10001" == dockerfile_user()


def test_the_image_has_the_sandbox_and_the_sandbox_pods_are_the_workers_and_fixers() -> None:
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"apt-get install -y --no-install-recommends bubblewrap\b", dockerfile)
    names = {deployment.name for deployment in deployments()}
    assert {f"little-{role}" for role in SANDBOX_ROLES} <= names
    assert set(SANDBOX_ROLES) <= set(compose()["services"])


def test_the_pod_security_context_the_docs_give_for_the_sandbox_is_the_manifests() -> None:
    docs = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = docs.split("What a Kubernetes worker or fixer pod needs", 1)[1]
    (block,) = re.findall(r"```yaml\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    wanted = yaml.safe_load(textwrap.dedent(block))["securityContext"]
    sandboxed = [d for d in deployments() if d.name in {f"little-{r}" for r in SANDBOX_ROLES}]
    assert len(sandboxed) == len(SANDBOX_ROLES)
    for deployment in sandboxed:
        context = deployment.doc["spec"]["template"]["spec"]["securityContext"]
        assert {key: context.get(key) for key in wanted} == wanted, deployment.name
        # What the docs say is not needed, the manifests do not ask for.
        container = deployment.container["securityContext"]
        assert "add" not in container["capabilities"] and "privileged" not in container
        assert "hostUsers" not in deployment.doc["spec"]["template"]["spec"]


def dockerfile_user() -> str:
    (user,) = re.findall(r"^USER\s+(\S+)\s*$", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    return str(user)


@pytest.mark.parametrize("deployment", deployments(), ids=lambda d: d.name)
def test_every_kubernetes_container_is_unprivileged(deployment: Deployment) -> None:
    pod = deployment.doc["spec"]["template"]["spec"]
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
    assert f"{context['runAsUser']}:{context['runAsGroup']}" == dockerfile_user()
    if deployment.name in {f"little-{role}" for role in SANDBOX_ROLES}:
        assert context["seccompProfile"] == {"type": "Unconfined"}
        assert context["appArmorProfile"] == {"type": "Unconfined"}
    else:
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "appArmorProfile" not in context
    assert "privileged" not in deployment.container["securityContext"]
    assert pod["automountServiceAccountToken"] is False
    container = deployment.container["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["readOnlyRootFilesystem"] is True
    assert container["capabilities"] == {"drop": ["ALL"]}
    # /tmp is the one writable path, and it is the pod's own.
    (mount,) = deployment.container["volumeMounts"]
    assert mount["mountPath"] == "/tmp"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume == {"name": mount["name"], "emptyDir": {}}


def test_credentialed_urls_come_from_a_secret_never_a_config_map() -> None:
    for _, doc in of_kind("ConfigMap"):
        for key, value in doc.get("data", {}).items():
            assert key not in ("LITTLE_REDIS_URL", "LITTLE_BROKER_URL", "LITTLE_WORLD")
            assert not urlsplit(str(value)).password, f"{doc['metadata']['name']}: {key}"
    for deployment in deployments():
        refs = {
            item["name"]: item["valueFrom"]["secretKeyRef"]
            for item in deployment.container.get("env", [])
            if "secretKeyRef" in item.get("valueFrom", {})
        }
        wanted = (
            ["CELERY_BROKER_URL"]
            if deployment.argv[0] == "celery"
            else ["LITTLE_REDIS_URL", "LITTLE_BROKER_URL", "LITTLE_WORLD"]
        )
        for name in wanted:
            assert refs.get(name, {}).get("name") == "little-redis", f"{deployment.name}: {name}"
            assert urlsplit(deployment.env[name]).password


def test_keda_logs_in_to_redis_with_the_fleets_secret() -> None:
    ((_, auth),) = of_kind("TriggerAuthentication")
    assert auth["metadata"]["name"] == "little-redis"
    refs = {ref["parameter"]: ref for ref in auth["spec"]["secretTargetRef"]}
    assert set(refs) == {"username", "password"}
    for parameter, ref in refs.items():
        assert (ref["name"], ref["key"]) in K8S_SECRETS, parameter
    broker = urlsplit(K8S_SECRETS[("little-redis", "LITTLE_BROKER_URL")])
    assert broker.username == K8S_SECRETS[("little-redis", "username")]
    assert broker.password == K8S_SECRETS[("little-redis", "password")]


def network_policies() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc["spec"] for _, doc in of_kind("NetworkPolicy")}


def test_network_policies_admit_no_one_to_the_fleet_but_flowers_and_the_apis_users() -> None:
    policies = network_policies()
    fleet = {"app.kubernetes.io/part-of": "little-dist"}
    closed = [
        spec
        for spec in policies.values()
        if spec["podSelector"].get("matchLabels") == fleet
        and spec["policyTypes"] == ["Ingress"]
        and spec.get("ingress") == []
    ]
    assert len(closed) == 1, "no policy shuts the fleet's pods to incoming connections"
    for deployment in deployments():
        labels = deployment.doc["spec"]["template"]["metadata"]["labels"]
        assert fleet.items() <= labels.items(), deployment.name
    # Other policies open only Flower's port, the HTTP API's, and Redis's (to the fleet and
    # KEDA).
    opened: dict[str, set[int]] = {}
    for spec in policies.values():
        if spec in closed:
            continue
        selected = spec["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
        for rule in spec["ingress"]:
            assert rule["from"], f"{selected}: open to every pod"
            opened.setdefault(selected, set()).update(p["port"] for p in rule["ports"])
    assert opened == {"little-flower": {5555}, "little-api": {8080}, "redis": {6379}}
    (redis_rule,) = next(
        spec
        for spec in policies.values()
        if spec["podSelector"]["matchLabels"].get("app.kubernetes.io/name") == "redis"
    )["ingress"]
    assert {"podSelector": {"matchLabels": fleet}} in redis_rule["from"]


def test_images_are_pinned() -> None:
    (base,) = re.findall(r"^FROM\s+(\S+)", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    assert re.search(r":\d+\.\d+\.\d+[-\w.]*(@sha256:[0-9a-f]{64})?$", base), base
    for name, service in compose()["services"].items():
        image = service["image"]
        if image.startswith("little-dist:"):  # built here from the Dockerfile
            continue
        tag = image.rsplit(":", 1)[-1]
        assert re.match(r"\d+\.\d+", tag) and "latest" not in tag, f"{name}: {image}"


def test_celery_is_at_least_5_5() -> None:
    # Soft shutdown (worker_soft_shutdown_timeout, REMAP_SIGTERM) arrived in Celery 5.5.
    from importlib.metadata import version

    dependencies = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    (celery,) = [d for d in dependencies if d.startswith("celery")]
    assert re.search(r">=5\.([5-9]|\d\d)", celery), celery
    assert tuple(int(p) for p in version("celery").split(".")[:2]) >= (5, 5)
