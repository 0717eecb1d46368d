"""The ``hotkeyd`` command: a thin click layer over the library.

Each command loads settings, configures logging, calls the library and returns an
exit code. Every :class:`~hotkeyd.errors.HotkeydError` becomes one clear line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from hotkeyd import __version__
from hotkeyd.conn.urls import redact_any_url
from hotkeyd.errors import ConfigError, HotkeydError

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger("hotkeyd")


class _Fail(click.ClickException):
    """A runtime failure: one line on stderr, exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"hotkeyd: error: {self.format_message()}", err=True)


class _ConfigFail(_Fail):
    """A usage or configuration problem: one line on stderr, exit code 2."""

    exit_code = 2


def _translate(fn: Callable[[], int | None]) -> int:
    try:
        return fn() or 0
    except ConfigError as exc:
        raise _ConfigFail(str(exc)) from exc
    except HotkeydError as exc:
        raise _Fail(str(exc)) from exc


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # kafka-python logs an ERROR line for every reconnect attempt; hotkeyd's Kafka
    # source reports connection trouble itself, at a limited rate.
    logging.getLogger("kafka").setLevel(max(logging.CRITICAL, logging.getLogger().level))


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Eager --config: file values become click defaults (below flags and env vars)."""
    if value:
        from hotkeyd.daemon.config import load_config_file

        try:
            values = load_config_file(value)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
        if "sources" in values and "source" not in values:
            values["source"] = values.pop("sources")
        params = {p.name: p for p in ctx.command.params if p.name and p.name != "config"}
        unknown = sorted(set(values) - set(params))
        if unknown:
            raise click.BadParameter(
                f"{value}: unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(params))})",
                ctx=ctx,
                param=param,
            )
        for name, raw in values.items():
            try:
                values[name] = params[name].type_cast_value(ctx, raw)
            except click.BadParameter as exc:
                raise click.BadParameter(
                    f"{value}: {name}: {exc.message}", ctx=ctx, param=param
                ) from exc
        ctx.default_map = {**(ctx.default_map or {}), **values}
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="hotkeyd")
def cli() -> None:
    """hotkeyd: find hot Redis keys in a fraction of a second and tell every app.

    Every `run` option can also be set with a HOTKEYD_* environment variable (shown in
    each option's help) or in a TOML file given with --config. Precedence:
    flag > environment > config file > default.
    """


def _opt(*decls: str, env: str, **kw: Any) -> Callable[[F], F]:
    kw.setdefault("show_default", True)
    kw["envvar"] = f"HOTKEYD_{env}"
    kw["show_envvar"] = True
    return click.option(*decls, **kw)


@cli.command()
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    is_eager=True,
    expose_value=False,
    callback=_load_config,
    envvar="HOTKEYD_CONFIG",
    show_envvar=True,
    help="TOML config file whose keys are option names (e.g. max_hot = 500).",
)
@_opt(
    "--source",
    "-s",
    "source",
    env="SOURCE",
    multiple=True,
    default=("-",),
    help="Where key accesses come from; repeatable. '-' is stdin, a path is a file, "
    "kafka://host:9092/topic1,topic2?group=hotkeyd&format=lines is a Kafka consumer group, "
    "redis-monitor://[user:pass@]host:6379 taps a Redis server with MONITOR. "
    "In the env var, separate several sources with spaces.",
)
@_opt(
    "--input-format",
    env="INPUT_FORMAT",
    type=click.Choice(["keys", "counted"]),
    default="keys",
    help="stdin/file lines: one key per line, or 'key<TAB>count'.",
)
@_opt("--follow/--no-follow", env="FOLLOW", default=False, help="Tail a growing file (tail -F).")
@_opt(
    "--redis-url",
    env="REDIS_URL",
    default=None,
    help="Publish to Redis: redis://[user:pass@]host:6379/0 or rediss:// for TLS. "
    "Without it, events go to stdout as JSON lines.",
)
@_opt("--namespace", env="NAMESPACE", default="hotkeyd", help="Prefix of every Redis name.")
@_opt(
    "--channel", env="CHANNEL", default=None, help="Events channel [default: <namespace>:events]."
)
@_opt("--instance", env="INSTANCE", default=None, help="Instance id [default: host-pid-random].")
@_opt(
    "--rules",
    env="RULES",
    default=None,
    type=click.Path(dir_okay=False),
    help="Rules TOML file (SIGHUP reloads).",
)
@_opt("--window", env="WINDOW", default=1.0, type=float, help="Sliding window for rates, seconds.")
@_opt(
    "--tick", env="TICK", default=0.1, type=float, help="How often rates are re-evaluated, seconds."
)
@_opt(
    "--hysteresis",
    env="HYSTERESIS",
    default=0.8,
    type=float,
    help="A key cools below threshold x this.",
)
@_opt(
    "--max-hot",
    env="MAX_HOT",
    default=1000,
    type=int,
    help="Cap on keys hot at once; highest rates win.",
)
@_opt("--k", "k", env="K", default=200, type=int, help="Candidate keys tracked per sub-window.")
@_opt(
    "--memory",
    env="MEMORY",
    default=1 << 20,
    type=int,
    help="Sketch memory budget, bytes (all sub-windows).",
)
@_opt(
    "--sketch",
    env="SKETCH",
    default="heavykeeper",
    type=click.Choice(["heavykeeper", "countmin"]),
    help="Top-K sketch algorithm.",
)
@_opt(
    "--max-key-len",
    env="MAX_KEY_LEN",
    default=1024,
    type=int,
    help="Longer keys are rejected and counted.",
)
@_opt(
    "--http-host",
    env="HTTP_HOST",
    default="127.0.0.1",
    help="Bind address of /metrics, /healthz, /topk.",
)
@_opt("--http-port", env="HTTP_PORT", default=9108, type=int, help="HTTP port; 0 picks a free one.")
@_opt(
    "--no-http", env="NO_HTTP", is_flag=True, default=False, help="Do not start the HTTP endpoint."
)
@_opt(
    "--heartbeat",
    env="HEARTBEAT",
    default=1.0,
    type=float,
    help="Snapshot refresh interval, seconds.",
)
@_opt(
    "--shutdown-timeout",
    env="SHUTDOWN_TIMEOUT",
    default=5.0,
    type=float,
    help="Flush deadline on SIGTERM.",
)
@_opt(
    "--monitor-duty",
    env="MONITOR_DUTY",
    default=1.0,
    type=float,
    help="MONITOR duty cycle in (0, 1].",
)
@_opt(
    "--log-level",
    env="LOG_LEVEL",
    default="INFO",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Log verbosity (logs go to stderr).",
)
@click.option("--print-config", is_flag=True, help="Print the resolved settings as JSON and exit.")
def run(print_config: bool, **opts: Any) -> None:
    """Run the detection daemon.

    \b
    Examples:
      cat keys.txt | hotkeyd run
      hotkeyd run -s access.log --follow --redis-url redis://127.0.0.1:6379/0
      hotkeyd run -s 'kafka://127.0.0.1:9092/accesses?group=hotkeyd&format=lines' --redis-url ...
      hotkeyd run -s redis-monitor://127.0.0.1:6379 --monitor-duty 0.2 --redis-url ...
    """
    from hotkeyd.daemon.config import Settings
    from hotkeyd.daemon.service import Service, run_until_signalled

    _setup_logging(opts["log_level"])

    def go() -> int:
        settings = Settings(
            sources=tuple(opts["source"]) or ("-",),
            input_format=opts["input_format"],
            follow=opts["follow"],
            redis_url=opts["redis_url"],
            namespace=opts["namespace"],
            channel=opts["channel"],
            instance=opts["instance"],
            rules=opts["rules"],
            window=opts["window"],
            tick=opts["tick"],
            hysteresis=opts["hysteresis"],
            max_hot=opts["max_hot"],
            k=opts["k"],
            memory=opts["memory"],
            sketch=opts["sketch"],
            max_key_len=opts["max_key_len"],
            http_host=opts["http_host"],
            http_port=None if opts["no_http"] else opts["http_port"],
            heartbeat=opts["heartbeat"],
            shutdown_timeout=opts["shutdown_timeout"],
            monitor_duty=opts["monitor_duty"],
            log_level=opts["log_level"].upper(),
        )
        if print_config:
            import dataclasses

            shown = dataclasses.asdict(settings)
            shown["sources"] = [redact_any_url(u) for u in settings.sources]
            if settings.redis_url:
                shown["redis_url"] = redact_any_url(settings.redis_url)
            click.echo(json.dumps(shown, default=str, indent=2))
            return 0
        return run_until_signalled(Service(settings))

    sys.exit(_translate(go))


# -- reading commands ------------------------------------------------------------------
def _redis_options(fn: F) -> F:
    fn = click.option(
        "--namespace",
        envvar="HOTKEYD_NAMESPACE",
        default="hotkeyd",
        show_default=True,
        help="Prefix of every Redis name.",
    )(fn)
    fn = click.option(
        "--redis-url",
        envvar="HOTKEYD_REDIS_URL",
        default="redis://127.0.0.1:6379/0",
        show_default=True,
        help="Redis the daemon publishes to.",
    )(fn)
    return fn


def _fmt_key(entry: dict[str, Any]) -> str:
    from hotkeyd.wire import decode_key

    return _show_key(decode_key(entry))


def _show_key(key: bytes, width: int = 60) -> str:
    """A key as one printable line: invalid UTF-8 and control bytes escaped once."""
    text = key.decode("utf-8", "backslashreplace")
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= width else text[: width - 3] + "..."


def _fmt_since(since: float | None, now: float) -> str:
    if not since:
        return "-"
    secs = max(0.0, now - since)
    return f"{secs:.1f}s ago" if secs < 120 else f"{secs / 60:.1f}m ago"


def _render_top(data: dict[str, Any], limit: int) -> str:
    now = time.time()
    hot = data.get("hot", [])
    top = data.get("top", [])
    lines = [f"hot keys: {len(hot)}   instances: {', '.join(data.get('instances', [])) or '-'}", ""]
    lines.append(f"{'KEY':<60} {'RATE/s':>12} {'RULE':<16} {'KIND':<6} {'HOT SINCE':<12}")
    seen = set()
    rows = []
    for e in hot:
        seen.add((e.get("key"), e.get("db", 0)))
        rows.append((e, True))
    for e in top:
        if (e.get("key"), e.get("db", 0)) not in seen:
            rows.append((e, False))
    rows.sort(key=lambda r: (not r[1], -float(r[0].get("rate", 0.0))))
    for e, is_hot in rows[:limit]:
        mark = "*" if is_hot else " "
        lines.append(
            f"{mark}{_fmt_key(e):<59} {float(e.get('rate', 0)):>12.1f} {e.get('rule', '')!s:<16} "
            f"{e.get('kind') or '-'!s:<6} {_fmt_since(e.get('since') if is_hot else None, now):<12}"
        )
    lines.append("")
    lines.append("* = hot now")
    return "\n".join(lines)


def _read_top(redis_url: str, namespace: str, http: str | None) -> dict[str, Any]:
    if http:
        import urllib.error
        import urllib.request

        url = http.rstrip("/")
        if not url.endswith("/topk"):
            url += "/topk"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                data: dict[str, Any] = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HotkeydError(f"cannot read {url}: {exc}") from exc
        data.setdefault("instances", [data.get("instance", "?")])
        return data
    from hotkeyd.client.snapshots import read_merged
    from hotkeyd.conn.redis import client_from_url
    from hotkeyd.wire import Namespace

    client = client_from_url(redis_url)
    return read_merged(client, Namespace(prefix=namespace))


@cli.command()
@_redis_options
@click.option(
    "--http",
    "http",
    default=None,
    help="Read a daemon's HTTP endpoint instead, e.g. http://127.0.0.1:9108.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--watch", "-w", is_flag=True, help="Refresh in place, like top.")
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.05),
    help="Refresh interval for --watch, seconds.",
)
@click.option(
    "-n", "limit", default=30, show_default=True, type=click.IntRange(min=1), help="Rows to show."
)
def top(
    redis_url: str,
    namespace: str,
    http: str | None,
    as_json: bool,
    watch: bool,
    interval: float,
    limit: int,
) -> None:
    """Show the hot keys and the top keys by rate."""

    def once() -> str:
        data = _read_top(redis_url, namespace, http)
        return json.dumps(data) if as_json else _render_top(data, limit)

    def go() -> int:
        if not watch:
            click.echo(once())
            return 0
        try:
            while True:
                out = once()
                click.echo("\x1b[H\x1b[2J" + out if not as_json else out)
                time.sleep(interval)
        except KeyboardInterrupt:
            return 0

    sys.exit(_translate(go))


@cli.command()
@_redis_options
@click.option(
    "--channel",
    envvar="HOTKEYD_CHANNEL",
    default=None,
    help="Events channel [default: <namespace>:events].",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print each message as received (one JSON per line)."
)
@click.option(
    "--count",
    default=0,
    type=click.IntRange(min=0),
    help="Exit after this many messages (0 = forever).",
)
def watch(redis_url: str, namespace: str, channel: str | None, as_json: bool, count: int) -> None:
    """Subscribe to the events channel and print hot/cool events as they arrive.

    A lost connection is reported on stderr and re-established with backoff; events
    published while disconnected are not replayed (run `hotkeyd top` for the state).
    """
    import redis as redis_py

    from hotkeyd.conn.redis import client_from_url, translate_redis_error
    from hotkeyd.wire import Message, Namespace, WireError

    def show(data: bytes | str) -> None:
        if as_json:
            click.echo(data.decode("utf-8", "replace") if isinstance(data, bytes) else data)
            return
        try:
            _print_message(Message.loads(data))
        except WireError as exc:
            click.echo(f"! malformed message: {exc}", err=True)

    def go() -> int:
        ns = Namespace(prefix=namespace, channel_override=channel)
        client = client_from_url(redis_url)
        seen, delay, connected_once = 0, 0.1, False
        while True:
            try:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(ns.channel)
                if connected_once:
                    click.echo(f"! reconnected to {redact_any_url(redis_url)}", err=True)
                connected_once, delay = True, 0.1
                for raw in pubsub.listen():
                    data = raw.get("data")
                    if isinstance(data, (bytes, str)):
                        show(data)
                        seen += 1
                        if count and seen >= count:
                            return 0
            except (redis_py.ConnectionError, redis_py.TimeoutError, OSError) as exc:
                if not connected_once:
                    raise translate_redis_error(exc, redact_any_url(redis_url)) from exc
                click.echo(f"! connection lost ({exc}); reconnecting in {delay:.1f}s", err=True)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
            except redis_py.RedisError as exc:
                raise translate_redis_error(exc, redact_any_url(redis_url)) from exc

    try:
        sys.exit(_translate(go))
    except KeyboardInterrupt:
        sys.exit(0)


def _print_message(msg: Any) -> None:
    stamp = time.strftime("%H:%M:%S", time.localtime(msg.ts)) + f".{int(msg.ts * 1000) % 1000:03d}"
    tags = [t for t, on in (("full", msg.full), ("final", msg.final)) if on]
    head = f"{stamp} {msg.instance} #{msg.seq}" + (f" [{','.join(tags)}]" if tags else "")
    for h in msg.hot:
        key = _show_key(h.key)
        click.echo(
            f"{head} HOT  {key} rate={h.rate:.1f}/s rule={h.rule} ttl={h.ttl_ms}ms"
            + (f" kind={h.kind}" if h.kind else "")
        )
    for c in msg.cool:
        key = _show_key(c.key)
        click.echo(f"{head} COOL {key} rule={c.rule}")
    if not msg.hot and not msg.cool:
        click.echo(f"{head} (no changes)")


def _default_check_url() -> str:
    import os

    return f"http://127.0.0.1:{os.environ.get('HOTKEYD_HTTP_PORT', '9108')}"


@cli.command()
@click.option(
    "--http",
    "http",
    default=_default_check_url,
    show_default="http://127.0.0.1:$HOTKEYD_HTTP_PORT (9108)",
    envvar="HOTKEYD_CHECK_URL",
    show_envvar=True,
    help="Daemon HTTP endpoint to probe.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Also fail when the daemon runs degraded (Redis or a source unreachable).",
)
@click.option(
    "--redis-url",
    envvar="HOTKEYD_REDIS_URL",
    default=None,
    help="Instead, check that a daemon heartbeat is fresh in this Redis.",
)
@click.option(
    "--namespace",
    envvar="HOTKEYD_NAMESPACE",
    default="hotkeyd",
    show_default=True,
    help="Prefix of every Redis name (with --redis-url).",
)
@click.option(
    "--max-age",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="With --redis-url: newest heartbeat must be this recent, seconds.",
)
def check(http: str, strict: bool, redis_url: str | None, namespace: str, max_age: float) -> None:
    """Health check for orchestrators: exit 0 when healthy, 1 when not.

    The daemon is unhealthy when its loop has stopped ticking. It is *degraded*, not
    unhealthy, while Redis or a source is unreachable: it keeps detecting and retries,
    and restarting it would not help. --strict fails on degraded too.
    """

    def go() -> int:
        if redis_url:
            import redis as redis_py

            from hotkeyd.conn.redis import client_from_url, translate_redis_error
            from hotkeyd.wire import Namespace

            client = client_from_url(redis_url)
            try:
                newest = client.zrevrange(
                    Namespace(prefix=namespace).instances, 0, 0, withscores=True
                )
            except (redis_py.RedisError, OSError) as exc:
                raise translate_redis_error(exc, redact_any_url(redis_url)) from exc
            if not newest:
                raise HotkeydError("no hotkeyd instance has written a heartbeat")
            age = time.time() - float(newest[0][1])
            if age > max_age:
                raise HotkeydError(f"newest heartbeat is {age:.1f}s old (max {max_age}s)")
            click.echo(f"ok: heartbeat {age:.1f}s ago")
            return 0
        import urllib.error
        import urllib.request

        url = http.rstrip("/") + "/healthz"
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--http must be an http:// URL, got {http!r}")
        try:
            with urllib.request.urlopen(url, timeout=3) as resp:
                body = resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise HotkeydError(
                f"unhealthy: {exc.code} {exc.read().decode(errors='replace')}"
            ) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HotkeydError(f"cannot reach {url}: {exc}") from exc
        try:
            status = json.loads(body).get("status", "ok")
        except (ValueError, AttributeError):
            status = "ok"
        if strict and status != "ok":
            raise HotkeydError(f"degraded: {body}")
        click.echo(f"{status}: {body}")
        return 0

    sys.exit(_translate(go))


@cli.command()
@click.option("--duration", default=14.0, show_default=True, help="Seconds to run.")
@click.option(
    "--rate", default=150_000.0, show_default=True, help="Background accesses per second."
)
@click.option(
    "--keys", "universe", default=100_000, show_default=True, help="Distinct background keys."
)
@click.option("--alpha", default=1.0, show_default=True, help="Zipf skew of the background.")
@click.option("--no-redis", is_flag=True, help="Do not start redis-server; publish in-process.")
@click.option("--plain", is_flag=True, help="One status line per second instead of a live view.")
def demo(
    duration: float, rate: float, universe: int, alpha: float, no_redis: bool, plain: bool
) -> None:
    """See hotkeyd work: a Zipf workload where one key turns hot, then cools.

    Starts a throwaway redis-server on a free port if one is installed, runs the
    daemon and a subscribed app in this process, and shows the top keys live.
    """
    from hotkeyd.cli.demo import run_demo

    _setup_logging("WARNING")

    def go() -> int:
        s = run_demo(
            duration=duration,
            rate=rate,
            universe=universe,
            alpha=alpha,
            use_redis=not no_redis,
            live=False if plain else None,
        )
        return 0 if s.detection_latency is not None else 1

    sys.exit(_translate(go))


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="hotkeyd")


if __name__ == "__main__":  # pragma: no cover
    main()
