"""Channel URLs at rest: Fernet, keyed like the hosts' secrets (deployments.services.secrets)
on SECRETS_ENCRYPTION_KEY or the panel's SECRET_KEY, under a context of its own."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class UndecryptableError(ValueError):
    """The stored URL was encrypted with another installation's key."""


def _fernet() -> Fernet:
    key = getattr(settings, "SECRETS_ENCRYPTION_KEY", "") or settings.SECRET_KEY
    digest = hashlib.sha256(f"controlpanel-notification-channels:{key}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def url_encrypt(url: str) -> bytes:
    return _fernet().encrypt(url.encode())


def url_decrypt(ciphertext: bytes | memoryview) -> str:
    """The plain URL, for sending. Never render, log or audit it."""
    try:
        return _fernet().decrypt(bytes(ciphertext)).decode()
    except InvalidToken as exc:
        raise UndecryptableError("The channel's URL cannot be decrypted with this installation's key.") from exc
