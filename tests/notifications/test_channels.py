"""Sending through Apprise to real local endpoints: a JSON webhook receiver, an SMTP server
(aiosmtpd), a receiver that never answers; and what a failure may say (never the URL's secrets)."""

from __future__ import annotations

import pytest

from core.secrets_mask import MASK, mask_text
from notifications.channels import ChannelUrlError, channel_check, channel_send
from tests.support.receivers import SilentReceiver, SmtpServer, WebhookReceiver


def test_a_json_webhook_gets_title_and_body_as_json():
    with WebhookReceiver() as hook:
        result = channel_send(f"json://127.0.0.1:{hook.port}/hooks/panel", title="A title", body="line 1\nline 2")
    assert result.delivered and result.error == ""
    [got] = hook.received
    assert got["path"] == "/hooks/panel"
    assert got["headers"]["Content-Type"] == "application/json"
    assert got["json"]["title"] == "A title" and got["json"]["message"] == "line 1\nline 2"


def test_an_email_reaches_a_real_smtp_server_with_subject_and_body():
    with SmtpServer() as smtp:
        url = f"mailto://127.0.0.1:{smtp.port}?from=panel@lab.example&to=ops@lab.example&mode=insecure"
        result = channel_send(url, title="[gpu-box-1] Switch failed", body="Switch of gpu-box-1 to r5 failed.")
    assert result.delivered, result.error
    [mail] = smtp.messages
    assert mail.mail_from == "panel@lab.example" and mail.rcpt_tos == ["ops@lab.example"]
    text = mail.content.decode()
    assert "Subject: [gpu-box-1] Switch failed" in text
    assert "Switch of gpu-box-1 to r5 failed." in text


def test_a_receiver_that_never_answers_fails_with_a_timeout_after_the_read_timeout():
    with SilentReceiver() as silent:
        result = channel_send(f"json://127.0.0.1:{silent.port}/hook?rto=1&cto=1", title="t", body="b")
    assert not result.delivered
    assert "Read timed out" in result.error
    assert 0.9 < result.seconds < 5


def test_a_failure_never_repeats_the_urls_secrets():
    password, token = "hunter2-pass", "tok-9f8e7d6c5b4a"
    with WebhookReceiver(status=500) as hook:
        result = channel_send(
            f"json://ops:{password}@127.0.0.1:{hook.port}/{token}/hook?apikey={token}x", title="t", body="b"
        )
    assert not result.delivered and "error=500" in result.error
    assert password not in result.error and token not in result.error
    slack = "slack://T1JJ3T3L2/A1BRTD4JD/TIiaj!!kdnlazkcOXrIdevi7FQ"  # a third token Apprise refuses
    with pytest.raises(ChannelUrlError) as refused:
        channel_check(slack)
    said = str(refused.value)
    assert f"invalid Slack (third) Token ({MASK})" in said and f"slack://{MASK}" in said
    assert not any(t in said for t in ("T1JJ3T3L2", "A1BRTD4JD", "kdnlazkcOXrIdevi7FQ", "T...2"))
    assert mask_text(f"error sending to {slack} now", urls=[slack]) == f"error sending to {MASK} now"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("windows://", "sends to these kinds of URL only"),  # acts on the panel's own machine
        ("file:///etc/passwd", "sends to these kinds of URL only"),
        ("not a url", "sends to these kinds of URL only"),
        ("", "needs an Apprise URL"),
        ("json://a\nb", "one line"),
        ("slack://", "Apprise cannot use this slack:// URL"),
    ],
)
def test_urls_the_panel_will_not_send_to_are_refused_with_a_reason(url, why):
    with pytest.raises(ChannelUrlError, match=why):
        channel_check(url)


def test_what_a_url_sends_to():
    info = channel_check("ntfys://ntfy.sh/lab-alerts")
    assert (info.scheme, info.service) == ("ntfys", "ntfy")
