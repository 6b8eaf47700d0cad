"""The one secret masker (core.secrets_mask) against every URL shape of every service Apprise
knows, built from Apprise's own plugin metadata, not from a sample; and the shapes of the
panel's other secrets (bearer tokens, user:password URLs, key=value pairs, its own tokens)."""

from __future__ import annotations

import itertools
import re
from typing import Any

import apprise
import pytest

from core.secrets_mask import MASK, mask_env, mask_text

_SCHEMAS = [s for s in apprise.Apprise().details(show_disabled=True)["schemas"] if s["details"].get("templates")]
_counter = itertools.count(1)


def _protocols(schema: dict[str, Any]) -> list[str]:
    return [*(schema.get("protocols") or ()), *(schema.get("secure_protocols") or ())]


def _matches(spec: dict[str, Any], value: str) -> bool:
    regex = spec.get("regex")
    if not regex:
        return True
    flags = re.IGNORECASE if len(regex) > 1 and "i" in (regex[1] or "") else 0
    return re.match(regex[0], value, flags) is not None


def _secret_value(spec: dict[str, Any]) -> str:
    """A recognisable secret that fits the token's own regex when one of these shapes does (so
    Apprise accepts the URL, and its own `url()` forms can be checked too)."""
    n = next(_counter)
    base = f"Zq{n:03d}SeCrEt{n:03d}xK7mP2wL9vR4tY8nB3cD6fG1hJ5"
    digits = f"9{n:03d}87654321098765432109876543210"
    hexed = f"ab{n:03d}cdef0123456789abcdef0123456789abcdef0123456789abcdef"
    shapes: list[str] = []
    for length in (32, 40, 24, 20, 16, 43, 44, 48, 64, 36, 30, 26, 22, 12, 10, 8):
        shapes += [base[:length], base[:length].lower(), base[:length].upper(), hexed[:length], digits[:length]]
    shapes += [f"{digits[:10]}:{base}", f"{digits[:10]}:{base[:35]}", f"sk-{base}", f"+1555{n:07d}"]
    return next((s for s in shapes if _matches(spec, s)), base)


def _plain_value(name: str, spec: dict[str, Any]) -> str:
    kind = str(spec.get("type", ""))
    if name == "host":
        return "Mixed.Host.Example"
    if name == "port":
        return "8443"
    if name in ("path", "fullpath"):
        return "/some/Path/"
    if kind.startswith("choice") and spec.get("values"):
        values = spec["values"]
        return str(sorted(values)[0] if isinstance(values, set | frozenset) else values[0])
    if kind.startswith("list"):
        return "Target1/Target2"
    if kind in ("int", "float"):
        return "5"
    if kind == "bool":
        return "yes"
    candidates = ["PlainValue", "plainvalue", "12345678", "+15551234567", "ops@lab.example", "PLAINVALUE", "#channel"]
    return next((c for c in candidates if _matches(spec, c)), "PlainValue")


def _cases() -> list[Any]:
    cases = []
    for schema in _SCHEMAS:
        for protocol in _protocols(schema):
            for template in schema["details"]["templates"]:
                cases.append(pytest.param(schema, protocol, template, id=f"{protocol}:{template.split('://', 1)[1]}"))
    return cases


def _build(schema: dict[str, Any], protocol: str, template: str) -> tuple[str, list[str]]:
    """The URL the template describes with a value for every token, and the private values in it;
    every private query argument of the service is added with a secret value too."""
    tokens = schema["details"]["tokens"]
    secrets: list[str] = []

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "schema":
            return protocol
        spec = tokens.get(name) or {}
        if spec.get("private"):
            value = _secret_value(spec)
            secrets.append(value)
            return value
        return _plain_value(name, spec)

    url = re.sub(r"\{([A-Za-z0-9_]+)\}", fill, template)
    private_args = [
        name
        for name, spec in schema["details"]["args"].items()
        if spec.get("private") or (tokens.get(spec.get("alias_of") or "") or {}).get("private")
    ]
    query = []
    for name in private_args:
        value = _secret_value({})
        secrets.append(value)
        query.append(f"{name}={value}")
    if query:
        url += ("&" if "?" in url else "?") + "&".join(query)
    return url, secrets


def _survivors(text: str, secrets: list[str]) -> list[str]:
    return [s for s in secrets if s in text]


