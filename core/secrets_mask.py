"""The one secret masker: every error, log line, argv, environment and page text the panel keeps
or shows goes through `mask_text` (or `mask_env` for an environment) before it is stored.

It masks, in this order:
- the secret values the caller knows (an engine's API key, a channel's URL and its parts);
- every URL in the text, by what the URL is. A scheme Apprise knows: its `user:password@`, its
  whole path, the query arguments its plugin metadata marks secret (or names like a key, token,
  password, secret, webhook or signature), and its host unless every one of the service's URL
  templates that matches says a host stands there (a Telegram bot token `123:ABC` is a token, not
  a host and a port; a shape no template describes is masked whole); what is left keeps its case.
  Any other URL loses its `user:password@` and the values of secret-looking query keys; an
  http(s) URL that Apprise reads as a service's own form
  (`https://discord.com/api/webhooks/<id>/<token>`, `https://hooks.slack.com/services/...`) loses
  that service's secret parts; a scheme nobody here knows is masked whole. The secret parts of a
  URL are masked wherever else they appear in the same text too (an HTTP library's error repeats
  the path alone);
- the usual shapes without a URL: `Authorization:` and `Bearer` values, `--api-key VALUE`,
  `token=` / `api_key:` / `password=` pairs, Hugging Face, OpenAI-style, Slack, GitHub and the
  panel's own tokens (`cpat_`, `cph_`), Telegram bot tokens, Discord and Slack webhook paths, JWTs.

Pure: no Django, no I/O. Apprise is imported lazily, the first time a text holds a URL it may
describe (about a second, once per process), so a log line without one costs a few regular
expressions; without Apprise installed, a URL of any scheme but the plain ones is masked whole.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

MASK = "********"

# Names that hold credentials: *KEY*, *TOKEN*, *SECRET*, *PASSWORD* (and close spellings), but not
# counts such as max_num_batched_tokens or num_speculative_tokens.
_SECRET_NAME = re.compile(r"KEY(?!S)|TOKEN(?!S)|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# What else marks an Apprise token or query argument as secret when the plugin forgot `private`.
_SECRET_PART = re.compile(r"key|token|secret|pass|pwd|hook|sig|auth|sid$|credential", re.IGNORECASE)
_MIN_DERIVED = 3  # a URL part shorter than this is not replaced elsewhere in the text

_URL = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z0-9][A-Za-z0-9+.-]{0,31})://([^\s\"'<>`]*)")
_TRAILING = ".,;:)]}!"

_VALUE = r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s'\",\]&;]+)"
_PATTERNS: list[re.Pattern[str]] = [
    # Authorization: Bearer X / Authorization: Basic X / "authorization": "X"
    re.compile(r"(\bAuthorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z]+\s+)?)([^\s\"',;]+)", re.IGNORECASE),
    re.compile(r"(\b(?:Bearer|Basic)\s+)([A-Za-z0-9._~+/=-]{4,})", re.IGNORECASE),
    # --api-key VALUE, --api-key=VALUE, --hf-token VALUE, --password VALUE, --token=VALUE
    re.compile(
        r"(--(?:[a-z0-9]+-)*(?:api-key|token|password|passwd|secret)(?:=|\s+))([^\s'\",\]]+)",
        re.IGNORECASE,
    ),
    # api_key='VALUE', "api_key": ["VALUE"], API_KEY = VALUE, HF_TOKEN=VALUE (spaces allowed: these names
    # are never anything but credentials); a quoted value is masked to its closing quote.
    re.compile(
        r"(\b(?:api[_-]?keys?|apikey|hf[_-]?token|hugging_face_hub_token|access[_-]?token|auth[_-]?token"
        r"|client[_-]?secret|secret[_-]?key|private[_-]?key|access[_-]?key)['\"]?\s*[:=]\s*\[?\s*)" + _VALUE,
        re.IGNORECASE,
    ),
    # token=VALUE, password: VALUE, db_password="VALUE", secret=VALUE (no space before the sign: llama.cpp's
    # "EOS token = 2" is a vocabulary entry)
    re.compile(r"(\b(?:[A-Za-z0-9]+[_.-])*(?:token|password|passwd|pwd|secret)['\"]?[:=]\s*)" + _VALUE, re.IGNORECASE),
    # Token shapes, wherever they stand.
    re.compile(r"()(\b(?:hf|cpat|cph|gh[pousr]|glpat)_[A-Za-z0-9_-]{16,})"),
    re.compile(r"()(\bsk-[A-Za-z0-9_-]{16,})"),
    re.compile(r"()(\bxox[abposr]-[A-Za-z0-9-]{8,})"),
    re.compile(r"()(\b\d{5,}:[A-Za-z0-9_-]{20,})"),  # Telegram bot token
    re.compile(r"()(\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)"),  # JWT
    # Webhook paths an HTTP library repeats without their host.
    re.compile(r"(/api/webhooks/)(\d+/[^\s/?\"')]+)"),
    re.compile(r"(/services/)([A-Z0-9]{6,}/[A-Z0-9]{6,}/[A-Za-z0-9]{12,})"),
    re.compile(r"(/bot)(\d+:[^\s/?\"')]+)"),
]


def is_secret_name(name: str) -> bool:
    """True for env names and flags that carry credentials (HF_TOKEN, --api-key, ...)."""
    return bool(_SECRET_NAME.search(name))


def mask_env(env: Mapping[str, Any]) -> dict[str, str]:
    """The env with every secret-named value replaced by the mask, and the others masked as text
    (a proxy URL's password)."""
    return {k: (MASK if is_secret_name(k) and v not in (None, "") else mask_text(str(v))) for k, v in env.items()}


def mask_values(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` (exact values; empty ones ignored) replaced, longest first."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def mask_text(text: str, secrets: Iterable[str] = (), urls: Iterable[str] = ()) -> str:
    """`text` as it may be stored or shown: the known `secrets`, and `urls` (a channel's URL) with
    their secret parts, replaced wherever they appear (an HTTP library's error repeats a token
    without its URL), then every URL in the text and every secret-looking shape masked (see the
    module's doc)."""
    if not text:
        return text
    known = [s for s in secrets if s]
    for url in (u.strip() for u in urls if u and u.strip()):
        known += [url, unquote(url), *_variants(url_secret_parts(url))]
    for match in _URL.finditer(text):
        known += _variants(url_secret_parts(match.group(0)))
    text = mask_values(text, known)
    text = _URL.sub(_mask_url_match, text)
    for pattern in _PATTERNS:
        text = pattern.sub(_mask_value, text)
    return text


def url_secret_parts(url: str) -> list[str]:
    """The secret parts of one URL, as they are written in it."""
    match = _URL.match(url.strip())
    if not match:
        return []
    body = _strip_trailing(match.group(2))[0]
    parts = [body[a:b] for a, b in _secret_spans(match.group(1), body)[1]]
    # A secret list (targets that are keys) is repeated one item at a time.
    return parts + [piece for part in parts for piece in re.split(r"[/,\s]+", part) if piece != part]


# --- inside ----------------------------------------------------------------------------------------


def _mask_value(match: re.Match[str]) -> str:
    """A pattern's match: its prefix, then the mask (inside the value's quotes, if it has them)."""
    value = match.group(2)
    quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
    return match.group(1) + (value[0] + MASK + value[0] if quoted else MASK)


def _variants(parts: list[str]) -> list[str]:
    out = set()
    for part in parts:
        if len(part) >= _MIN_DERIVED and part != MASK:
            out |= {part, unquote(part), quote(part, safe="")}
    return [p for p in out if len(p) >= _MIN_DERIVED]


def _strip_trailing(body: str) -> tuple[str, str]:
    """A URL's body without the punctuation that closes the sentence around it (a `)` it opened stays)."""
    end = len(body)
    while end and body[end - 1] in _TRAILING:
        if body[end - 1] == ")" and body[:end].count("(") >= body[:end].count(")"):
            break
        end -= 1
    return body[:end], body[end:]


def _mask_url_match(match: re.Match[str]) -> str:
    scheme = match.group(1)
    body, tail = _strip_trailing(match.group(2))
    for start, end in reversed(_merge(_secret_spans(scheme, body)[0])):
        body = body[:start] + MASK + body[end:]
    return f"{scheme}://{body}{tail}"


def _secret_spans(scheme: str, body: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Of `body` (what follows `scheme://`): the spans to mask in the URL, and the spans that are
    secrets on their own (masked wherever else they appear in the text). They may overlap."""
    scheme = scheme.lower()
    web = scheme in ("http", "https")
    if web:
        body = body.split("#", 1)[0]
    head, _, query = body.partition("?")
    # Apprise is read only for a URL it may describe: a log's "http://0.0.0.0:8000" costs nothing.
    services = _apprise_services() if scheme not in _PLAIN_SCHEMES or (web and head.count("/") > 1) else None
    service = services.get(scheme) if services is not None else None
    slash = head.find("/")
    authority_end = slash if slash >= 0 else len(head)
    at = head.rfind("@", 0, authority_end)
    masked: list[tuple[int, int]] = []
    alone: list[tuple[int, int]] = []
    if at > 0:  # user:password@ (or token@): never shown, whatever the scheme
        masked.append((0, at))
        colon = head.find(":", 0, at)
        alone.append((colon + 1, at))  # the password (or a token standing alone), not a user name
    if service is not None or (scheme not in _PLAIN_SCHEMES):
        # An Apprise service (or a scheme nobody here knows): its path is masked whole, and its
        # host too unless every template that matches the URL says that a host stands there.
        host_secret = service is None
        matched = False
        for regex, secret_groups in service.templates if service is not None else ():
            found = regex.fullmatch(head)
            if found:
                matched = True
                spans = [found.span(g) for g in secret_groups if found.group(g)]
                alone += spans
                host_secret = host_secret or any(start < authority_end and end > at + 1 for start, end in spans)
        if not matched:
            host_secret = True
        if host_secret:
            alone.append((at + 1, authority_end))
            masked.append((at + 1, authority_end))
        if slash >= 0:
            masked.append((slash + 1, len(head.rstrip("/"))))
            alone += [(slash + 1 + m.start(), slash + 1 + m.end()) for m in re.finditer(r"[^/]+", head[slash + 1 :])]
    if web and services is not None:
        for value in _native_secrets(f"{scheme}://{body}"):
            found_spans = [(m.start(), m.end()) for m in re.finditer(re.escape(value), head)]
            masked += found_spans
            alone += found_spans
    if query:
        offset = len(head) + 1
        secret_args = service.secret_args if service is not None else frozenset()
        for pair in query.split("&"):
            key, eq, value = pair.partition("=")
            name = unquote(key).lower()
            if eq and value and (name in secret_args or name.startswith("+") or _SECRET_PART.search(name)):
                start = offset + len(key) + 1
                masked.append((start, start + len(value)))
                alone.append((start, start + len(value)))
            offset += len(pair) + 1
    return [s for s in masked if s[1] > s[0]], [s for s in alone if s[1] > s[0]]


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


# Schemes that are places, not notification services: their URL's secrets are its user:password and
# its query's secret-looking values. Any other scheme Apprise does not know is masked whole.
_PLAIN_SCHEMES = frozenset(
    {"http", "https", "ws", "wss", "ftp", "ftps", "sftp", "ssh", "file", "git", "hf", "s3", "unix", "tcp", "udp", "ipc"}
    | {"postgres", "postgresql", "mysql", "sqlite", "redis", "rediss", "sentinel", "socks5", "socks5h", "grpc"}
)


@dataclass(frozen=True)
class _Service:
    templates: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = ()
    secret_args: frozenset[str] = field(default_factory=frozenset)


def _is_secret_token(name: str, spec: Mapping[str, Any]) -> bool:
    return (
        bool(spec.get("private"))
        or bool(_SECRET_PART.search(name))
        or bool(_SECRET_PART.search(spec.get("map_to") or ""))
    )


def _template_regex(template: str, tokens: Mapping[str, Any]) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """`{schema}://{user}:{password}@{host}/{targets}` -> a regex over what follows `://`, and the
    groups that hold secrets."""
    body = template.split("://", 1)[-1].rstrip("/")
    pattern, secret = "", []
    for i, part in enumerate(re.split(r"(\{[A-Za-z0-9_]+\})", body)):
        if part.startswith("{") and part.endswith("}"):
            name = part[1:-1]
            spec = tokens.get(name) or {}
            many = str(spec.get("type", "")).startswith("list") or name in ("path", "fullpath")
            group = f"t{i}"
            pattern += f"(?P<{group}>{'.*?' if many else '[^/:@]+' if name in ('host', 'port') else '[^/]+'})"
            if _is_secret_token(name, spec):
                secret.append(group)
        else:
            pattern += re.escape(part)
    # A path beyond the template's (a webhook's) is allowed: every path is masked anyway.
    return re.compile(pattern + "(?:/.*)?", re.DOTALL), tuple(secret)


@functools.cache
def _apprise_services() -> dict[str, _Service] | None:
    """Scheme -> its templates and secret query arguments, from Apprise's own plugin metadata."""
    try:
        import apprise
    except ImportError:  # pragma: no cover - Apprise is a dependency; the fallback masks more
        return None
    templates: dict[str, list[tuple[re.Pattern[str], tuple[str, ...]]]] = {}
    args: dict[str, set[str]] = {}
    for schema in apprise.Apprise().details(show_disabled=True)["schemas"]:
        details = schema.get("details") or {}
        tokens = details.get("tokens") or {}
        secret_tokens = {name for name, spec in tokens.items() if _is_secret_token(name, spec)}
        secret_args = {
            name.lower()
            for name, spec in (details.get("args") or {}).items()
            if _is_secret_token(name, spec) or spec.get("alias_of") in secret_tokens
        }
        compiled = [_template_regex(t, tokens) for t in details.get("templates") or ()]
        for protocol in [*(schema.get("protocols") or ()), *(schema.get("secure_protocols") or ())]:
            templates.setdefault(protocol.lower(), []).extend(compiled)
            args.setdefault(protocol.lower(), set()).update(secret_args)
    return {p: _Service(tuple(templates[p]), frozenset(args[p])) for p in templates}


@functools.lru_cache(maxsize=512)
def _native_secrets(url: str) -> tuple[str, ...]:
    """The secret values of an http(s) URL that an Apprise service reads as its own (Discord's,
    Slack's and Teams' webhook URLs, ...); () when none does."""
    try:
        from apprise.plugins import N_MGR
    except ImportError:  # pragma: no cover
        return ()
    plugins: Callable[[], Iterable[Any]] = N_MGR.plugins  # Apprise's manager is untyped
    for plugin in plugins():
        try:
            results = plugin.parse_native_url(url)
        except Exception:  # noqa: S112 - one plugin's parser failing says nothing about the URL
            continue
        if not results:
            continue
        keys = {"password"}
        for name, spec in {**getattr(plugin, "template_tokens", {}), **getattr(plugin, "template_args", {})}.items():
            if isinstance(spec, dict) and _is_secret_token(name, spec):
                keys |= {name, spec.get("map_to") or name}
        values: list[str] = []
        for key in keys:
            value = results.get(key)
            for item in value if isinstance(value, list | tuple | set) else [value]:
                if isinstance(item, str) and len(item) >= _MIN_DERIVED:
                    values.append(item)
        return tuple(values)
    return ()
