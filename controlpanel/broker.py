"""What a GPU host may do on the broker, in one place (no Django, no Celery).

A host's agent runs one Celery worker that consumes its own queue, `host.<name>`, through
kombu's Redis transport. With remote control and worker events off (settings_shared), that
worker touches exactly these keys and nothing else:

- the queue itself, a list (one priority step, so no `host.<name>\\x06\\x16<n>` siblings);
- the queue's binding sets `_kombu.binding.<queue>` and `_kombu.binding_permanent.<queue>`
  (the worker declares its queue at start; the panel's publish reads them);
- its own unacknowledged-message keys (a hash, a sorted-set index and a mutex): per host, so
  that a host neither reads another's or the panel's pending messages nor redelivers them.

The panel prints a Redis ACL user allowing only that (`manage.py host broker-user NAME`), and
the agent configures its worker with the same unacked keys (hostagent.agent). kombu's
`global_keyprefix` is left alone: the panel publishes to the host's queue under its real name.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from urllib.parse import quote, urlsplit, urlunsplit

# The commands kombu's Redis transport (5.6, 5.7) and redis-py send for a consumer of one queue,
# measured on a real redis-server (tests/test_broker_acl.py runs a real worker under this list):
# consume and size the queue; declare its binding; keep, acknowledge and redeliver unacked
# messages (WATCH/MULTI/EXEC transactions); the redelivery mutex is a redis-py lock, released by
# a Lua script (EVALSHA, SCRIPT LOAD; Redis checks every command a script runs against the same
# ACL, and GET/DEL are the script's). Nothing of pub/sub, no KEYS/SCAN, no admin commands.
# redis-py's CLIENT SETINFO on connecting is refused (redis-py ignores that; Redis 7.0 knows no
# `client|setinfo` rule, and all of CLIENT would let a host list and kill the panel's connections):
# ACL LOG counts it under one `client` entry per host.
HOST_COMMANDS: tuple[str, ...] = (
    "brpop",
    "llen",
    "exists",
    "lpush",
    "rpush",
    "sadd",
    "smembers",
    "hset",
    "hget",
    "hdel",
    "zadd",
    "zrem",
    "zrange",
    "zrevrangebyscore",
    "watch",
    "unwatch",
    "multi",
    "exec",
    "discard",
    "set",
    "get",
    "del",
    "evalsha",
    "script|load",
    "ping",
    "select",
)

_USER_SAFE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


def host_unacked_keys(queue: str) -> dict[str, str]:
    """kombu transport options giving one host's worker its own unacked-message keys."""
    return {
        "unacked_key": f"_kombu.unacked.{queue}",
        "unacked_index_key": f"_kombu.unacked_index.{queue}",
        "unacked_mutex_key": f"_kombu.unacked_mutex.{queue}",
    }


def host_keys(queue: str) -> list[str]:
    """Every Redis key the host's worker uses, exactly (no wildcard reaches another host)."""
    return [queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}", *host_unacked_keys(queue).values()]


def broker_user_name(queue: str) -> str:
    """The Redis user of the host whose queue this is: the queue's own name (`host.gpu1`)."""
    if not _USER_SAFE.match(queue):
        raise ValueError(f"{queue[:80]!r} is not a queue name a Redis user can be named after")
    return queue


def new_broker_password() -> str:
    return secrets.token_urlsafe(32)


def _glob_literal(key: str) -> str:
    """A key as a Redis ACL pattern matching only itself."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", key)


def acl_rules(queue: str, password: str) -> list[str]:
    """The ACL rules of the host's user, the password as its SHA-256 (Redis's `#<hash>` form), so
    neither the users.acl file nor the command line holds it."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    keys = [f"~{_glob_literal(k)}" for k in host_keys(queue)]
    return ["on", f"#{digest}", "resetkeys", "resetchannels", "-@all", *(f"+{c}" for c in HOST_COMMANDS), *keys]


def acl_setuser_argv(queue: str, password: str) -> list[str]:
    """`ACL SETUSER` as arguments (for redis-py's execute_command or redis-cli), resetting first."""
    return ["ACL", "SETUSER", broker_user_name(queue), "reset", *acl_rules(queue, password)]


def users_acl_line(queue: str, password: str) -> str:
    """The user's line for a Redis `aclfile` (users.acl)."""
    return " ".join(["user", broker_user_name(queue), *acl_rules(queue, password)])


def broker_url_for(base_url: str, queue: str, password: str) -> str:
    """The panel's broker URL with the host's user and password in place of the panel's own
    (a `redis://` or `rediss://` URL; the path, the database and the query are kept)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ValueError("a GPU host reaches the broker over TCP: give a redis:// or rediss:// URL with a host name")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = f"{quote(broker_user_name(queue), safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def without_credentials(url: str) -> str:
    """A broker URL with any user and password taken out (safe to print or log)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[1], parts.path, parts.query, parts.fragment))