@pytest.mark.parametrize(("schema", "protocol", "template"), _cases())
def test_no_private_token_of_any_apprise_url_survives_the_masker(schema: Any, protocol: str, template: str) -> None:
    url, secrets = _build(schema, protocol, template)
    assert MASK not in url
    # The URL alone, as any log line or error may hold it (the masker is not told it is a secret).
    assert _survivors(mask_text(url), secrets) == [], url
    assert _survivors(mask_text(f"Failed to send to {url}: connection refused."), secrets) == [], url
    # The way a delivery's error is kept: Apprise's lines, which repeat tokens without their URL,
    # masked with the channel's URL.
    error = " / ".join(
        [
            f"Failed to send {schema['service_name']} notification to {url}.",
            *(f"Invalid token ({s}) specified." for s in secrets),
            *(f"Max retries exceeded with url: /api/{s}/send (Caused by ProxyError)" for s in secrets),
        ]
    )
    assert _survivors(mask_text(error, urls=[url]), secrets) == [], url
    # The forms Apprise itself writes the URL in (its log lines use the "privacy" form, which
    # still shows a token's first and last characters).
    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if plugin is not None:
        for form in (plugin.url(privacy=False), plugin.url(privacy=True)):
            said = mask_text(f"Sending to {form} failed")
            assert _survivors(said, secrets + [f"{s[0]}...{s[-1]}" for s in secrets]) == [], form


def test_the_template_cases_cover_every_service_apprise_lists() -> None:
    covered = {id(p.values[0]) for p in _cases()}
    assert len(_SCHEMAS) > 100 and covered == {id(s) for s in _SCHEMAS}


@pytest.mark.parametrize(
    ("url", "secrets", "kept"),
    [
        # The three: a bot token that looks like host:port, a webhook id, mixed-case tokens.
        ("tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/-100987654", ["AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"], []),
        (
            "discord://112233445566778899/Ab-Cd_EfGhIjKlMnOpQrStUvWx",
            ["112233445566778899", "Ab-Cd_EfGhIjKlMnOpQrStUvWx"],
            [],
        ),
        ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#General", ["T1JJ3T3L2", "A1BRTD4JD", "TIiaj"], []),
        # The https forms these services accept.
        (
            "https://discord.com/api/webhooks/112233445566778899/Ab-Cd_EfGh",
            ["112233445566778899", "Ab-Cd_EfGh"],
            ["discord.com"],
        ),
        ("https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ", ["T1JJ3T3L2", "TIiaj"], []),
        ("https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage", ["AAHdqTcv"], []),
        # Host names keep their case; user:password goes whatever the scheme.
        ("gotify://Gotify.Lab.Example/AbCdEfGhIjKl", ["AbCdEfGhIjKl"], ["Gotify.Lab.Example"]),
        ("pover://uQiRzpo4DXghDmr9QzzfQu27cmVRsG@azGDORePK8gMaC0QOYAMyEEuzJnyUi", ["uQiRzpo4", "azGDORePK8"], []),
        ("json://ops:Hunter2Pass@Hooks.Lab.Example:8443/In?apikey=K3y99&to=x", ["Hunter2Pass", "K3y99"], ["Hooks.Lab"]),
        ("https://deploy:Hunter2Pass@git.lab.example/repo.git", ["Hunter2Pass", "deploy"], ["git.lab.example"]),
        ("http://127.0.0.1:8000/v1/models?api_key=sk-local-1234", ["sk-local-1234"], ["127.0.0.1:8000/v1/models"]),
        ("redis://:BrokerPass9@redis.lab:6379/0", ["BrokerPass9"], ["redis.lab:6379/0"]),
    ],
)
def test_urls_lose_their_secrets_and_keep_the_rest(url: str, secrets: list[str], kept: list[str]) -> None:
    said = mask_text(f"POST to {url} failed (Connection refused).")
    assert _survivors(said, secrets) == [], said
    assert all(k in said for k in kept), said
    assert said.endswith("failed (Connection refused).")


