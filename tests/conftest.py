"""Shared fixtures. Tests run against real PostgreSQL and Redis (the test command sets
DATABASE_URL and CELERY_BROKER_URL); see README."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from deployments.services.catalog import catalog_load


def _user(username: str, role: str | None) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def viewer(db: Any) -> User:
    return _user("vera", "viewer")


@pytest.fixture
def operator(db: Any) -> User:
    return _user("otto", "operator")


@pytest.fixture
def admin_user(db: Any) -> User:
    return _user("ada", "admin")


@pytest.fixture
def catalog(db: Any) -> None:
    catalog_load()