def test_a_channel_urls_tokens_are_masked_where_the_http_library_repeats_them_alone() -> None:
    url = "tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/-100987654"
    error = (
        "Socket Exception: HTTPSConnectionPool(host='api.telegram.org', port=443): Max retries exceeded with "
        "url: /bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage (Caused by ProxyError)"
    )
    said = mask_text(error, urls=[url])
    assert "AAHdqTcv" not in said and "123456789" not in said
    assert "host='api.telegram.org', port=443" in said


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig-nature", "eyJhbGci"),
        ("curl -H 'Authorization: Basic dXNlcjpwYXNz' http://x", "dXNlcjpwYXNz"),
        ("sending Bearer cpat_abcdefghijklmnopqrstuvwxyz0123 to the panel", "cpat_abcdefghijklmnop"),
        ("CONTROLPANEL_HOST_TOKEN=cph_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "cph_AbCdEf"),
        ("args: api_key=['sk-proj-abcdefghijklmnopqrstu'], port=8000", "sk-proj"),
        ('{"password": "correct horse battery", "user": "ops"}', "correct horse"),
        ("connecting with token=Xy7Kq9Lm2Np4 to the hub", "Xy7Kq9Lm2Np4"),
        ("vllm serve m --api-key LetMeIn99 --port 8000", "LetMeIn99"),
        ("HF_TOKEN = hf_abcdefghijklmnopqrstuvwxyz012345", "hf_abcdefgh"),
        ("client_secret: s3cr3t-v4lue", "s3cr3t-v4lue"),
        ("proxy at http://alice:Wonderland1@proxy.lab:3128 refused", "Wonderland1"),
        ("POST /api/webhooks/112233445566778899/Ab-Cd_EfGhIjKlMnOp returned 401", "Ab-Cd_EfGhIjKlMnOp"),
        ("url: /services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ", "TIiajkdnlazkcOXrIdevi7FQ"),
        ("Max retries exceeded with url: /bot123456789:AAHdqTcvCH1vGWJxf/sendMessage", "AAHdqTcv"),
        ("slack said invalid_auth for xoxb-1234567890-abcdefghij", "xoxb-1234567890"),
    ],
)
def test_secret_shapes_without_a_known_value_are_masked(line: str, secret: str) -> None:
    said = mask_text(line)
    assert secret not in said and MASK in said, said


@pytest.mark.parametrize(
    "line",
    [
        "print_info: EOS token        = 106 '<end_of_turn>'",
        "max_num_batched_tokens=8192 num_speculative_tokens=3 max_tokens=512",
        'INFO: 127.0.0.1:51234 - "GET /v1/models HTTP/1.1" 200 OK',
        "Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
        "Downloading https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json",
        "llama_kv_cache: size = 192.00 MiB (  4096 cells,  18 layers,  1/1 seqs)",
    ],
)
def test_ordinary_log_lines_are_left_as_they_are(line: str) -> None:
    assert mask_text(line) == line


def test_known_values_are_masked_and_an_environment_by_name_and_value() -> None:
    assert mask_text("engine started with key-123 and key-1234", ["key-1234", "key-123", ""]) == (
        f"engine started with {MASK} and {MASK}"
    )
    env = {"VLLM_API_KEY": "abc", "HTTPS_PROXY": "http://u:ProxyPass1@proxy:3128", "MAX_TOKENS": "5", "EMPTY_KEY": ""}
    masked = mask_env(env)
    assert masked["VLLM_API_KEY"] == MASK and "ProxyPass1" not in masked["HTTPS_PROXY"]
    assert masked["MAX_TOKENS"] == "5" and masked["EMPTY_KEY"] == ""


def test_a_revision_diff_shows_no_password_from_an_env_value_or_a_flag() -> None:
    from serving.diffing import RevisionView, diff_revisions, parse_argv, render_text

    old = RevisionView(number=1, env={"HTTPS_PROXY": "http://lab:OldPass1@proxy.lab:3128"})
    new = RevisionView(number=2, env={"HTTPS_PROXY": "http://lab:NewPass2@proxy.lab:3128"})
    text = render_text(diff_revisions(old, new))
    assert "HTTPS_PROXY" in text and "proxy.lab:3128" in text
    assert "OldPass1" not in text and "NewPass2" not in text
    flags = parse_argv(["vllm", "serve", "m", "--hf-endpoint", "https://ci:MirrorPass3@mirror.lab/hf"])
    assert flags["--hf-endpoint"] == f"https://{MASK}@mirror.lab/hf"
